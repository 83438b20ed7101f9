"""Shared fixtures of the integration tests: a SparkSession, topics, producers.

The services themselves (``kafka``, ``postgres``, ``mysql``) come from the
pytest plugin shipped in eoskit (``eoskit.testing.pytest_plugin``).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from confluent_kafka.admin import AdminClient, NewTopic

from eoskit.runtime.devtools.services import LocalServices
from eoskit.runtime.devtools.services.endpoints import endpoints_from_env
from eoskit.runtime.devtools.services.produce import produce_records
from eoskit.testing.pytest_plugin import DEFAULT_TEST_DIR, uses_containers
from eoskit.testing.conformance.harness import Run
from eoskit.testing.conformance.postgres import PostgresTarget
from eoskit.testing.conformance.workload import Workload


#: Spark's own Kafka connector, the reference that test_kafka_compat.py
#: compares eoskit-kafka with, loaded into the shared session through
#: spark.jars.packages (Spark's Ivy resolution; cached in ~/.ivy2.5.2 after the
#: first run). Its version is the installed PySpark's; when that release's
#: jars are not published (PySpark 4.3.0 is on PyPI, but the registry's newest
#: spark-sql-kafka-0-10 is 4.2.0, as of 2026-11), the newest one that is, which
#: runs on Spark 4.3. EOSKIT_SPARK_KAFKA_VERSION picks another.
SPARK_KAFKA_ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_2.13"
SPARK_KAFKA_FALLBACK = "4.2.0"

#: The connector version the shared session loaded (None: it could not be resolved).
spark_kafka_loaded: dict[str, str | None] = {"version": None, "why": "not started"}


def spark_kafka_versions() -> list[str]:
    """The connector versions to try, the one already in Ivy's cache first:
    a version that does not resolve costs a JVM start (and pages of Ivy output)."""
    import pyspark

    override = os.environ.get("EOSKIT_SPARK_KAFKA_VERSION", "").strip()
    wanted = [override] if override else list(dict.fromkeys([pyspark.__version__, SPARK_KAFKA_FALLBACK]))
    jars = Path(os.environ.get("EOSKIT_SPARK_IVY_DIR", Path.home() / ".ivy2.5.2")) / "jars"
    cached = [v for v in wanted if (jars / f"org.apache.spark_spark-sql-kafka-0-10_2.13-{v}.jar").exists()]
    return cached[:1] or wanted


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    from pyspark.errors import PySparkRuntimeError

    from eoskit.runtime.spark.session import get_session
    from eoskit.core import crash  # The session's Python workers inherit the environment its JVM starts
    # with: a crash scenario that kills only a task's worker arms its point
    # through this folder (crash.arm) and runs in this warm session instead
    # of a driver of its own.
    os.environ[crash.CONTROL_ENV] = str(tmp_path_factory.mktemp("crash-control"))

    # Spark's Python is get_session's choice, as in a job: in local mode
    # eoskit-spark-python beside this interpreter (runtime/spark/python.py),
    # which hands Spark's helpers to the zygote; not the shell's.
    os.environ.pop("PYSPARK_PYTHON", None)
    conf = {
        # Two cores, and up to three attempts per task, as a cluster retries.
        "spark.master": "local[2,3]",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.sql.streaming.pollingDelay": "100ms",
        # Small test batches: the JVM's quick compiler starts sooner and is fast enough.
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    }
    # A session some code started earlier in this process (a CLI verb run
    # in-process by a unit test, say) would be handed back by getOrCreate
    # without this conf, Spark's Kafka connector included: stop it first.
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        print(f"\nstopping a Spark session started before the shared one "
              f"({SparkContext._active_spark_context.appName}): it lacks the tests' settings")
        SparkContext._active_spark_context.stop()
    session = None
    for version in spark_kafka_versions():
        try:
            session = get_session("eoskit-integration-tests",
                                  {**conf, "spark.jars.packages": f"{SPARK_KAFKA_ARTIFACT}:{version}"})
        except PySparkRuntimeError as exc:  # the JVM exits when Ivy cannot resolve the package
            spark_kafka_loaded["why"] = f"{SPARK_KAFKA_ARTIFACT}:{version} did not load ({exc})"
            continue
        spark_kafka_loaded.update(version=version, why="")
        break
    if session is None:  # offline, nothing cached: every test but the comparison still runs
        session = get_session("eoskit-integration-tests", conf)
    yield session
    session.stop()


@pytest.fixture
def spark_kafka(spark) -> str:
    """The version of Spark's own Kafka connector in the shared session; skips without one."""
    if spark_kafka_loaded["version"] is None:
        pytest.skip(f"Spark's Kafka connector is not loaded: {spark_kafka_loaded['why']}")
    return spark_kafka_loaded["version"]


def create_topic(
    bootstrap: str, partitions: int, prefix: str = "t", config: Mapping[str, str] | None = None
) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=dict(config or {}))]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(timeout=10).topics.get(name)
        if topic is not None and len(topic.partitions) == partitions:
            return name
        time.sleep(0.2)
    raise TimeoutError(f"topic {name} did not appear")


def produce(
    bootstrap: str,
    topic: str,
    records: Mapping[int, Sequence[tuple[bytes | None, bytes]]],
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    """Produce ``partition -> [(key, value)]`` (see eoskit.runtime.devtools.services.produce)."""
    produce_records(bootstrap, topic,
                    ((p, key, value) for p, rows in records.items() for key, value in rows), headers)


def numbered(partitions: int, per_partition: int, start: int = 0) -> dict[int, list[tuple[bytes, bytes]]]:
    """Records whose value is a unique number, spread over partitions."""
    out: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(partitions)}
    for i in range(start, start + partitions * per_partition):
        out[i % partitions].append((str(i).encode(), str(i).encode()))
    return out


