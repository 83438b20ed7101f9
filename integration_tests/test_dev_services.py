"""The dev services for real: the CLI starts Kafka, PostgreSQL, MariaDB and
S3 (moto), or some of them alone (`--only`), clients use them, and `down`
leaves no process behind.

The folder is under pytest's tmp dir, which (as root) the postgres user
cannot enter, so this also covers the relocated PostgreSQL data dir.

The broker is Apache Kafka: its transactions are checked against Kafka's own
promises, and its data against a clean stop and a SIGKILL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil
import pytest

from eoskit.runtime.devtools.services import LocalServices, MissingBinaryError
from eoskit.runtime.devtools.services import kafka as kafka_mod
from eoskit.runtime.devtools.services import kafka_jars
from eoskit.runtime.devtools.services import postgres as postgres_mod
from eoskit.runtime.devtools.services.endpoints import s3_storage_options
from eoskit.runtime.devtools.services.kafka import KafkaService
from eoskit.runtime.devtools.services.ports import pick_free_port
from eoskit.runtime.devtools.services.processes import ProcessRef, group_members, is_alive
from eoskit.runtime.devtools.services.s3 import S3Service


def dev(*args: str, check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `eoskit dev ARGS` in a fresh interpreter, like a user's shell would."""
    done = subprocess.run(
        [sys.executable, "-m", "eoskit.runtime.devtools.services", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    if check:
        assert done.returncode == 0, f"dev {args}: rc={done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def recorded(folder: Path) -> dict[str, dict]:
    return json.loads((folder / "state.json").read_text())["services"]


def processes_mentioning(folder: Path) -> list[str]:
    """Command lines of live processes that mention ``folder`` (should be none after down)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if str(folder) in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{process.pid}: {cmdline}")
    return found


@pytest.fixture
def folder(tmp_path: Path):
    folder = tmp_path / "dev"
    try:
        for service in LocalServices(folder).services:
            service.check_installed()
    except MissingBinaryError as exc:
        pytest.skip(str(exc))
    yield folder
    dev("down", "--purge", "--dir", str(folder), check=False)  # whatever happened


def check_s3(endpoint: str) -> None:
    """What the files sink and savepoints do on S3, through fsspec's s3fs."""
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_storage_options(endpoint))
    bucket = f"dev-{uuid.uuid4().hex[:8]}"
    fs.mkdir(bucket)
    assert bucket in fs.ls("")
    with fs.open(f"{bucket}/_staging/a.json", "wb") as handle:
        handle.write(b'{"x": 1}\n')
    big = os.urandom(12 * 2**20)  # written in 5 MiB parts: a multipart upload
    with fs.open(f"{bucket}/_staging/b.bin", "wb", block_size=5 * 2**20) as handle:
        handle.write(big)
    assert fs.cat(f"{bucket}/_staging/a.json") == b'{"x": 1}\n'
    assert sorted(fs.ls(f"{bucket}/_staging")) == [f"{bucket}/_staging/a.json", f"{bucket}/_staging/b.bin"]
    fs.mv(f"{bucket}/_staging/a.json", f"{bucket}/part-0.json")  # S3 rename: copy, then delete
    fs.mv(f"{bucket}/_staging/b.bin", f"{bucket}/part-1.bin")
    fs.invalidate_cache()
    assert fs.find(bucket) == [f"{bucket}/part-0.json", f"{bucket}/part-1.bin"]
    assert fs.cat(f"{bucket}/part-1.bin") == big and fs.size(f"{bucket}/part-0.json") == 9
    fs.rm(f"{bucket}/part-0.json")
    fs.invalidate_cache()
    assert not fs.exists(f"{bucket}/part-0.json") and fs.find(bucket) == [f"{bucket}/part-1.bin"]
    fs.rm(bucket, recursive=True)
    fs.invalidate_cache()
    assert bucket not in fs.ls("")


def check_clients(env: dict[str, str]) -> None:
    import psycopg
    import pymysql
    import sqlalchemy
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    # Kafka: a record goes in and comes back out.
    topic = f"dev-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": env["EOSKIT_KAFKA_BOOTSTRAP"]})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": env["EOSKIT_KAFKA_BOOTSTRAP"]})
    producer.produce(topic, b"hello")
    assert producer.flush(30) == 0
    del producer
    consumer = Consumer(
        {"bootstrap.servers": env["EOSKIT_KAFKA_BOOTSTRAP"], "group.id": topic, "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        message = None
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                break
        assert message is not None and message.value() == b"hello"
    finally:
        consumer.close()

    # PostgreSQL: two-phase commit is enabled.
    engine = sqlalchemy.create_engine(env["EOSKIT_POSTGRES_URL"])
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW max_prepared_transactions").scalar() == "64"
            conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x int)")
            conn.commit()
    finally:
        engine.dispose()
    url = sqlalchemy.make_url(env["EOSKIT_POSTGRES_URL"])
    with psycopg.connect(
        host=url.host, port=url.port, user=url.username, password=url.password, dbname=url.database, autocommit=True
    ) as conn:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("PREPARE TRANSACTION 'eoskit-dev-test'")
        assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (1,)
        conn.execute("COMMIT PREPARED 'eoskit-dev-test'")

    # MariaDB: XA with recovery, as the eoskit user.
    engine = sqlalchemy.create_engine(env["EOSKIT_MYSQL_URL"])
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT DATABASE()").scalar() == "eoskit"
    finally:
        engine.dispose()
    url = sqlalchemy.make_url(env["EOSKIT_MYSQL_URL"])
    conn = pymysql.connect(host=url.host, port=url.port, user=url.username, password=url.password, database=url.database)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS t (x int) ENGINE=InnoDB")
            cur.execute("XA START 'eoskit-dev-test'")
            cur.execute("INSERT INTO t VALUES (1)")
            cur.execute("XA END 'eoskit-dev-test'")
            cur.execute("XA PREPARE 'eoskit-dev-test'")
            cur.execute("XA RECOVER")
            assert any(row[3] == b"eoskit-dev-test" or row[3] == "eoskit-dev-test" for row in cur.fetchall())
            cur.execute("XA COMMIT 'eoskit-dev-test'")
    finally:
        conn.close()

    check_s3(env["EOSKIT_S3_ENDPOINT"])


def test_up_twice_status_env_connect_down(folder: Path):
    where = ["--dir", str(folder)]
    first = dev("up", *where)
    assert "running on" in first.stdout and "eoskit" not in first.stdout.replace("eoskit dev env", "")
    state = recorded(folder)
    ports = {name: entry["port"] for name, entry in state.items()}
    pids = {name: entry["pid"] for name, entry in state.items()}
    assert set(pids) == {"kafka", "postgres", "mariadb", "s3"} and all(pids.values())
    data_dir = Path(state["postgres"]["extra"]["data_dir"])
    if os.geteuid() == 0:  # pytest's tmp dir is 0700: postgres' data must live elsewhere
        assert data_dir.name.startswith("eoskit-postgres-") and data_dir.is_relative_to(tempfile.gettempdir())

    dev("up", *where)  # harmless: the running services are reused
    again = recorded(folder)
    assert {n: e["port"] for n, e in again.items()} == ports
    assert {n: e["pid"] for n, e in again.items()} == pids

    status = dev("status", *where).stdout
    for name, port in ports.items():
        assert f"{name}" in status and f"127.0.0.1:{port}" in status
    assert f"http://127.0.0.1:{ports['s3']}" in status

    lines = dev("env", *where).stdout.splitlines()
    env = {}
    for line in lines:
        assert line.startswith("export EOSKIT_")
        name, _, value = line[len("export ") :].partition("=")
        env[name] = value.strip("'")
    assert env["EOSKIT_KAFKA_BOOTSTRAP"] == f"127.0.0.1:{ports['kafka']}"
    assert env["EOSKIT_POSTGRES_URL"].endswith(f"@127.0.0.1:{ports['postgres']}/eoskit")
    assert env["EOSKIT_MYSQL_URL"].endswith(f"@127.0.0.1:{ports['mariadb']}/eoskit")
    assert env["EOSKIT_S3_ENDPOINT"] == f"http://127.0.0.1:{ports['s3']}"
    # The in-process API agrees with what the CLI did.
    assert LocalServices(folder).endpoints().as_env() == env

    check_clients(env)

    dev("down", *where)
    for name, pid in pids.items():
        assert group_members(pid) == [], f"{name} left processes in group {pid}"
    assert processes_mentioning(folder) == []
    stopped = dev("status", *where, check=False)
    assert stopped.returncode == 1 and stopped.stdout.count("stopped") == 4
    assert dev("env", *where, check=False).returncode == 1

    dev("down", "--purge", *where)
    assert not folder.exists() and not data_dir.exists()


@pytest.fixture
def postgres_folder(tmp_path: Path):
    """A folder for PostgreSQL alone: skips only where PostgreSQL is missing."""
    folder = tmp_path / "dev"
    try:
        for service in LocalServices(folder, only="postgres").services:
            service.check_installed()
    except MissingBinaryError as exc:
        pytest.skip(str(exc))
    yield folder
    dev("down", "--purge", "--dir", str(folder), check=False)  # whatever happened


def test_up_only_postgres_starts_postgres_alone(postgres_folder: Path):
    """What a plug-in author whose sink needs PostgreSQL alone runs: no
    Kafka, MariaDB or S3 server starts, psql reaches the database, and
    status, env and down speak of PostgreSQL only."""
    folder, where = postgres_folder, ["--dir", str(postgres_folder)]
    up = dev("up", "--only", "postgres", *where)
    assert [line.split()[0] for line in up.stdout.splitlines() if "running on" in line] == ["postgres"], up.stdout
    state = recorded(folder)
    assert set(state) == {"postgres"} and state["postgres"]["pid"]
    pid, data_dir = state["postgres"]["pid"], Path(state["postgres"]["extra"]["data_dir"])
    assert json.loads((folder / "state.json").read_text())["only"] == ["postgres"]
    for other in ("kafka", "mariadb", "s3"):  # never started: no folder, no process
        assert not (folder / other).exists(), other
    assert [p for p in processes_mentioning(folder) if "kafka" in p or "mariadb" in p or "moto" in p] == []

    status = dev("status", *where).stdout.splitlines()
    assert len(status) == 1 and status[0].startswith("postgres") and "running on 127.0.0.1:" in status[0]
    lines = dev("env", *where).stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("export EOSKIT_POSTGRES_URL='postgresql+psycopg://"), lines
    url = lines[0].partition("=")[2].strip("'").replace("postgresql+psycopg://", "postgresql://", 1)

    # An independent client: psql, from PostgreSQL's own programs.
    psql = shutil.which("psql") or str(postgres_mod.find_bindir() / "psql")
    if not Path(psql).is_file():
        pytest.skip("no psql here (Debian package postgresql-client)")
    answer = subprocess.run([psql, url, "-At", "-c", "SHOW max_prepared_transactions", "-c", "SELECT 1"],
                            capture_output=True, text=True, timeout=30)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.splitlines() == ["64", "1"]

    dev("down", "--purge", *where)
    assert group_members(pid) == [] and processes_mentioning(folder) == []
    assert not folder.exists() and not data_dir.exists()


def run_pytest_session(folder: Path, workdir: Path) -> subprocess.CompletedProcess[str]:
    """A separate pytest session whose tests use the plugin's fixtures."""
    (workdir / "test_uses_services.py").write_text(
        "import fsspec, sqlalchemy\n"
        "def test_services(kafka, postgres, mysql):\n"
        "    assert kafka.startswith('127.0.0.1:')\n"
        "    for url in (postgres, mysql):\n"
        "        engine = sqlalchemy.create_engine(url)\n"
        "        with engine.connect() as conn:\n"
        "            assert conn.exec_driver_sql('SELECT 1').scalar() == 1\n"
        "        engine.dispose()\n"
        "def test_bucket(s3_bucket, s3_storage_options):\n"
        "    fs = fsspec.filesystem('s3', **s3_storage_options)\n"
        "    assert fs.ls(s3_bucket) == []\n"
        "    fs.pipe(f'{s3_bucket}/x/y.txt', b'hi')\n"
        "    assert fs.cat(f'{s3_bucket}/x/y.txt') == b'hi'\n"
        "def test_bucket_was_removed(s3_storage_options):\n"
        "    fs = fsspec.filesystem('s3', skip_instance_cache=True, **s3_storage_options)\n"
        "    assert [b for b in fs.ls('') if b.startswith('eoskit-test-')] == []\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOSKIT_")}
    env["EOSKIT_DEV_DIR"] = str(folder)
    return subprocess.run(
        # As a project asks for the plugin (docs/dev-services.md): it is no
        # pytest11 entry point, so a session without -p has no fixtures.
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-p", "eoskit.testing.pytest_plugin", "test_uses_services.py"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_pytest_plugin_stops_only_what_its_session_started(folder: Path, tmp_path: Path):
    session = run_pytest_session(folder, tmp_path)
    assert session.returncode == 0, session.stdout + session.stderr
    pids = {name: entry["pid"] for name, entry in recorded(folder).items()}
    assert pids == {"kafka": None, "postgres": None, "mariadb": None, "s3": None}  # started and stopped by it

    dev("up", "--dir", str(folder))
    running = {name: entry["pid"] for name, entry in recorded(folder).items()}
    session = run_pytest_session(folder, tmp_path)
    assert session.returncode == 0, session.stdout + session.stderr
    assert {name: entry["pid"] for name, entry in recorded(folder).items()} == running  # reused, left running
    dev("down", "--dir", str(folder))
    assert processes_mentioning(folder) == []


def test_plugin_stops_only_the_services_its_session_started(folder: Path, tmp_path: Path):
    """A folder from before the S3 service: the session adds S3, and stops only S3."""
    services = LocalServices(folder)
    services.services = [service for service in services.services if service.name != "s3"]
    services._endpoints = lambda state: "no S3 here"  # type: ignore[method-assign]  # _endpoints wants all four
    services.up()
    running = services.pids()
    session = run_pytest_session(folder, tmp_path)
    assert session.returncode == 0, session.stdout + session.stderr
    after = {name: entry["pid"] for name, entry in recorded(folder).items()}
    assert after == {**running, "s3": None}
    dev("down", "--dir", str(folder))


def test_s3_alone_up_twice_use_restart_down(tmp_path: Path):
    """Only moto: starting twice reuses it, a restart keeps the port but not the buckets."""
    import fsspec

    folder = tmp_path / "s3only"
    services = LocalServices(folder)
    services.services = [S3Service(services.root)]
    services._endpoints = lambda state: "S3 only"  # type: ignore[method-assign]  # _endpoints wants all four
    try:
        services.services[0].check_installed()
    except MissingBinaryError as exc:
        pytest.skip(str(exc))
    try:
        services.up()
        first = recorded(folder)["s3"]
        services.up()
        assert recorded(folder)["s3"] == first  # reused: same pid, same port
        endpoint = f"http://127.0.0.1:{first['port']}"
        assert services.status() == {"s3": f"running on {endpoint} (pid {first['pid']})"}
        check_s3(endpoint)

        fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_storage_options(endpoint))
        fs.mkdir("kept-in-memory-only")
        services.down()
        assert group_members(first["pid"]) == [] and services.status() == {"s3": "stopped"}
        services.up()
        second = recorded(folder)["s3"]
        assert second["port"] == first["port"] and second["pid"] != first["pid"]
        fs.invalidate_cache()
        assert fs.ls("") == []  # memory only: a restart loses the buckets
        services.down()
        assert group_members(second["pid"]) == [] and recorded(folder)["s3"]["pid"] is None
    finally:
        services.down()  # whatever happened


