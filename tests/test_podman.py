"""The Podman path's pure parts: the settings Podman gets, the host record's
comparison, the image settings, the container broker's listeners, and the
pytest plugin's ``EOSKIT_SERVICES=podman`` order (with fakes of our own
classes). The containers tier (integration_tests/test_containers.py) runs it
all for real."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from eoskit.runtime.devtools.podman.host import HostState, containers_conf
from eoskit.runtime.devtools.podman.images import IMAGES, LOCAL_IMAGES
from eoskit.runtime.devtools.services.docker import IMAGE_SETTINGS, _kafka_env, images
from eoskit.runtime.devtools.services.endpoints import ServiceEndpoints
from eoskit.runtime.devtools.services.kafka import DEV_SETTINGS


def test_containers_conf_takes_runc_and_equal_limits_within_this_process():
    text = containers_conf()
    assert 'runtime = "runc"' in text
    nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    for limit in text.split("default_ulimits = [")[1].split("]")[0].split(","):
        name, values = limit.strip().strip('"').split("=")
        soft, hard = values.split(":")
        assert soft == hard, limit  # Podman's compatibility API swaps them
        if name == "nofile" and nofile_hard != resource.RLIM_INFINITY:
            assert int(hard) <= nofile_hard


def _state(forward="0", nft="", links=("lo", "eth0")):
    return HostState({"/proc/sys/net/ipv4/ip_forward": forward}, nft, links)


def test_the_host_record_names_each_difference():
    before = _state()
    assert before.differences(_state()) == []
    found = before.differences(_state(forward="1", nft="table ip nat {}", links=("lo", "eth0", "cni-podman0")))
    assert found == ["/proc/sys/net/ipv4/ip_forward is 1, was 0", "the nftables ruleset differs",
                     "new links cni-podman0"]
    # A link gone since (not ours) is no difference to undo.
    assert before.differences(_state(links=("lo",))) == []
    # The record survives its JSON form (host-before.json).
    import json
    from dataclasses import asdict

    assert HostState.from_record(json.loads(json.dumps({**asdict(before), "networks": []}))) == before


def test_images_default_to_the_official_ones_and_take_the_settings():
    defaults = images({})
    assert defaults == {s.service: s.default for s in IMAGE_SETTINGS}
    assert defaults["postgres"] == "postgres:16" and defaults["kafka"].startswith("apache/kafka:")
    chosen = images({"EOSKIT_POSTGRES_IMAGE": " localhost/eoskit-postgres:15 ", "EOSKIT_S3_IMAGE": ""})
    assert chosen["postgres"] == "localhost/eoskit-postgres:15" and chosen["s3"] == defaults["s3"]


def test_every_service_setting_has_a_local_image_with_its_files():
    for setting in IMAGE_SETTINGS:
        image = LOCAL_IMAGES[setting.service]
        assert (IMAGES / image.folder / "Containerfile").is_file(), image.folder
        assert image.repository.startswith("eoskit-")
    for folder in IMAGES.iterdir():
        entrypoints = [p for p in folder.iterdir() if p.suffix == ".sh"]
        assert all(p.stat().st_mode & 0o111 for p in entrypoints), f"{folder.name}: an entrypoint not executable"


def test_the_container_broker_reaches_itself_inside_and_has_the_dev_settings():
    env = _kafka_env(41234)
    advertised = dict(item.split("://") for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert advertised["PLAINTEXT"] == "127.0.0.1:41234"
    inter = env["KAFKA_INTER_BROKER_LISTENER_NAME"]
    # Transaction markers go to the inter-broker listener: it must not be the published port.
    assert inter != "PLAINTEXT" and advertised[inter].startswith("localhost:")
    assert env["KAFKA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS"] == \
        DEV_SETTINGS["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
    assert len([k for k in env if k.startswith("KAFKA_")]) >= len(DEV_SETTINGS)


ENDPOINTS = ServiceEndpoints("127.0.0.1:9092", "postgresql+psycopg://u:p@h/d", "mysql+pymysql://u:p@h/d")


def test_the_plugin_sets_podman_up_before_the_containers_and_undoes_it_after(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch):
    from eoskit.testing.pytest_plugin import SessionServices

    events: list[str] = []
    monkeypatch.setenv("EOSKIT_MYSQL_IMAGE", "mine:1")  # a user's setting wins
    monkeypatch.delenv("EOSKIT_POSTGRES_IMAGE", raising=False)
    monkeypatch.delenv("DOCKER_HOST", raising=False)

    class Engine:
        def __init__(self, root):
            events.append(f"engine {Path(root).relative_to(tmp_path)}")

        def up(self):
            events.append("engine up")
            return {"DOCKER_HOST": "unix:///x.sock", "EOSKIT_POSTGRES_IMAGE": "localhost/pg:15",
                    "EOSKIT_MYSQL_IMAGE": "localhost/maria:10"}

        def down(self):
            events.append("engine down")

    class Docker:
        def __init__(self, root):
            import os

            events.append(f"docker with {os.environ['DOCKER_HOST']} {os.environ['EOSKIT_POSTGRES_IMAGE']} "
                          f"{os.environ['EOSKIT_MYSQL_IMAGE']}")

        def status(self):
            return {"kafka": "stopped"}

        def up(self):
            events.append("docker up")
            return ENDPOINTS

        def down(self):
            events.append("docker down")

    session = SessionServices(tmp_path, {"EOSKIT_SERVICES": "podman"}, docker=Docker, podman=Engine)
    assert session.endpoints("postgres") == ENDPOINTS == session.endpoints()
    session.close()
    assert events == ["engine podman", "engine up", "docker with unix:///x.sock localhost/pg:15 mine:1",
                      "docker up", "docker down", "engine down"]


def test_down_removes_the_networks_made_since_up_but_never_podmans_own(tmp_path: Path):
    from subprocess import CompletedProcess

    from eoskit.runtime.devtools.podman.host import PodmanHost

    calls: list[tuple[str, ...]] = []

    class Host(PodmanHost):  # the podman CLI faked; the removal logic is ours
        def podman(self, *args, check=True, timeout=600.0):
            calls.append(args)
            out = {("ps",): "", ("network", "ls", "-q"): "", ("network", "ls", "--format"): "podman\nmade\nfailing\n"}
            stdout = next((v for k, v in out.items() if args[:len(k)] == k), "")
            code = 1 if args[:3] == ("network", "rm", "-f") and args[3] == "failing" else 0
            return CompletedProcess(args, code, stdout, "")

    removed = Host(tmp_path)._remove_labelled(["kept-before"])
    assert removed == ["network made"]
    assert ("network", "rm", "-f", "podman") not in calls
    assert ("network", "rm", "-f", "failing") in calls
    assert Host(tmp_path)._remove_labelled(None) == []  # no record: only what carries our label


def test_the_image_settings_table_is_the_one_docker_py_declares():
    from eoskit.runtime.devtools.services.docker import image_settings_docs

    text = (Path(__file__).parents[1] / "docs" / "dev-services.md").read_text()
    table = text.split("<!-- images:begin -->\n")[1].split("<!-- images:end -->")[0].strip()
    assert table == "\n".join(image_settings_docs()), (
        "docs/dev-services.md's image settings are out of date: regenerate them with scripts/options_docs.py")


def test_an_unknown_services_engine_is_refused_by_name():
    from eoskit.testing.pytest_plugin import uses_containers

    assert [uses_containers({"EOSKIT_SERVICES": v}) for v in ("", " local ", "Docker", "podman")] == \
        [None, None, "docker", "podman"]
    assert uses_containers({}) is None
    with pytest.raises(pytest.UsageError, match="EOSKIT_SERVICES='podmn': give docker, podman, or local"):
        uses_containers({"EOSKIT_SERVICES": "podmn"})


def test_podman_env_without_up_says_how_to_set_it_up(tmp_path: Path, capsys):
    from eoskit.runtime.cli.main import main

    code = main(["dev", "podman", "env", "--dir", str(tmp_path / "podman")])
    err = capsys.readouterr().err
    assert code != 0 and "no Podman is set up in" in err and "eoskit dev podman up --dir" in err, (code, err)