@pytest.fixture
def new_topic(kafka: str) -> Callable[..., str]:
    return lambda partitions=3, prefix="t", config=None: create_topic(kafka, partitions, prefix, config)


@pytest.fixture
def produce_to(kafka: str) -> Callable[..., None]:
    return lambda topic, records, headers=None: produce(kafka, topic, records, headers)


@pytest.fixture
def numbered_records() -> Callable[..., dict[int, list[tuple[bytes, bytes]]]]:
    return numbered


@pytest.fixture
def records_topic(new_topic, produce_to) -> Callable[..., str]:
    """A new topic holding JSON ``rows``, each keyed by and partitioned on its ``id``."""
    def make(rows: list[dict], partitions: int = 2) -> str:
        topic = new_topic(partitions)
        per_partition: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(partitions)}
        for row in rows:
            per_partition[row["id"] % partitions].append((str(row["id"]).encode(), json.dumps(row).encode()))
        produce_to(topic, {p: r for p, r in per_partition.items() if r})
        return topic
    return make


# -- the PostgreSQL sink as a conformance target, read back with psql ----------

@pytest.fixture
def postgres_target(postgres: str) -> Callable[..., PostgresTarget]:
    return lambda commit_mode="twophase": PostgresTarget(postgres, commit_mode)


@pytest.fixture(scope="module")
def postgres_workload(kafka: str) -> Workload:
    """20,000 records in 4 partitions, 4 batches, one topic per test module:
    what a runtime scenario needs (each run reads it into a table of its own)."""
    return Workload.produce(kafka, records=20_000, partitions=4, batches=4)


@pytest.fixture
def postgres_run(postgres_target, postgres_workload, tmp_path) -> Iterator[Run]:
    """The conformance job into a new PostgreSQL table (two-phase) on
    ``postgres_workload``; its prepared transactions rolled back and its
    table dropped after the test."""
    target = postgres_target()
    run = Run(target, postgres_workload, tmp_path)
    target.create_table(run.table)
    yield run
    for txn in target.prepared(f"eoskit:{run.sink_id}:"):
        target.rollback(txn)
    target.drop_table(run.table)


# -- stateful jobs without a broker: JSON files in, rows gathered on the driver ----

class JsonFiles:
    """A streaming source of JSON-lines files read one file per micro-batch, so
    that a test decides what each batch holds (a ``Pipeline`` source, or
    ``read_stream`` for a query started by hand)."""

    def __init__(self, folder, schema: str) -> None:
        from pathlib import Path

        self.folder, self.schema, self.count = Path(folder), schema, 0
        self.folder.mkdir(parents=True, exist_ok=True)

    def add(self, *rows: dict) -> None:
        """One new file, the rows of one batch (written aside, then renamed in)."""
        self.count += 1
        tmp = self.folder.parent / f".{self.folder.name}-{self.count}.tmp"
        tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
        tmp.rename(self.folder / f"{self.count:05d}.json")

    def read_stream(self, spark: SparkSession):
        return spark.readStream.schema(self.schema).option("maxFilesPerTrigger", 1).json(str(self.folder))

    def describe(self) -> str:
        return f"json files {self.folder}"


class Gathered:
    """A ``Pipeline`` sink that gathers every batch's rows on the driver
    (``foreachBatch``, so every output mode), as plain dicts by batch id."""

    def __init__(self, output_mode: str = "update") -> None:
        self.output_mode = output_mode
        self.batches: dict[int, list[dict]] = {}

    def gather(self, df, batch_id: int) -> None:
        self.batches[batch_id] = [row.asDict(recursive=True) for row in df.collect()]

    def write_stream(self, df):
        return df.writeStream.outputMode(self.output_mode).foreachBatch(self.gather)

    def rows(self) -> list[dict]:
        return [row for batch in sorted(self.batches) for row in self.batches[batch]]

    def describe(self) -> str:
        return "rows gathered on the driver"


@pytest.fixture(scope="session")
def gathered() -> type[Gathered]:
    return Gathered


@pytest.fixture(scope="session")
def json_files_type() -> type[JsonFiles]:
    """``JsonFiles`` itself, for module-scoped fixtures (``json_files`` is per test)."""
    return JsonFiles


@pytest.fixture
def json_files(tmp_path) -> Callable[..., JsonFiles]:
    names = iter(range(1000))
    return lambda schema: JsonFiles(tmp_path / f"in{next(names)}", schema)


@pytest.fixture(scope="session")
def local_services(request: pytest.FixtureRequest, service_endpoints) -> LocalServices:
    """The folder of the local services this session uses, to restart them;
    skips where the session's services cannot be restarted from here."""
    if uses_containers(os.environ):
        pytest.skip("the services run in containers; this test restarts local service processes")
    if endpoints_from_env(os.environ) is None:
        root = os.environ.get("EOSKIT_DEV_DIR") or Path(request.config.rootpath) / DEFAULT_TEST_DIR
    else:
        root = os.environ.get("EOSKIT_DEV_DIR")
        if not root:
            pytest.skip("the services come from the EOSKIT_* variables and this test cannot "
                        "restart them: set EOSKIT_DEV_DIR to their `eoskit dev` folder to let it")
    services = LocalServices(root)
    found = services.endpoints()
    if found is None or (found.postgres_url, found.mysql_url) != (
            service_endpoints.postgres_url, service_endpoints.mysql_url):
        pytest.skip(f"the local services under {root} are not the ones this session uses, "
                    "so this test cannot restart them")
    return services


# -- the network-fault tests: every party on a host of its own ---------------

@pytest.fixture(scope="session")
def net(network_services):
    """The pytest plugin's ``network_services``: the dev services on hosts of
    their own in a network lab, with a job host."""
    return network_services