# -- Apache Kafka ----------------------------------------------------------------


@pytest.fixture(scope="module")
def kafka_alone(tmp_path_factory: pytest.TempPathFactory):
    """The dev broker alone in a folder of its own (the other services are not needed)."""
    services = LocalServices(tmp_path_factory.mktemp("kafka") / "dev")
    services.services = [KafkaService(services.root)]
    services._endpoints = lambda state: "Kafka only"  # type: ignore[method-assign]  # _endpoints wants all four
    try:
        services.services[0].check_installed()
    except MissingBinaryError as exc:
        pytest.skip(str(exc))
    try:
        services.up()
        yield f"127.0.0.1:{recorded(services.root)['kafka']['port']}"
    finally:
        services.purge()


def new_topic(bootstrap: str, partitions: int = 2) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"dev-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    return topic


def transactional_producer(bootstrap: str):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"dev-{uuid.uuid4().hex}"})
    producer.init_transactions(60)
    return producer


def in_transaction(producer, topic: str, values: list[bytes], commit: bool) -> None:
    producer.begin_transaction()
    for number, value in enumerate(values):
        producer.produce(topic, value, partition=number % 2)
    assert producer.flush(30) == 0
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed", partitions: int = 2,
             timeout: float = 60.0) -> list[bytes]:
    """Every record a consumer with ``isolation`` reads from the start to the end
    it is allowed to reach (for read_committed: the last stable offset)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dev-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic}: the end not reached in {timeout:.0f} s"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            values.append(message.value())
    finally:
        consumer.close()
    return values


def test_dev_broker_is_apache_kafka_in_kraft_mode(kafka_alone: str):
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": kafka_alone})
    metadata = admin.list_topics(timeout=30)
    assert list(metadata.brokers) == [1]
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    config = admin.describe_configs([resource])[resource].result(30)
    assert config["process.roles"].value == "broker,controller"
    secure = config["advertised.listeners"].value.split(",")[1]
    assert config["advertised.listeners"].value == f"PLAINTEXT://{kafka_alone},{secure}"
    assert secure.startswith("SASL_SSL://127.0.0.1:")
    assert config["transaction.state.log.min.isr"].value == "1"
    assert config["transaction.max.timeout.ms"].is_default


def test_aborted_and_open_transactions_are_invisible_to_read_committed(kafka_alone: str):
    topic = new_topic(kafka_alone)
    producer = transactional_producer(kafka_alone)
    first = [f"c{i}".encode() for i in range(20)]
    aborted = [f"a{i}".encode() for i in range(20)]
    second = [f"c{i}".encode() for i in range(20, 30)]
    in_transaction(producer, topic, first, commit=True)
    in_transaction(producer, topic, aborted, commit=False)
    in_transaction(producer, topic, second, commit=True)
    assert sorted(read_all(kafka_alone, topic)) == sorted(first + second)
    # The aborted records are in the log all the same: only the isolation level hides them.
    assert sorted(read_all(kafka_alone, topic, isolation="read_uncommitted")) == sorted(first + aborted + second)

    # An open transaction is invisible until it commits.
    producer.begin_transaction()
    producer.produce(topic, b"late", partition=0)
    assert producer.flush(30) == 0
    assert sorted(read_all(kafka_alone, topic)) == sorted(first + second)
    producer.commit_transaction(30)
    assert sorted(read_all(kafka_alone, topic)) == sorted(first + second + [b"late"])


@pytest.mark.full
def test_committed_records_survive_down_up_and_a_killed_broker_on_the_same_ports(folder: Path):
    where = ["--dir", str(folder)]
    dev("up", *where)
    before = recorded(folder)["kafka"]
    bootstrap = f"127.0.0.1:{before['port']}"
    assert "Apache Kafka" in dev("status", *where).stdout
    topic = new_topic(bootstrap)
    producer = transactional_producer(bootstrap)
    committed = [f"c{i}".encode() for i in range(500)]
    aborted = [f"a{i}".encode() for i in range(100)]
    in_transaction(producer, topic, committed[:300], commit=True)
    in_transaction(producer, topic, aborted, commit=False)
    in_transaction(producer, topic, committed[300:], commit=True)
    del producer
    assert sorted(read_all(bootstrap, topic)) == sorted(committed)

    # A clean stop: the data dir is kept, the ports are taken again.
    dev("down", *where)
    assert group_members(before["pid"]) == [] and processes_mentioning(folder) == []
    dev("up", *where)
    again = recorded(folder)["kafka"]
    assert (again["port"], again["ports"]) == (before["port"], before["ports"]) and again["pid"] != before["pid"]
    assert sorted(read_all(bootstrap, topic)) == sorted(committed)

    # SIGKILL of the broker, with clients connected a moment before (their
    # connections leave TIME_WAIT sockets on its port).
    os.kill(again["pid"], signal.SIGKILL)
    ref = ProcessRef(again["pid"], again["start_time"])
    deadline = time.monotonic() + 30
    while is_alive(ref) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not is_alive(ref)
    started = time.monotonic()
    dev("up", *where)
    print(f"up after a SIGKILL of the broker: {time.monotonic() - started:.1f} s")
    third = recorded(folder)["kafka"]
    assert (third["port"], third["ports"]) == (before["port"], before["ports"]) and third["pid"] != again["pid"]
    assert sorted(read_all(bootstrap, topic)) == sorted(committed)
    # The SASL_SSL listener is back on its port too, its certificates and user kept.
    secure = f"127.0.0.1:{third['ports']['secure']}"
    kafka_mod.list_topics(secure, 10, **kafka_mod.secure_client_config(
        secure, folder / "kafka" / "tls" / "ca.pem"))
    # ... and the restarted broker takes new transactions.
    producer = transactional_producer(bootstrap)
    in_transaction(producer, topic, [b"after"], commit=True)
    assert sorted(read_all(bootstrap, topic)) == sorted([*committed, b"after"])


def test_first_fetch_without_network_fails_in_one_line_and_starts_nothing(tmp_path: Path):
    try:
        kafka_jars.check_java()
        kafka_jars.ivy_jar()
    except MissingBinaryError as exc:
        pytest.skip(str(exc))
    dead = f"http://127.0.0.1:{pick_free_port()}"  # a proxy nobody listens on: no way out
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOSKIT_") and k.lower() != "no_proxy"}
    env.update(EOSKIT_CACHE_DIR=str(tmp_path / "cache"), https_proxy=dead, HTTPS_PROXY=dead,
               http_proxy=dead, HTTP_PROXY=dead)
    folder = tmp_path / "dev"
    done = dev("up", "--dir", str(folder), check=False, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    version = kafka_jars.DEFAULT_VERSION
    lines = done.stderr.splitlines()
    assert lines[-1].startswith(f"eoskit dev up: kafka: could not fetch Apache Kafka {version}'s jars: "
                                "Maven Central is unreachable from here"), done.stderr
    assert f"fill {tmp_path / 'cache' / 'kafka' / version} by hand" in lines[-1]
    assert len(lines) == 2 and lines[0].startswith("kafka: fetching")  # the progress line, then the error
    assert not folder.exists()
    assert sorted(p.name for p in (tmp_path / "cache" / "kafka").iterdir()) == [".fetch.lock", f"fetch-{version}.log"]
