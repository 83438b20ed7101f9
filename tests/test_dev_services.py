"""Unit tests of the dev services' pure parts: ports, env, state, paths, CLI wiring.

No server is started here (see integration_tests/test_dev_services.py);
the only processes are short `sleep`s to check process-group cleanup and
the orchestration, standing in for servers.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from eoskit.runtime.devtools.services import (
    DevServicesError,
    DockerServices,
    LocalServices,
    MissingBinaryError,
    ServiceEndpoints,
    register_cli,
)
from eoskit.runtime.devtools.services import kafka as kafka_mod
from eoskit.runtime.devtools.services import kafka_jars
from eoskit.runtime.devtools.services import mariadb as mariadb_mod
from eoskit.runtime.devtools.services import postgres as postgres_mod
from eoskit.runtime.devtools.services import s3 as s3_mod
from eoskit.runtime.devtools.services.endpoints import endpoints_from_env, make_endpoints, render_env, s3_storage_options
from eoskit.runtime.devtools.services.local import SERVICE_NAMES, SERVICES, parse_services, recorded_only
from eoskit.runtime.devtools.services.ports import choose_port, is_port_free, pick_free_port
from eoskit.runtime.devtools.services.processes import (
    ProcessRef,
    group_members,
    is_alive,
    start_process,
    stop_process,
    tail,
)
from eoskit.runtime.devtools.services.state import DevState, ServiceState, load_state, save_state

ENDPOINTS = make_endpoints(9092, 5432, 3306, s3_port=5000)


# -- ports ------------------------------------------------------------------


def test_picked_port_is_free_and_not_excluded():
    first = pick_free_port()
    second = pick_free_port(exclude={first})
    assert first != second
    assert is_port_free(first) and is_port_free(second)


def test_remembered_port_is_kept_while_free_and_replaced_when_taken():
    port = pick_free_port()
    assert choose_port(port) == port
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        assert not is_port_free(port)
        replacement = choose_port(port)
    assert replacement != port


def test_remembered_port_promised_to_another_service_is_not_reused():
    port = pick_free_port()
    assert choose_port(port, exclude={port}) != port


# -- endpoints and env --------------------------------------------------------


def test_endpoints_have_the_documented_shape():
    assert ENDPOINTS == ServiceEndpoints(
        kafka_bootstrap="127.0.0.1:9092",
        postgres_url="postgresql+psycopg://eoskit:eoskit@127.0.0.1:5432/eoskit",
        mysql_url="mysql+pymysql://eoskit:eoskit@127.0.0.1:3306/eoskit",
        s3_endpoint="http://127.0.0.1:5000",
    )
    assert ENDPOINTS.as_env() == {
        "EOSKIT_KAFKA_BOOTSTRAP": "127.0.0.1:9092",
        "EOSKIT_POSTGRES_URL": "postgresql+psycopg://eoskit:eoskit@127.0.0.1:5432/eoskit",
        "EOSKIT_MYSQL_URL": "mysql+pymysql://eoskit:eoskit@127.0.0.1:3306/eoskit",
        "EOSKIT_S3_ENDPOINT": "http://127.0.0.1:5000",
    }


def test_endpoints_without_s3_have_no_s3_variable():
    old = make_endpoints(9092, 5432, 3306)
    assert old.s3_endpoint is None
    assert "EOSKIT_S3_ENDPOINT" not in old.as_env() and "EOSKIT_S3_ENDPOINT" not in render_env(old)


def test_s3_storage_options_carry_endpoint_and_fixed_credentials():
    assert s3_storage_options("http://127.0.0.1:5000") == {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:5000"},
    }


def test_env_lines_are_single_quoted_exports():
    assert render_env(ENDPOINTS).splitlines() == [
        "export EOSKIT_KAFKA_BOOTSTRAP='127.0.0.1:9092'",
        "export EOSKIT_POSTGRES_URL='postgresql+psycopg://eoskit:eoskit@127.0.0.1:5432/eoskit'",
        "export EOSKIT_MYSQL_URL='mysql+pymysql://eoskit:eoskit@127.0.0.1:3306/eoskit'",
        "export EOSKIT_S3_ENDPOINT='http://127.0.0.1:5000'",
    ]


def test_env_lines_survive_a_real_shell_eval_even_with_quotes():
    tricky = ServiceEndpoints("h:1", "postgresql://u:it's $x@h/db", 'mysql://"a"@h/db', "http://h:2/$x'")
    script = render_env(tricky) + (
        'printf "%s\\n" "$EOSKIT_KAFKA_BOOTSTRAP" "$EOSKIT_POSTGRES_URL" "$EOSKIT_MYSQL_URL" "$EOSKIT_S3_ENDPOINT"'
    )
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["h:1", "postgresql://u:it's $x@h/db", 'mysql://"a"@h/db', "http://h:2/$x'"]


def test_endpoints_from_env_needs_all_three_and_s3_is_optional():
    env = ENDPOINTS.as_env()
    assert endpoints_from_env(env) == ENDPOINTS
    for name in ("EOSKIT_KAFKA_BOOTSTRAP", "EOSKIT_POSTGRES_URL", "EOSKIT_MYSQL_URL"):
        partial = {k: v for k, v in env.items() if k != name}
        assert endpoints_from_env(partial) is None
    assert endpoints_from_env({**env, "EOSKIT_MYSQL_URL": "  "}) is None
    # An environment from before the S3 service still gives the other three.
    older = {k: v for k, v in env.items() if k != "EOSKIT_S3_ENDPOINT"}
    assert endpoints_from_env(older) == make_endpoints(9092, 5432, 3306)
    assert endpoints_from_env({**env, "EOSKIT_S3_ENDPOINT": " "}) == make_endpoints(9092, 5432, 3306)


def test_s3_endpoint_without_a_scheme_is_refused_without_echoing_it():
    env = {**ENDPOINTS.as_env(), "EOSKIT_S3_ENDPOINT": "key:s3cret@127.0.0.1:5000"}
    with pytest.raises(DevServicesError, match="EOSKIT_S3_ENDPOINT must be an http:// or https:// URL") as info:
        endpoints_from_env(env)
    assert "s3cret" not in str(info.value)


# -- state file ---------------------------------------------------------------


def test_state_round_trip(tmp_path: Path):
    state = DevState()
    state.service("kafka").port = 1234
    state.service("kafka").ports = {"broker": 1234, "controller": 1235}
    state.services["postgres"] = ServiceState(port=5, pid=42, start_time=99, extra={"data_dir": "/x"})
    save_state(tmp_path, state)
    assert load_state(tmp_path) == state
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no temp file left
    assert state.services["kafka"].all_ports() == {1234, 1235}
    assert state.services["postgres"].all_ports() == {5}


def test_state_file_from_before_extra_ports_reads_as_none():
    text = '{"version": 1, "services": {"kafka": {"port": 7, "pid": null, "start_time": null, "extra": {}}}}'
    assert DevState.from_json(text).services["kafka"] == ServiceState(port=7, ports={})


def test_missing_state_is_empty(tmp_path: Path):
    assert load_state(tmp_path / "nowhere") == DevState()


def test_state_ignores_unknown_keys():
    text = '{"version": 1, "future": 1, "services": {"kafka": {"port": 7, "new": true}}}'
    assert DevState.from_json(text).services == {"kafka": ServiceState(port=7)}


# -- paths and binaries -------------------------------------------------------


def test_postgres_bindirs_prefer_pg_config_then_highest_version():
    versioned = [Path("/usr/lib/postgresql/9.6/bin"), Path("/usr/lib/postgresql/16/bin"), Path("/usr/lib/postgresql/15/bin")]
    assert postgres_mod.candidate_bindirs("/opt/pg/bin", versioned) == [
        Path("/opt/pg/bin"),
        Path("/usr/lib/postgresql/16/bin"),
        Path("/usr/lib/postgresql/15/bin"),
        Path("/usr/lib/postgresql/9.6/bin"),
    ]
    assert postgres_mod.candidate_bindirs(None, []) == []


def test_postgres_fallback_data_dir_is_per_folder(tmp_path: Path):
    one = postgres_mod.fallback_data_dir(tmp_path / "a")
    assert one == postgres_mod.fallback_data_dir(tmp_path / "a")
    assert one != postgres_mod.fallback_data_dir(tmp_path / "b")
    assert one.name.startswith("eoskit-postgres-")


def test_mariadb_socket_moves_out_of_long_folders(tmp_path: Path):
    assert mariadb_mod.socket_path(tmp_path / "m") == tmp_path / "m" / "mariadb.sock"
    deep = tmp_path / ("x" * 120)
    moved = mariadb_mod.socket_path(deep)
    assert len(str(moved)) <= mariadb_mod.MAX_SOCKET_PATH
    assert moved.name.startswith("eoskit-mariadb-")


def test_missing_postgres_names_the_debian_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("EOSKIT_PG_BINDIR", str(tmp_path))
    monkeypatch.setattr(postgres_mod, "candidate_bindirs", lambda *args: [])
    with pytest.raises(MissingBinaryError, match="`postgresql`"):
        postgres_mod.find_bindir()


def test_missing_mariadb_names_the_debian_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(mariadb_mod, "find_program", lambda *args, **kwargs: None)
    with pytest.raises(MissingBinaryError, match="`mariadb-server`"):
        mariadb_mod.MariaDBService(tmp_path).check_installed()


def test_missing_moto_server_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setitem(sys.modules, "flask_cors", None)  # moto without its `server` extra
    with pytest.raises(MissingBinaryError, match=r"s3: .*flask_cors.*pip install 'moto\[server\]'"):
        s3_mod.S3Service(tmp_path).check_installed()


def test_docker_without_engine_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    import docker

    def no_engine(*args, **kwargs):
        raise docker.errors.DockerException("no socket")

    monkeypatch.setattr(docker, "from_env", no_engine)
    with pytest.raises(DevServicesError, match="Docker engine not reachable.*without --docker"):
        DockerServices(tmp_path).up()
    assert DockerServices(tmp_path).endpoints() is None


# -- Kafka: version, jar cache, Java, configuration ---------------------------------


def test_kafka_version_is_the_default_or_the_environment_s():
    assert kafka_jars.kafka_version({}) == kafka_jars.DEFAULT_VERSION
    assert kafka_jars.kafka_version({"EOSKIT_KAFKA_VERSION": " 4.3.1 "}) == "4.3.1"
    assert kafka_jars.kafka_version({"EOSKIT_KAFKA_VERSION": ""}) == kafka_jars.DEFAULT_VERSION
    assert kafka_jars.kafka_version({"EOSKIT_KAFKA_VERSION": "3.9.1"}) == "3.9.1"  # the kafka3 tier's
    for bad in ("3.6.2", "2.8.0", "4.1", "../4.4.0", "latest"):
        with pytest.raises(DevServicesError, match=r"EOSKIT_KAFKA_VERSION=.* not an Apache Kafka 3\.7 \(or newer\)"):
            kafka_jars.kafka_version({"EOSKIT_KAFKA_VERSION": bad})


def test_jar_cache_is_eoskit_cache_dir_then_xdg_then_home(tmp_path: Path):
    home = {"HOME": str(tmp_path / "home")}
    assert kafka_jars.cache_root(home) == tmp_path / "home" / ".cache" / "eoskit"
    xdg = {**home, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert kafka_jars.cache_root(xdg) == tmp_path / "xdg" / "eoskit"
    assert kafka_jars.cache_root({**home, "XDG_CACHE_HOME": "relative/dir"}) == tmp_path / "home" / ".cache" / "eoskit"
    explicit = {**xdg, "EOSKIT_CACHE_DIR": str(tmp_path / "mine")}
    assert kafka_jars.cache_root(explicit) == tmp_path / "mine"
    assert kafka_jars.jars_dir("4.3.1", explicit) == tmp_path / "mine" / "kafka" / "4.3.1"
    assert kafka_jars.jars_dir(env=explicit) == tmp_path / "mine" / "kafka" / kafka_jars.DEFAULT_VERSION


def test_a_filled_jar_cache_is_used_as_it_is_without_java_or_network(tmp_path: Path):
    env = {"EOSKIT_CACHE_DIR": str(tmp_path), "PATH": str(tmp_path / "nothing"), "HTTPS_PROXY": "http://127.0.0.1:9"}
    jars = tmp_path / "kafka" / "4.3.1"
    jars.mkdir(parents=True)
    (jars / "kafka_2.13-4.3.1.jar").write_bytes(b"")  # copied by hand, say
    assert kafka_jars.fetch_kafka("4.3.1", env=env) == jars


def _no_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("JAVA_HOME", raising=False)


def test_missing_java_names_the_debian_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    _no_java(monkeypatch, tmp_path)
    with pytest.raises(MissingBinaryError, match=r"^kafka: no `java` on PATH.*apt-get install openjdk-17-jre-headless"):
        kafka_mod.KafkaService(tmp_path).check_installed()


def test_missing_java_fails_eoskit_dev_up_in_one_line_before_anything_starts(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path / "no-bin")
    folder = tmp_path / "dev"
    done = subprocess.run([sys.executable, "-m", "eoskit.runtime.devtools.services", "up", "--dir", str(folder)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "eoskit dev up: kafka: no `java` on PATH, and Apache Kafka runs on Java 17 or newer; "
        "install it (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    ]
    assert not folder.exists()


def test_java_home_comes_first_and_an_old_java_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    _no_java(monkeypatch, tmp_path)
    java = tmp_path / "jdk11" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.22" 2024-01-16\' >&2\n')
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk11"))
    assert kafka_jars.find_java() == str(java)
    with pytest.raises(MissingBinaryError, match=r"needs Java 17 or newer and .*java is Java 11; install openjdk-17"):
        kafka_jars.check_java()


def test_java_versions_are_parsed_old_and_new_style():
    assert kafka_jars.parse_java_version('openjdk version "17.0.15" 2025-04-15') == 17
    assert kafka_jars.parse_java_version('java version "1.8.0_392"') == 8
    assert kafka_jars.parse_java_version('openjdk version "21" 2023-09-19') == 21
    assert kafka_jars.parse_java_version("no version here") is None


IVY_UNREACHABLE = """\
:: problems summary ::
:::: WARNINGS
\t\tmodule not found: org.apache.kafka#kafka_2.13;4.4.0
:::: ERRORS
\tServer access error at url https://repository.example/x.pom (java.net.ConnectException: Connection refused)
"""
IVY_NO_SUCH_VERSION = """\
:::: WARNINGS
\t\tmodule not found: org.apache.kafka#kafka_2.13;4.9.9
\t\t:: org.apache.kafka#kafka_2.13;4.9.9: not found
"""


def test_fetch_errors_name_the_cause_and_the_fix_in_one_line(tmp_path: Path):
    log = tmp_path / "fetch.log"
    target = tmp_path / "kafka" / "4.4.0"
    log.write_text(IVY_UNREACHABLE)
    message = str(kafka_jars._fetch_error("4.4.0", target, log, 1))
    assert "\n" not in message
    assert message.startswith("kafka: could not fetch Apache Kafka 4.4.0's jars: Maven Central is unreachable")
    assert f"fill {target} by hand" in message and "kafka_2.13-4.4.0.tgz" in message and str(log) in message
    assert "repository.example" not in message  # Ivy's details stay in its log
    timeout = str(kafka_jars._fetch_error("4.4.0", target, log, -1))
    assert "took longer than" in timeout and "by hand" in timeout
    log.write_text(IVY_NO_SUCH_VERSION)
    missing = str(kafka_jars._fetch_error("4.9.9", tmp_path / "kafka" / "4.9.9", log, 1))
    assert missing == ("kafka: Apache Kafka 4.9.9 is not on Maven Central (org.apache.kafka:kafka_2.13:4.9.9 "
                       f"not found); set EOSKIT_KAFKA_VERSION to a released version, or unset it for "
                       f"{kafka_jars.DEFAULT_VERSION}")


def test_proxy_variables_become_java_properties():
    assert kafka_jars.java_proxy_options({}) == []
    env = {"https_proxy": "http://proxy.local:3128", "HTTP_PROXY": "proxy.local", "no_proxy": "localhost,.corp, 10.0.0.1"}
    assert kafka_jars.java_proxy_options(env) == [
        "-Dhttps.proxyHost=proxy.local", "-Dhttps.proxyPort=3128",
        "-Dhttp.proxyHost=proxy.local", "-Dhttp.proxyPort=80",
        "-Dhttp.nonProxyHosts=localhost|*.corp|10.0.0.1",
    ]


def _properties(text: str) -> dict[str, str]:
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def test_broker_properties_one_node_on_loopback(tmp_path: Path):
    props = kafka_mod.server_properties(9092, 9093, tmp_path / "data")
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["controller.listener.names"] == "CONTROLLER"
    assert props["log.dirs"] == str(tmp_path / "data")
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr", "default.replication.factor", "min.insync.replicas"):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "true"
    assert "transaction.max.timeout.ms" not in props  # Kafka's default
    assert _properties(kafka_mod.render_properties(props)) == props


def test_properties_file_escapes_what_java_would_misread():
    text = kafka_mod.render_properties({"log.dirs": "C:\\data", "x": " lead", "y": "a\nb"})
    assert _properties(text) == {"log.dirs": "C:\\\\data", "x": "\\ lead", "y": "a\\nb"}


def test_broker_log_config_writes_warnings_and_startup_lines_to_stdout():
    import xml.etree.ElementTree as ET

    root = ET.fromstring(kafka_mod.LOG4J2_XML)
    assert root.get("shutdownHook") == "disable"
    console = root.find("Appenders/Console")
    assert console is not None and console.get("target") == "SYSTEM_OUT"  # stdout is the service's log file
    assert root.find("Loggers/Root").get("level") == "WARN"
    assert {logger.get("level") for logger in root.iter("Logger")} == {"INFO"}


def test_cluster_ids_look_like_kafka_s():
    ids = {kafka_mod.new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert set(cluster_id) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_kafka_ports_controller_kept_or_moved_broker_taken_back(tmp_path: Path):
    service = kafka_mod.KafkaService(tmp_path)
    broker, controller = pick_free_port(), pick_free_port()
    secure = pick_free_port(exclude={broker, controller})
    state = ServiceState(port=broker, ports={"broker": broker, "controller": controller, "secure": secure})
    service._settle_ports(state)
    assert (state.port, state.ports) == (broker, {"broker": broker, "controller": controller, "secure": secure})

    # A state file from before the SASL_SSL listener: a port is picked for it.
    old = ServiceState(port=broker, ports={"broker": broker, "controller": controller})
    service._settle_ports(old)
    assert old.ports["secure"] not in (broker, controller) and old.ports["controller"] == controller

    with _listening() as holder:  # someone else took the controller port meanwhile
        taken = holder.getsockname()[1]
        state.ports["controller"] = taken
        service._settle_ports(state)
        assert state.ports["controller"] not in (taken, broker, state.ports["secure"])

    # The orchestrator's choice stands (it keeps a remembered port whose
    # only users are TIME_WAIT sockets: see the test below).
    moved = pick_free_port(exclude={broker})
    state.port = moved
    service._settle_ports(state)
    assert state.port == moved == state.ports["broker"]


def test_a_port_left_in_time_wait_by_a_killed_server_is_free_for_its_next_start():
    """A server killed with clients connected leaves TIME_WAIT sockets on its
    port for a minute; servers bind with SO_REUSEADDR, so the port is free
    to them, and a service comes back where its clients look for it."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Kafka, PostgreSQL, MariaDB do
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end waits in TIME_WAIT
        client.close()
    with pytest.raises(OSError), socket.socket() as plain:
        plain.bind(("127.0.0.1", port))  # what the port check did before: the port looked taken
    assert is_port_free(port)
    assert choose_port(port) == port


