"""A real ``eoskit run`` job for the benchmarks that kill and restart one
(restart.py, soak.py): JSON records from Kafka into ``eoskit-postgres``,
started as a process of its own (so that a crash point or a SIGKILL ends
a real driver), and its table checked afterwards with ``psql``, a client
eoskit does not use: every record once, nothing left prepared.

The benchmarks' own, not the test kit's (``eoskit.testing``), whose API
moves with the tests; the record format is the same as the conformance
kit's, so that the figures compare.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import make_url

from eoskit.runtime.devtools.demo.orders import recreate_topic
from eoskit.runtime.devtools.services.produce import produce_records
from eoskit.core import crash
from eoskit.twophase.txn_id import sink_prefix

#: The job: settings arrive through the environment (``EOSKIT_BENCH_*``).
#: ``EOSKIT_BENCH_MASTER`` selects the master (``local[2,3]`` by default, a
#: ``spark://`` cluster's URL) and ``EOSKIT_BENCH_SPARK_CONF`` (a JSON
#: object) adds Spark settings; on a cluster, the crash points' settings
#: travel to the executors as ``spark.executorEnv.*``.
JOB = '''
import json
import os

from pyspark.sql import functions as F

from eoskit.connectors.format_sink import FormatSink
from eoskit.connectors.kafka import KafkaSource
from eoskit.runtime import Pipeline

SCHEMA = "id BIGINT, amount BIGINT, customer STRING"
FAULTS = ("EOSKIT_CRASH_AT", "EOSKIT_CRASH_ONCE", "EOSKIT_PAUSE_AT", "EOSKIT_PAUSE_DIR")


def parse(df):
    return df.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r")).select("r.*")


pipeline = Pipeline(
    name="bench",
    source=KafkaSource(os.environ["EOSKIT_BENCH_KAFKA"], {
        "subscribe": os.environ["EOSKIT_BENCH_TOPIC"],
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": os.environ["EOSKIT_BENCH_MAX_OFFSETS"],
    }),
    transform=parse,
    sink=FormatSink("eoskit-postgres", json.loads(os.environ["EOSKIT_BENCH_OPTIONS"])),
    checkpoint_interval="500 milliseconds",
    # A failure ends the run unless the benchmark asks for restarts.
    restart_strategy=os.environ.get("EOSKIT_BENCH_RESTART_STRATEGY", "none"),
    spark_conf={
        # local[2,3]: two cores, and up to three attempts per task, as a cluster retries.
        "spark.master": os.environ.get("EOSKIT_BENCH_MASTER", "local[2,3]"),
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        # A short-lived driver: the JVM's quick compiler starts it sooner.
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        **{f"spark.executorEnv.{name}": os.environ[name] for name in FAULTS if os.environ.get(name)},
        **json.loads(os.environ.get("EOSKIT_BENCH_SPARK_CONF") or "{}"),
    },
)
'''


@dataclass(frozen=True)
class Workload:
    """A topic of ``records`` JSON records over ``partitions``, keyed by id:
    record i is ``{"id": i, "amount": amount(i), "customer": "c<i mod 50>"}``
    on partition i mod ``partitions``; the job reads ``batch_offsets`` a batch."""

    bootstrap: str
    topic: str
    records: int
    partitions: int
    batch_offsets: int

    @staticmethod
    def amount(record_id: int) -> int:
        return (record_id * 7) % 1000

    @classmethod
    def produce(cls, bootstrap: str, records: int, partitions: int, batches: int) -> Workload:
        """A new topic holding ``records`` records, read in about ``batches`` batches."""
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        recreate_topic(bootstrap, topic, partitions)
        produce_records(bootstrap, topic, (cls.record(i, partitions) for i in range(records)))
        return cls(bootstrap, topic, records, partitions, max(1, records // batches))

    @classmethod
    def record(cls, i: int, partitions: int) -> tuple[int, bytes, bytes]:
        """Record ``i``: (partition, key, value)."""
        return (i % partitions, str(i).encode(),
                json.dumps({"id": i, "amount": cls.amount(i), "customer": f"c{i % 50}"}).encode())

    def expected(self) -> list[tuple[int, int]]:
        return [(i, self.amount(i)) for i in range(self.records)]


class PostgresTable:
    """The job's ``eoskit-postgres`` sink and its tables, read back with
    ``psql`` (on the PATH), a client eoskit does not use."""

    def __init__(self, url: str) -> None:
        self.url = url

    def psql(self, query: str) -> str:
        """``query``'s rows, ``|``-separated; an AssertionError names psql's
        error (a failed check, as a wrong table is: soak.py reports both)."""
        libpq = make_url(self.url).set(drivername="postgresql").render_as_string(hide_password=False)
        result = subprocess.run(["psql", libpq, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", query],
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise AssertionError(f"psql failed: {result.stderr.strip()}")
        return result.stdout

    def options(self, table: str) -> dict[str, str]:
        return {"url": self.url, "dbtable": table, "mode": "append", "commitMode": "twophase"}

    def create_table(self, table: str) -> None:
        """No unique key, so that a duplicate would show."""
        self.psql(f"CREATE TABLE {table} (id bigint NOT NULL, amount bigint, customer text)")

    def drop_table(self, table: str) -> None:
        self.psql(f"DROP TABLE IF EXISTS {table}")

    def rows(self, table: str) -> list[tuple[int, int]]:
        out = self.psql(f"SELECT id, amount FROM {table}")
        return [(int(a), int(b)) for a, b in (line.split("|") for line in out.splitlines() if line)]

    def prepared(self, prefix: str) -> list[str]:
        out = self.psql(f"SELECT gid FROM pg_prepared_xacts WHERE left(gid, {len(prefix)}) = '{prefix}'")
        return sorted(line for line in out.splitlines() if line)

    def rollback(self, txn_id: str) -> None:
        self.psql(f"ROLLBACK PREPARED '{txn_id}'")


@dataclass
class JobRun:
    """One job: its table, checkpoint (under ``workdir``) and sink id."""

    target: PostgresTable
    workload: Workload
    workdir: Path
    table: str = field(default_factory=lambda: f"bench_{uuid.uuid4().hex[:10]}")
    sink_id: str = field(default_factory=lambda: f"bench{uuid.uuid4().hex[:10]}")
    #: Environment of every run (e.g. ``EOSKIT_BENCH_MASTER`` of a cluster).
    base_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def checkpoint(self) -> Path:
        return self.workdir / "checkpoint"

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment without crash settings, and the job's."""
        env = {k: v for k, v in os.environ.items()
               if k not in (crash.ENV, crash.ONCE_ENV, crash.DRIVER_GROUP_ENV, crash.CONTROL_ENV,
                            crash.PAUSE_ENV, crash.PAUSE_DIR_ENV, "PYSPARK_PYTHON")}
        env.update({
            "EOSKIT_BENCH_KAFKA": self.workload.bootstrap,
            "EOSKIT_BENCH_TOPIC": self.workload.topic,
            "EOSKIT_BENCH_MAX_OFFSETS": str(self.workload.batch_offsets),
            "EOSKIT_BENCH_OPTIONS": json.dumps({**self.target.options(self.table), "sinkId": self.sink_id}),
        })
        env.update(self.base_env)
        env.update(extra)
        return env

    def start(self, until_caught_up: bool = True, args: Sequence[str] = (), **extra: str) -> subprocess.Popen:
        """``eoskit run`` of the job (``args``: more of its arguments), in a
        process group of its own (a driver crash point kills the whole
        group), its output in ``run-<n>.log``."""
        job = self.workdir / "job.py"
        job.write_text(JOB)
        command = [str(Path(sys.executable).with_name("eoskit")), "run", str(job),
                   "--checkpoint-dir", str(self.checkpoint), *args]
        if until_caught_up:
            command.append("--until-caught-up")
        log = open(self.workdir / f"run-{time.monotonic_ns()}.log", "w")
        return subprocess.Popen(command, env=self.env(**extra), stdout=log, stderr=log,
                                start_new_session=True, cwd=self.workdir)

    def run_job(self, timeout: float = 600, **extra: str) -> tuple[int, str]:
        return self.wait(self.start(**extra), timeout)

    def wait(self, process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
        """Wait for a job ``start`` started: its exit code and log; what is
        left of its process group (a JVM outliving its driver) is killed."""
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return code, self.last_log()

    def last_log(self) -> str:
        logs = sorted(self.workdir.glob("run-*.log"))
        return logs[-1].read_text() if logs else ""

    def verify_exactly_once(self) -> None:
        """Every record's row once, with its amount, and nothing prepared;
        an AssertionError says what differs."""
        rows = sorted(self.target.rows(self.table))
        ids = [r[0] for r in rows]
        duplicates = len(ids) - len(set(ids))
        missing = self.workload.records - len(set(ids))
        if duplicates or missing:
            raise AssertionError(f"{self.table}: {len(rows)} rows for {self.workload.records} records: "
                                 f"{duplicates} duplicated, {missing} missing")
        assert rows == self.workload.expected(), "some rows carry wrong values"
        self.assert_nothing_prepared()

    def assert_nothing_prepared(self) -> None:
        left = self.target.prepared(sink_prefix(self.sink_id))
        assert left == [], f"prepared transactions left behind: {left}"