def test_kafka_port_taken_is_one_line_naming_port_and_fix(tmp_path: Path):
    with _listening() as holder:
        port = holder.getsockname()[1]
        with pytest.raises(DevServicesError) as info:
            kafka_mod.KafkaService(tmp_path)._settle_ports(ServiceState(port=port))
    assert str(info.value) == (f"kafka: port {port} on 127.0.0.1 is taken by another program; stop that "
                               "program, or run `eoskit dev up` again to pick a free port")


def test_kafka_status_names_the_release():
    service = kafka_mod.KafkaService(Path("/nowhere"))
    assert service.describe(ServiceState(port=9092, extra={"version": "4.4.0"})) == "127.0.0.1:9092 (Apache Kafka 4.4.0)"
    assert service.describe(ServiceState(port=9092)) == "127.0.0.1:9092"


# -- processes ------------------------------------------------------------------


def test_stop_process_kills_the_whole_group(tmp_path: Path):
    log = tmp_path / "p.log"
    # A parent that ignores SIGTERM plus a child: both must go.
    script = "trap '' TERM; sleep 60 & echo started; wait"
    ref = start_process(["sh", "-c", script], log)
    assert is_alive(ref)
    for _ in range(100):
        if len(group_members(ref.pid)) >= 2:
            break
        time.sleep(0.02)
    assert len(group_members(ref.pid)) >= 2
    stop_process(ref, timeout=0.5)
    assert not is_alive(ref)
    assert group_members(ref.pid) == []
    assert "starting: sh -c" in log.read_text()


def test_a_recycled_pid_is_not_ours():
    me = ProcessRef(os.getpid(), start_time=1)  # same pid, different start time
    assert not is_alive(me)
    stop_process(me)  # must not touch this very process
    assert is_alive(ProcessRef(os.getpid(), None))


def test_tail_returns_last_lines(tmp_path: Path):
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail(log, 3) == "line 97\nline 98\nline 99"
    assert tail(tmp_path / "missing.log") == ""


# -- CLI and API without servers ------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eoskit")
    register_cli(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_wiring():
    parser = _parser()
    up = parser.parse_args(["dev", "up", "--dir", "/d", "--docker"])
    assert (up.dev_command, up.dir, up.docker, callable(up.func)) == ("up", "/d", True, True)
    for name in ("down", "status", "env"):
        args = parser.parse_args(["dev", name])
        assert args.dir == ".eoskit/dev" and callable(args.func)
    assert parser.parse_args(["dev", "down", "--purge"]).purge is True
    with pytest.raises(SystemExit):
        parser.parse_args(["dev", "env", "--docker"])


def test_cli_on_a_folder_with_nothing_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    parser = _parser()
    for name in ("env", "status"):
        args = parser.parse_args(["dev", name, "--dir", str(tmp_path)])
        assert args.func(args) == 1
    out, err = capsys.readouterr()
    assert "not running" in err and "eoskit dev up" in err
    assert "kafka" in out and "stopped" in out
    args = parser.parse_args(["dev", "down", "--dir", str(tmp_path)])
    assert args.func(args) == 0


def test_local_services_on_an_empty_folder(tmp_path: Path):
    services = LocalServices(tmp_path / "dev")
    assert services.status() == {"kafka": "stopped", "postgres": "stopped", "mariadb": "stopped", "s3": "stopped"}
    assert services.endpoints() is None
    services.down()  # harmless, and creates nothing
    assert not (tmp_path / "dev").exists()


def _run_plugin_session(tmp_path: Path, test_source: str, env: dict[str, str],
                        plugin: bool = True) -> subprocess.CompletedProcess[str]:
    """A separate pytest session, with only ``env``'s EOSKIT_* variables, that must start nothing."""
    (tmp_path / "test_it.py").write_text(textwrap.dedent(test_source))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EOSKIT_")}
    asked = ["-p", "eoskit.testing.pytest_plugin"] if plugin else []
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *asked, str(tmp_path / "test_it.py")],
        cwd=tmp_path,
        env={**clean, **env, "EOSKIT_DEV_DIR": str(tmp_path / "never")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert not (tmp_path / "never").exists()
    return done


def test_pytest_plugin_uses_the_environment_when_all_three_are_set(tmp_path: Path):
    source = """
        def test_env(kafka, postgres, mysql, s3, s3_storage_options, service_endpoints):
            assert kafka == "127.0.0.1:9092"
            assert postgres.startswith("postgresql+psycopg://") and mysql.startswith("mysql+pymysql://")
            assert service_endpoints.kafka_bootstrap == kafka
            assert s3 == "http://127.0.0.1:5000"
            assert s3_storage_options["client_kwargs"] == {"endpoint_url": s3}
            s3_storage_options["anon"] = True  # each test gets its own dict

        def test_options_are_fresh(s3_storage_options):
            assert "anon" not in s3_storage_options
    """
    done = _run_plugin_session(tmp_path, source, ENDPOINTS.as_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_pytest_plugin_loads_only_where_asked_for(tmp_path: Path):
    """Installing eoskit puts nothing into other pytest runs of the environment."""
    done = _run_plugin_session(tmp_path, """
        def test_env(kafka):
            pass
    """, ENDPOINTS.as_env(), plugin=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "fixture 'kafka' not found" in done.stdout


def test_pytest_plugin_without_s3_variable_fails_only_the_tests_that_need_s3(tmp_path: Path):
    source = """
        def test_kafka_only(kafka):
            assert kafka == "127.0.0.1:9092"

        def test_needs_s3(s3):
            pass
    """
    older = {k: v for k, v in ENDPOINTS.as_env().items() if k != "EOSKIT_S3_ENDPOINT"}
    done = _run_plugin_session(tmp_path, source, older)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed, 1 error" in done.stdout
    assert "this test needs S3, but EOSKIT_S3_ENDPOINT is not set" in done.stdout


def _fake_service(root: Path, probe_error: str | None, service_name: str = "fake"):
    """A 'server' that is just `sleep`, to test the orchestration in isolation."""
    from eoskit.runtime.devtools.services.base import LaunchSpec, LocalService

    class Fake(LocalService):
        name = service_name

        def check_installed(self) -> None:
            pass

        def launch(self, state):
            return LaunchSpec(argv=["sh", "-c", "echo fake server says hi; exec sleep 60"])

        def probe(self, state):
            if probe_error:
                raise ConnectionError(probe_error)

    return Fake(root)


def test_a_server_that_never_gets_ready_fails_with_its_log_and_is_stopped(tmp_path: Path):
    services = LocalServices(tmp_path, timeout=0.5)
    services.services = [_fake_service(tmp_path, "refused")]
    with pytest.raises(DevServicesError) as info:
        services.up()
    message = str(info.value)
    assert message.startswith("fake: not accepting connections")
    assert "last error: refused" in message and str(tmp_path / "fake" / "fake.log") in message
    assert "fake server says hi" in message  # the log's tail
    assert load_state(tmp_path).services["fake"].pid is None
    assert services.status() == {"fake": "stopped"}


def test_up_reuses_a_running_server_and_down_stops_it(tmp_path: Path):
    services = LocalServices(tmp_path)
    services.services = [_fake_service(tmp_path, None)]
    services._endpoints = lambda state: ENDPOINTS  # type: ignore[method-assign]  # no real endpoints here
    services.up()
    first = load_state(tmp_path).services["fake"]
    services.up()
    assert load_state(tmp_path).services["fake"] == first
    assert services.status()["fake"] == f"running on 127.0.0.1:{first.port} (pid {first.pid})"
    services.down()
    assert group_members(first.pid) == [] and services.status() == {"fake": "stopped"}


def test_down_of_named_services_stops_only_those(tmp_path: Path):
    services = LocalServices(tmp_path)
    services.services = [_fake_service(tmp_path, None, "one"), _fake_service(tmp_path, None, "two")]
    services._endpoints = lambda state: ENDPOINTS  # type: ignore[method-assign]
    services.up()
    pids = services.pids()
    services.down(["two"])
    assert services.pids() == {"one": pids["one"]} and group_members(pids["two"]) == []
    with pytest.raises(ValueError, match="no such dev service: three"):
        services.down(["three"])
    services.down()
    assert services.pids() == {}


def test_docker_state_from_before_s3_has_no_s3_endpoint(tmp_path: Path):
    import json

    old = {"containers": {}, "kafka_bootstrap": "127.0.0.1:9092", "postgres": ["h", 5432], "mysql": ["h", 3306]}
    (tmp_path / "docker.json").write_text(json.dumps(old))
    assert DockerServices(tmp_path).endpoints().s3_endpoint is None
    (tmp_path / "docker.json").write_text(json.dumps({**old, "s3": ["127.0.0.1", 5000]}))
    assert DockerServices(tmp_path).endpoints().s3_endpoint == "http://127.0.0.1:5000"


# -- the broker's SASL_SSL listener -------------------------------------------


def test_secure_listener_endpoints_env_and_spark_options():
    secure = make_endpoints(9092, 5432, 3306, s3_port=5000, kafka_secure_port=9094,
                            kafka_ca_location="/dev/kafka/tls/ca.pem")
    env = secure.as_env()
    assert {k: env[k] for k in env if "SECURE" in k or "SASL" in k or "_CA_" in k} == {
        "EOSKIT_KAFKA_SECURE_BOOTSTRAP": "127.0.0.1:9094",
        "EOSKIT_KAFKA_CA_LOCATION": "/dev/kafka/tls/ca.pem",
        "EOSKIT_KAFKA_SASL_USERNAME": "eoskit",
        "EOSKIT_KAFKA_SASL_PASSWORD": "eoskit-kafka-scram-secret",
    }
    assert endpoints_from_env(env) == secure
    assert "eoskit-kafka-scram-secret" not in repr(secure)
    # The secure variables are optional, and all four go together.
    assert endpoints_from_env({k: v for k, v in env.items() if k != "EOSKIT_KAFKA_CA_LOCATION"}) == \
        make_endpoints(9092, 5432, 3306, s3_port=5000)
    from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings

    options = secure.kafka_secure_options()
    assert options["kafka.ssl.truststore.type"] == "PEM"
    kafka = KafkaSinkSettings.parse({**options, "topic": "t"}).kafka
    assert kafka["sasl.username"] == "eoskit" and kafka["sasl.password"] == "eoskit-kafka-scram-secret"
    assert kafka["ssl.ca.location"] == "/dev/kafka/tls/ca.pem"
    assert make_endpoints(9092, 5432, 3306).kafka_secure_options() is None


def test_broker_properties_with_the_sasl_ssl_listener(tmp_path: Path):
    props = kafka_mod.server_properties(9092, 9093, tmp_path / "data", 9094, tmp_path / "tls" / "server.p12")
    assert props["listeners"] == ("PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094,"
                                  "CONTROLLER://127.0.0.1:9093")
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["listener.name.sasl_ssl.ssl.keystore.location"] == str(tmp_path / "tls" / "server.p12")
    assert "ScramLoginModule required;" in props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"]


def test_tls_material_is_made_once_and_verifies_for_127_0_0_1(tmp_path: Path):
    ca, keystore = kafka_mod.ensure_tls(tmp_path / "tls")
    assert ca.read_text().startswith("-----BEGIN CERTIFICATE-----") and keystore.is_file()
    before = ca.read_bytes()
    assert kafka_mod.ensure_tls(tmp_path / "tls") == (ca, keystore) and ca.read_bytes() == before
    server = tmp_path / "tls" / "server.pem"
    done = subprocess.run(["openssl", "verify", "-CAfile", str(ca), "-verify_ip", "127.0.0.1", str(server)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["tls"]  # no work folder left behind


# -- three Kafka nodes (`eoskit dev up --kafka-brokers 3`) ------------------------


def test_broker_properties_of_a_three_node_cluster(tmp_path: Path):
    voters = {1: 9093, 2: 9193, 3: 9293}
    props = kafka_mod.server_properties(9192, 9193, tmp_path / "data", 9194, tmp_path / "tls" / "server.p12",
                                        node_id=2, voters=voters)
    assert props["node.id"] == "2"
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093,2@127.0.0.1:9193,3@127.0.0.1:9293"
    assert props["listeners"] == ("PLAINTEXT://127.0.0.1:9192,SASL_SSL://127.0.0.1:9194,"
                                  "CONTROLLER://127.0.0.1:9193")
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9192,SASL_SSL://127.0.0.1:9194"
    for key in ("default.replication.factor", "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor", "share.coordinator.state.topic.replication.factor"):
        assert props[key] == "3", key
    for key in ("min.insync.replicas", "transaction.state.log.min.isr", "share.coordinator.state.topic.min.isr"):
        assert props[key] == "2", key
    assert props["log.dirs"] == str(tmp_path / "data")
    with pytest.raises(ValueError, match="not among the voters"):
        kafka_mod.server_properties(9192, 9999, tmp_path / "data", node_id=2, voters=voters)


def test_one_node_properties_are_what_they_were(tmp_path: Path):
    """`--kafka-brokers` left out: the one-node broker's configuration is unchanged."""
    given = kafka_mod.server_properties(9092, 9093, tmp_path / "data", 9094, tmp_path / "server.p12")
    explicit = kafka_mod.server_properties(9092, 9093, tmp_path / "data", 9094, tmp_path / "server.p12",
                                           node_id=1, voters={1: 9093})
    assert given == explicit
    assert given["node.id"] == "1" and given["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert given["min.insync.replicas"] == given["transaction.state.log.min.isr"] == "1"
    assert kafka_mod.KafkaService(tmp_path).name == "kafka"


def test_three_kafka_nodes_are_services_of_their_own(tmp_path: Path):
    services = LocalServices(tmp_path / "dev", kafka_brokers=3)
    assert [s.name for s in services.services] == ["kafka", "kafka-2", "kafka-3", "postgres", "mariadb", "s3"]
    nodes = services.kafka_nodes
    assert [n.node_id for n in nodes] == [1, 2, 3] and {n.nodes for n in nodes} == {3}
    assert [n.dir for n in nodes] == [tmp_path / "dev" / name for name in ("kafka", "kafka-2", "kafka-3")]
    assert {n.tls_dir for n in nodes} == {tmp_path / "dev" / "kafka" / "tls"}  # one CA for the cluster
    assert services.status()["kafka-3"] == "stopped"
    assert kafka_mod.node_service_name(1) == "kafka" and kafka_mod.node_service_name(3) == "kafka-3"
    only = LocalServices(tmp_path / "other", kafka_brokers=3, kafka_only=True)
    assert [s.name for s in only.services] == ["kafka", "kafka-2", "kafka-3"]
    assert only.kafka_bootstrap() is None
    with pytest.raises(ValueError, match="kafka_only"):
        only.up()
    with pytest.raises(ValueError, match="1 or 3"):
        LocalServices(tmp_path / "dev", kafka_brokers=2)
    with pytest.raises(ValueError):
        services.kill("kafka-4")


def test_the_state_file_remembers_the_kafka_node_count(tmp_path: Path):
    root = tmp_path / "dev"
    state = DevState()
    state.service("kafka").port = 9092
    state.service("kafka").extra["nodes"] = "3"
    for name, port in (("kafka-2", 9192), ("kafka-3", 9292)):
        state.service(name).port = port
    save_state(root, state)
    services = LocalServices(root)  # `eoskit dev env`, `down`, `status`: as many as it ran
    assert [n.name for n in services.kafka_nodes] == ["kafka", "kafka-2", "kafka-3"]
    with pytest.raises(DevServicesError, match=r"has 3 node\(s\).*--purge"):
        LocalServices(root, kafka_brokers=1)
    # A folder of one node (the count never written) stays one.
    one = tmp_path / "one"
    state = DevState()
    state.service("kafka").port = 9092
    save_state(one, state)
    assert [n.name for n in LocalServices(one).kafka_nodes] == ["kafka"]
    with pytest.raises(DevServicesError, match=r"has 1 node\(s\)"):
        LocalServices(one, kafka_brokers=3)


def test_three_nodes_ports_each_its_own_and_controllers_known_to_all(tmp_path: Path):
    services = LocalServices(tmp_path, kafka_brokers=3, kafka_only=True)
    state = DevState()
    taken: set[int] = set()
    for node in services.kafka_nodes:
        entry = state.service(node.name)
        entry.port = pick_free_port(exclude=taken)
        taken.add(entry.port)
        node.settle_ports(entry, taken)
    save_state(tmp_path, state)
    ports = [p for node in services.kafka_nodes for p in state.services[node.name].all_ports()]
    assert len(ports) == len(set(ports)) == 9  # broker, controller, secure: three each
    voters = services.kafka_nodes[2]._voters(state.services["kafka-3"])
    assert voters == {n: state.services[kafka_mod.node_service_name(n)].ports["controller"] for n in (1, 2, 3)}
    assert services.kafka_nodes[0]._voters(state.services["kafka"]) == voters
    # A node of a formatted cluster whose controller port was taken cannot move it.
    entry = state.services["kafka-2"]
    entry.extra["cluster_id"] = "x"
    with _listening() as holder:
        entry.ports["controller"] = holder.getsockname()[1]
        with pytest.raises(DevServicesError, match="kafka-2: controller port .* the cluster's other nodes"):
            services.kafka_nodes[1].settle_ports(entry, set())


def test_endpoints_of_three_nodes_list_every_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    services = LocalServices(tmp_path, kafka_brokers=3)
    state = DevState()
    for number, name in enumerate(("kafka", "kafka-2", "kafka-3", "postgres", "mariadb", "s3")):
        entry = state.service(name)
        entry.port, entry.pid = 20000 + number * 10, 1
        entry.ports = {"secure": 20001 + number * 10} if name.startswith("kafka") else {}
    monkeypatch.setattr(LocalServices, "_alive", staticmethod(lambda entry: True))
    endpoints = services._endpoints(state)
    assert endpoints is not None
    assert endpoints.kafka_bootstrap == "127.0.0.1:20000,127.0.0.1:20010,127.0.0.1:20020"
    assert endpoints.kafka_secure_bootstrap is None  # no CA made here
    assert "127.0.0.1:20010" in render_env(endpoints)


def test_dev_up_takes_kafka_brokers():
    from eoskit.runtime.devtools.services.cli import register_cli

    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    assert parser.parse_args(["dev", "up", "--kafka-brokers", "3"]).kafka_brokers == 3
    assert parser.parse_args(["dev", "up"]).kafka_brokers is None
    with pytest.raises(SystemExit):
        parser.parse_args(["dev", "up", "--kafka-brokers", "2"])


# -- some services alone (`eoskit dev up --only`, the pytest plugin) ----------------

VALID = "the dev services are kafka, postgres, mariadb, s3"


def test_service_names_are_the_service_classes_own():
    assert SERVICE_NAMES == tuple(cls.name for cls in SERVICES) == ("kafka", "postgres", "mariadb", "s3")
    assert [s.name for s in LocalServices(Path("/nowhere")).services] == list(SERVICE_NAMES)


def test_only_takes_names_by_commas_or_as_a_list():
    assert parse_services("postgres") == {"postgres"}
    assert parse_services(" kafka , s3,") == {"kafka", "s3"}
    assert parse_services(["mariadb", "mariadb"]) == {"mariadb"}


@pytest.mark.parametrize(("given", "message"), [
    ("mysql", f"no such dev service: mysql; {VALID}"),
    ("postgres,pg,kafka-2,pg", f"no such dev service: pg, kafka-2; {VALID}"),
    (" , ", f"no dev service named; {VALID}"),
    ([], f"no dev service named; {VALID}"),
])
def test_an_unknown_service_is_named_with_the_valid_ones(given, message):
    with pytest.raises(ValueError) as info:
        parse_services(given)
    assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        LocalServices(Path("/nowhere"), only=given)
    assert str(info.value) == message


def test_local_services_of_some_services_handle_only_those(tmp_path: Path):
    postgres = LocalServices(tmp_path / "dev", only="postgres")
    assert [s.name for s in postgres.services] == ["postgres"]
    assert [s.name for s in postgres.every] == ["kafka", "postgres", "mariadb", "s3"]
    assert postgres.status() == {"postgres": "stopped"} and postgres.endpoints() is None
    with pytest.raises(ValueError, match="no such dev service: kafka"):
        postgres.kill("kafka")  # not among its services
    kafka = LocalServices(tmp_path / "dev", kafka_brokers=3, only=["s3", "kafka"])
    assert [s.name for s in kafka.services] == ["kafka", "kafka-2", "kafka-3", "s3"]  # kafka: every node
    assert LocalServices(tmp_path / "x", kafka_only=True).only == {"kafka"}
    assert not (tmp_path / "dev").exists() and not (tmp_path / "x").exists()


def _running(monkeypatch: pytest.MonkeyPatch) -> DevState:
    """A state whose four services all run (as far as ``_alive`` is told)."""
    monkeypatch.setattr(LocalServices, "_alive", staticmethod(lambda entry: True))
    state = DevState()
    for port, name in enumerate(SERVICE_NAMES, start=20000):
        entry = state.service(name)
        entry.port, entry.pid = port, 1
    return state


def test_endpoints_of_some_services_name_only_those(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    state = _running(monkeypatch)
    endpoints = LocalServices(tmp_path, only="postgres")._endpoints(state)
    assert endpoints == ServiceEndpoints(postgres_url="postgresql+psycopg://eoskit:eoskit@127.0.0.1:20001/eoskit")
    assert render_env(endpoints) == "export EOSKIT_POSTGRES_URL='postgresql+psycopg://eoskit:eoskit@127.0.0.1:20001/eoskit'\n"
    assert LocalServices(tmp_path, only="kafka,s3")._endpoints(state).as_env() == {
        "EOSKIT_KAFKA_BOOTSTRAP": "127.0.0.1:20000", "EOSKIT_S3_ENDPOINT": "http://127.0.0.1:20003"}
    # The whole set is what it was.
    assert LocalServices(tmp_path)._endpoints(state) == make_endpoints(20000, 20001, 20002, s3_port=20003)
    state.services["postgres"].pid = None
    monkeypatch.setattr(LocalServices, "_alive", staticmethod(lambda entry: entry.pid is not None))
    assert LocalServices(tmp_path, only="postgres")._endpoints(state) is None
    assert LocalServices(tmp_path, only="mariadb")._endpoints(state) is not None


def test_up_records_the_services_chosen_and_running_until_the_whole_set_is(tmp_path: Path):
    def up(only: str | None) -> None:
        services = LocalServices(tmp_path, only=only)
        services.services = [_fake_service(tmp_path, None, name) for name in (only or "one").split(",")]
        services.start()

    assert recorded_only(tmp_path) is None  # nothing here yet
    up("postgres")
    assert load_state(tmp_path).only == ["postgres"] and recorded_only(tmp_path) == {"postgres"}
    up("s3,postgres")
    assert recorded_only(tmp_path) == {"postgres", "s3"}
    assert LocalServices(tmp_path, only=recorded_only(tmp_path)).status().keys() == {"postgres", "s3"}
    LocalServices(tmp_path, only="s3").down()
    up("kafka")  # what runs after it: postgres (still) and kafka, not the stopped s3
    assert recorded_only(tmp_path) == {"kafka", "postgres"}
    up("s3,mariadb")  # all four running: the whole set
    assert load_state(tmp_path).only is None
    LocalServices(tmp_path).purge()
    up("kafka")
    up(None)  # the whole set chosen: no choice left to remember
    assert load_state(tmp_path).only is None and recorded_only(tmp_path) is None
    LocalServices(tmp_path).purge()


def test_a_folder_whose_services_all_stopped_records_what_up_only_starts(tmp_path: Path):
    """A folder that once ran the whole set (from before --only, its state
    naming no choice), everything stopped: ``up --only postgres`` records
    postgres, so that ``dev env`` and ``dev status`` name what runs."""
    state = DevState()
    state.service("kafka").port = 9092  # ran once; no process now
    save_state(tmp_path, state)
    assert '"only"' not in (tmp_path / "state.json").read_text()
    services = LocalServices(tmp_path, only="postgres")
    assert services._record_only(load_state(tmp_path)) == ["postgres"]
    state.only = ["postgres", "gone-in-a-later-version"]
    save_state(tmp_path, state)
    assert load_state(tmp_path) == state and recorded_only(tmp_path) == {"postgres"}


def test_purge_of_some_services_stops_every_one(tmp_path: Path):
    services = LocalServices(tmp_path, only="postgres")
    services.services = [_fake_service(tmp_path, None, "postgres")]
    services.start()
    others = LocalServices(tmp_path, only="s3")
    others.services = [_fake_service(tmp_path, None, "s3")]
    others.start()
    pids = others.pids()
    assert pids.keys() == {"postgres", "s3"}
    services.down()  # its own services only
    assert others.pids() == {"s3": pids["s3"]}
    services.purge()  # whatever it was made with: everything goes
    assert all(group_members(pid) == [] for pid in pids.values()) and not tmp_path.exists()


def test_dev_up_only_parses_and_names_an_unknown_service(capsys: pytest.CaptureFixture[str]):
    parser = _parser()
    assert parser.parse_args(["dev", "up", "--only", "postgres,kafka"]).only == {"postgres", "kafka"}
    assert parser.parse_args(["dev", "up"]).only is None
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["dev", "up", "--only", "mysql"])
    assert info.value.code == 2
    assert f"argument --only: no such dev service: mysql; {VALID}" in capsys.readouterr().err
    for name in ("down", "status", "env"):
        with pytest.raises(SystemExit):
            parser.parse_args(["dev", name, "--only", "postgres"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--docker"], "--only starts some of the local services; the Docker services start as one set"),
    (["--kafka-brokers", "3"], "--kafka-brokers 3 is about Kafka, which --only postgres leaves out"),
])
def test_dev_up_only_refuses_what_it_cannot_do(argv, message, tmp_path: Path, capsys):
    from eoskit.runtime.devtools.services.cli import main

    # Flags that do not go together: bad usage, 2, as in every verb (docs/operations.md#exit-codes).
    assert main(["dev", "up", "--only", "postgres", "--dir", str(tmp_path / "dev"), *argv]) == 2
    assert capsys.readouterr().err.startswith(f"eoskit dev up: {message}")
    assert not (tmp_path / "dev").exists()


def test_status_and_env_of_a_folder_show_the_services_chosen(tmp_path: Path, capsys):
    from eoskit.runtime.devtools.services.cli import main

    state = DevState(only=["postgres"])
    state.service("postgres").port = 5432
    save_state(tmp_path, state)
    assert main(["dev", "status", "--dir", str(tmp_path)]) == 1
    assert capsys.readouterr().out == "postgres  stopped\n"
    assert main(["dev", "env", "--dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == (f"eoskit dev env: dev services in {tmp_path} are not running; "
                                       f"start them with: eoskit dev up --only postgres --dir {tmp_path}\n")


def test_dev_env_prints_only_the_chosen_services(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    from eoskit.runtime.devtools.services.cli import main

    state = _running(monkeypatch)
    state.only = ["postgres", "s3"]
    save_state(tmp_path, state)
    assert main(["dev", "env", "--dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == (
        "export EOSKIT_POSTGRES_URL='postgresql+psycopg://eoskit:eoskit@127.0.0.1:20001/eoskit'\n"
        "export EOSKIT_S3_ENDPOINT='http://127.0.0.1:20003'\n")
    assert main(["dev", "status", "--dir", str(tmp_path)]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["postgres", "s3"]


# -- the pytest plugin: each service started when a test first asks for it ----------


class FakeLocalServices:
    """``LocalServices`` as the plugin uses it, over a shared set of running services."""

    running: set[str]
    calls: list[tuple[str, object]]

    def __init__(self, root, only=None):
        self.services = [argparse.Namespace(name=name) for name in SERVICE_NAMES if only is None or name in only]

    def pids(self):
        return {name: 1 for name in self.running}

    def up(self):
        names = [service.name for service in self.services]
        self.calls.append(("up", names))
        self.running.update(names)
        ports = {name: port for port, name in enumerate(SERVICE_NAMES, start=20000)}
        whole = make_endpoints(*(ports[name] for name in ("kafka", "postgres", "mariadb")), s3_port=ports["s3"])
        fields = {"kafka": "kafka_bootstrap", "postgres": "postgres_url", "mariadb": "mysql_url", "s3": "s3_endpoint"}
        return ServiceEndpoints(**{fields[name]: getattr(whole, fields[name]) for name in names})

    def down(self, names):
        self.calls.append(("down", list(names)))
        self.running.difference_update(names)


@pytest.fixture
def fake_local():
    class Fake(FakeLocalServices):
        running: set[str] = set()
        calls: list[tuple[str, object]] = []

    return Fake


def test_plugin_starts_each_service_alone_when_first_asked_and_stops_what_it_started(fake_local, tmp_path):
    from eoskit.testing.pytest_plugin import SessionServices

    fake_local.running.add("s3")  # running before the session: left running
    session = SessionServices(tmp_path, {}, local=fake_local)
    assert session.endpoints("postgres").postgres_url.endswith("@127.0.0.1:20001/eoskit")
    assert session.endpoints("postgres").kafka_bootstrap is None
    assert fake_local.calls == [("up", ["postgres"])]  # once: asked again, the same answer
    assert session.endpoints("mariadb").mysql_url.endswith("@127.0.0.1:20002/eoskit")
    assert session.endpoints("s3").s3_endpoint == "http://127.0.0.1:20003"
    assert session.started == ["postgres", "mariadb"]
    assert fake_local.running == {"postgres", "mariadb", "s3"}  # no Kafka: no test asked for it
    session.close()
    assert fake_local.calls[-1] == ("down", ["postgres", "mariadb"]) and fake_local.running == {"s3"}


def test_plugin_s_service_endpoints_start_the_whole_set(fake_local, tmp_path):
    from eoskit.testing.pytest_plugin import SessionServices

    session = SessionServices(tmp_path, {"PYTEST_XDIST_WORKER": "gw0"}, local=fake_local)
    session.endpoints("kafka")
    assert session.endpoints() == make_endpoints(20000, 20001, 20002, s3_port=20003)
    assert fake_local.calls == [("up", ["kafka"]), ("up", list(SERVICE_NAMES))]
    session.close()  # a pytest-xdist worker: the others may still use them
    assert fake_local.running == set(SERVICE_NAMES)


def test_plugin_with_the_environment_or_docker_starts_no_service_alone(fake_local, tmp_path):
    from eoskit.testing.pytest_plugin import SessionServices

    given = SessionServices(tmp_path, ENDPOINTS.as_env(), local=fake_local)
    assert given.endpoints("postgres") == ENDPOINTS and given.endpoints() == ENDPOINTS
    given.close()

    class Docker:
        ups = 0

        def __init__(self, root):
            pass

        def status(self):
            return {"kafka": "stopped"}

        def up(self):
            Docker.ups += 1
            return ENDPOINTS

        def down(self):
            Docker.ups = -1

    docker = SessionServices(tmp_path, {"EOSKIT_SERVICES": "docker"}, local=fake_local, docker=Docker)
    assert docker.endpoints("postgres") == ENDPOINTS == docker.endpoints("kafka")  # one set, started once
    assert Docker.ups == 1
    docker.close()
    assert Docker.ups == -1 and fake_local.calls == []


def test_pytest_plugin_session_using_postgres_starts_postgres_alone(tmp_path: Path):
    """Through the fixtures, in a session of its own: ``LocalServices`` there is a fake."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent('''
        import json, pathlib
        import eoskit.runtime.devtools.services
        from eoskit.runtime.devtools.services.endpoints import ServiceEndpoints

        CALLS = pathlib.Path(__file__).with_name("calls.jsonl")

        class Fake:
            def __init__(self, root, only=None):
                self.only = sorted(only) if only else None
                self.services = []

            def pids(self):
                return {}

            def up(self):
                with CALLS.open("a") as calls:
                    calls.write(json.dumps(["up", self.only]) + "\\n")
                return ServiceEndpoints(postgres_url="postgresql+psycopg://eoskit:eoskit@127.0.0.1:1/eoskit")

        eoskit.runtime.devtools.services.LocalServices = Fake
    '''))
    done = _run_plugin_session(tmp_path, """
        def test_one(postgres):
            assert postgres.endswith("@127.0.0.1:1/eoskit")

        def test_two(postgres):
            pass
    """, {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "calls.jsonl").read_text().splitlines() == ['["up", ["postgres"]]']
