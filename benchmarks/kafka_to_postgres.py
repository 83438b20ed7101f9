"""Kafka -> PostgreSQL throughput: a plain loop against eoskit's exactly-once query.

Both read the SAME topic (produced once per run) and write the same table
layout, so the ratio printed at the end is the price of Spark plus the
exactly-once protocol on this machine. See benchmarks/README.md.

    .venv/bin/python benchmarks/kafka_to_postgres.py [--records 1000000] [--partitions 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pyspark
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter
from cpu_share import Cpu
from cpu_share import describe as describe_cpu
from spark_peer import URL_ENV
from sqlalchemy.engine import make_url

from eoskit.connectors.postgres.connection import connect_kwargs
from eoskit.runtime.demo.orders import ORDER_VALUE_BYTES, OrderTotals, produce_orders, recreate_topic
from eoskit.runtime.dev import LocalServices
from eoskit.runtime.spark import get_session
from eoskit.twophase import timings

ORDER_SCHEMA = "order_id BIGINT, customer STRING, amount DECIMAL(12,2), created_at TIMESTAMP"
TABLE_DDL = "(order_id bigint, customer text, amount numeric(12,2), created_at timestamptz)"
COLUMNS = ("order_id", "customer", "amount", "created_at")
BASELINE_TABLE = "bench_baseline"
EOSKIT_TABLE = "bench_eoskit"
CONSUME_BATCH = 10_000
#: The baseline gives up when no record arrives for this long: a stuck read
#: must fail the benchmark, not hang it.
STALL_TIMEOUT_S = 60.0
#: Every produced record carries this timestamp (see produce_orders).
CREATED_AT = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)


# --------------------------------------------------------------------- results

@dataclass
class Timings:
    """Seconds spent per phase, accumulated with ``phase``."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


@dataclass
class BaselineResult:
    """A run outside Spark: the plain loop, or another contender."""

    rows: int
    wall_s: float
    phases: Timings
    #: A peer run in a process of its own: the JSON line it printed (its
    #: batches among them), kept for --json-out.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class StreamResult:
    """One availableNow query: wall time and what Spark's progress reports say."""

    rows: int
    wall_s: float
    batches: int
    batch_rows: list[int]  # numInputRows of each batch with data
    durations_ms: list[dict[str, int]]  # durationMs of each of those batches
    failed_tasks: int | None = None  # task attempts that failed (retried), None if unknown
    batch_ids: list[int] = field(default_factory=list)  # batchId of each of those batches
    #: eoskit's own spans (EOSKIT_TIMINGS_DIR), when the run recorded them
    spans: list[timings.Span] = field(default_factory=list)

    def batch_seconds(self, first: int = 0) -> float:
        """Sum of triggerExecution from batch ``first`` on: first=1 leaves out
        the one-off start-up (Python workers, the sink's first planning)."""
        return sum(d.get("triggerExecution", 0) for d in self.durations_ms[first:]) / 1000

    def batch_rows_from(self, first: int = 0) -> int:
        return sum(self.batch_rows[first:])


@dataclass
class TableStats:
    count: int
    distinct_ids: int
    amount: Decimal | None
    min_created: datetime | None
    max_created: datetime | None
    #: What the reader found wrong besides these numbers (e.g. a Kafka
    #: topic's open transactions, or a record whose fields are wrong).
    problems: tuple[str, ...] = ()


# -------------------------------------------------------------------- postgres

def pg_connect(sqlalchemy_url: str, **kwargs: Any) -> psycopg.Connection:
    """psycopg from the SQLAlchemy URL LocalServices gives (eoskit's own mapping)."""
    return psycopg.connect(**connect_kwargs(make_url(sqlalchemy_url)), **kwargs)


def reset_table(sqlalchemy_url: str, table: str) -> None:
    """Both runs start from an empty table of the same layout (no index, no key),
    so neither pays for anything the other does not."""
    with pg_connect(sqlalchemy_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} {TABLE_DDL}")


def table_stats(sqlalchemy_url: str, table: str) -> TableStats:
    """An independent reading of what a run left in the table."""
    with pg_connect(sqlalchemy_url, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*), count(DISTINCT order_id), sum(amount), "
            f"min(created_at), max(created_at) FROM {table}"
        ).fetchone()
    assert row is not None
    return TableStats(*row)


def verify(name: str, stats: TableStats, expected: OrderTotals) -> list[str]:
    """What differs from the produced data; empty when every order is there once."""
    problems = []
    if stats.count != expected.count:
        problems.append(f"{name}: {stats.count} rows, expected {expected.count}")
    if stats.distinct_ids != expected.count:
        problems.append(f"{name}: {stats.distinct_ids} distinct order_ids, expected {expected.count}")
    if stats.amount != expected.amount:
        problems.append(f"{name}: sum(amount) = {stats.amount}, expected {expected.amount}")
    if stats.min_created != CREATED_AT or stats.max_created != CREATED_AT:
        problems.append(f"{name}: created_at spans {stats.min_created} .. {stats.max_created}, "
                        f"expected {CREATED_AT} only")
    return problems + [f"{name}: {problem}" for problem in stats.problems]


# ----------------------------------------------------------------------- kafka

def produce(bootstrap: str, topic: str, records: int, partitions: int, value_bytes: int = 0
            ) -> tuple[OrderTotals, float]:
    """A fresh topic with the demo's orders; returns their totals and the seconds it took.

    The topic is created explicitly, with the partitions asked for;
    ``value_bytes``: each record's value about this long (0: the demo's).
    """
    started = time.perf_counter()
    recreate_topic(bootstrap, topic, partitions)
    totals = produce_orders(bootstrap, topic, records, partitions, value_bytes=value_bytes)
    return totals, time.perf_counter() - started


def delete_topic(bootstrap: str, topic: str) -> None:
    """The broker keeps a million records per run otherwise."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(30)


def end_offsets(consumer: Consumer, topic: str, partitions: int) -> dict[int, int]:
    return {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
        for p in range(partitions)
    }


# -------------------------------------------------------------------- baseline

def _consume_rows(consumer: Consumer, ends: dict[int, int], phases: Timings) -> list[tuple]:
    """One consume() call's records as COPY rows; drops partitions from ``ends`` once read."""
    with phases.phase("kafka consume"):
        messages = consumer.consume(CONSUME_BATCH, timeout=1.0)
    rows = []
    with phases.phase("json parse"):
        for message in messages:
            if message.error() is not None:
                raise KafkaException(message.error())
            partition, offset = message.partition(), message.offset()
            end = ends.get(partition)
            if end is None or offset >= end:
                continue
            order = json.loads(message.value())
            rows.append((order["order_id"], order["customer"], order["amount"], order["created_at"]))
            if offset + 1 >= end:
                del ends[partition]
    return rows


def _copy_rows(conn: psycopg.Connection, rows: list[tuple], phases: Timings) -> None:
    with phases.phase("postgres copy+commit"):
        with conn.cursor().copy(
            f"COPY {BASELINE_TABLE} ({', '.join(COLUMNS)}) FROM STDIN"
        ) as copy:
            for row in rows:
                copy.write_row(row)
        conn.commit()


def run_baseline(bootstrap: str, postgres_url: str, topic: str, partitions: int) -> BaselineResult:
    """The plain single-process loop: what one Python process does with no
    guarantees (a crash between COPY commits and any offset bookkeeping
    would duplicate or lose a batch)."""
    phases = Timings()
    started = time.perf_counter()
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"eoskit-bench-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })
    rows_written = 0
    try:
        ends = {p: end for p, end in end_offsets(consumer, topic, partitions).items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        last_progress = time.monotonic()
        with pg_connect(postgres_url) as conn:
            while ends:
                rows = _consume_rows(consumer, ends, phases)
                if rows:
                    _copy_rows(conn, rows, phases)
                    rows_written += len(rows)
                    last_progress = time.monotonic()
                elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                    raise TimeoutError(f"baseline: no records for {STALL_TIMEOUT_S}s; "
                                       f"partitions not finished: {ends}")
        wall = time.perf_counter() - started
    finally:
        consumer.close()
    return BaselineResult(rows_written, wall, phases)


# ----------------------------------------------------------------------- spark

def spark_session(master: str = "local[2]", extra: dict[str, str] | None = None) -> SparkSession:
    """local[2]: the machine's two cores, as a small deployment would give one job.

    No registration call: Spark 4 registers eoskit-kafka and eoskit-postgres
    from their installed pyspark_eoskit_* modules (registering again only
    logs a "replaced a statically registered data source" warning).
    """
    return get_session("bench", {
        "spark.master": master,
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        **(extra or {}),
    })


def kafka_stream(spark: SparkSession, bootstrap: str, topic: str, max_offsets: int) -> DataFrame:
    """The eoskit-kafka source over the whole topic, in batches of ``max_offsets``."""
    return (spark.readStream.format("eoskit-kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(max_offsets))
            .load())


def parse_orders(raw: DataFrame) -> DataFrame:
    """JSON value -> typed columns, the way a Spark user would write it."""
    return raw.select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o")).select("o.*")


WriterSetup = Callable[[DataStreamWriter], DataStreamWriter]


def failed_task_attempts(spark: SparkSession) -> int | None:
    """Failed task attempts so far in this Spark application (Spark's status
    store, through py4j); None when it cannot be read."""
    try:
        jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)  # a Scala Seq
        return sum(jobs.apply(i).numFailedTasks() for i in range(jobs.length()))
    except Exception:  # noqa: BLE001 - an internal API: the count is a bonus
        return None


def run_stream(configure: WriterSetup, orders: DataFrame, name: str) -> StreamResult:
    """Run one availableNow query to its end in a fresh checkpoint and read its progress."""
    checkpoint = tempfile.mkdtemp(prefix=f"eoskit-bench-{name}-")
    failed_before = failed_task_attempts(orders.sparkSession)
    spans_dir = timings.directory()
    if spans_dir is not None:
        timings.load(spans_dir, clear=True)  # an earlier query's spans are not this one's
    try:
        started = time.perf_counter()
        writer = configure(orders.writeStream.option("checkpointLocation", checkpoint))
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        wall = time.perf_counter() - started
        if query.exception() is not None:
            raise RuntimeError(f"{name} query failed: {query.exception()}")
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    failed_after = failed_task_attempts(orders.sparkSession)
    spans = timings.load(spans_dir, clear=True) if spans_dir is not None else []
    return StreamResult(
        rows=sum(p["numInputRows"] for p in progress),
        wall_s=wall,
        batches=len(progress),
        batch_rows=[p["numInputRows"] for p in progress],
        durations_ms=[p["durationMs"] for p in progress],
        failed_tasks=(None if failed_before is None or failed_after is None
                      else failed_after - failed_before),
        batch_ids=[p["batchId"] for p in progress],
        spans=spans,
    )


def postgres_writer(postgres_url: str, table: str = EOSKIT_TABLE, commit_mode: str | None = None
                    ) -> WriterSetup:
    """The sink as the task describes it; the table exists already (reset_table),
    createTable=true only makes the query independent of that. ``commit_mode``:
    the sink's commitMode option, its default (two-phase) when None."""

    def configure(writer: DataStreamWriter) -> DataStreamWriter:
        writer = (writer.format("eoskit-postgres")
                  .option("url", postgres_url)
                  .option("dbtable", table)
                  .option("mode", "append")
                  .option("createTable", "true"))
        return writer if commit_mode is None else writer.option("commitMode", commit_mode)
    return configure


def noop_writer(writer: DataStreamWriter) -> DataStreamWriter:
    """Spark's noop sink: every row is produced, none is written anywhere."""
    return writer.format("noop")


def run_breakdown(raw: DataFrame, transform: Callable[[DataFrame], DataFrame] = parse_orders,
                  what: str = "parse") -> list[tuple[str, StreamResult]]:
    """The same stream without the sink, then without the transform too: the
    differences between these and the eoskit run are the sink's and the
    transform's shares. They run after the eoskit query, on warm Python workers."""
    return [
        (f"noop: source + {what}", run_stream(noop_writer, transform(raw), "noop-parsed")),
        ("noop: source only", run_stream(noop_writer, raw.select("value"), "noop-raw")),
    ]


# ---------------------------------------------------------------------- report

def rate(rows: int, seconds: float) -> float:
    return rows / seconds if seconds > 0 else float("nan")


def machine_facts() -> list[tuple[str, str]]:
    """The machine is shared: the load average says whether the numbers were quiet ones."""
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        ("cores (os.cpu_count)", str(os.cpu_count())),
        ("cores usable (affinity)", str(len(os.sched_getaffinity(0)))),
        ("load average 1/5/15 min", load),
        ("platform", platform.platform()),
        ("python", platform.python_version()),
        ("pyspark", pyspark.__version__),
    ]


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"\n{title}")
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}")


DURATION_KEYS = ("triggerExecution", "addBatch", "queryPlanning", "latestOffset",
                 "walCommit", "commitOffsets")


def print_stream(label: str, result: StreamResult) -> None:
    """Spark's own per-batch split: addBatch is the job (read, parse, write,
    commit); the rest is the engine's bookkeeping around it."""
    failed = "unknown" if result.failed_tasks is None else str(result.failed_tasks)
    print(f"\n{label}: {result.batches} batches, {failed} failed task attempts; "
          "durationMs per batch: " + " / ".join(DURATION_KEYS))
    for i, (rows, d) in enumerate(zip(result.batch_rows, result.durations_ms)):
        print(f"  batch {i} ({rows:,} rows): " + " / ".join(str(d.get(k, "-")) for k in DURATION_KEYS))


#: Spark's phases of a batch (StreamingQueryProgress.durationMs), as rows of
#: the breakdown table; addBatch holds the write job, so every task phase.
SPARK_PHASES = ("triggerExecution", "queryPlanning", "getBatch", "latestOffset", "walCommit",
                "addBatch", "commitOffsets")
#: eoskit's spans (eoskit.twophase.timings) in the order a batch runs them;
#: an indented name is part of the one above it. Phases not listed follow.
EOSKIT_PHASES = (
    ("plan.writer", "sink planning (streamWriter), driver"),
    ("plan.check", "  sink check (first batch of a process)"),
    ("plan.sweep", "  start-up sweep"),
    ("sweep.clear_aborted", "    decision log: clear aborts"),
    ("sweep.list_prepared", "    list prepared ids"),
    ("plan.decision_log", "  decision log: create, identity"),
    ("source.fetch", "source: Kafka fetch (slowest task)"),
    ("source.convert", "source: records to Arrow"),
    ("task", "sink task, whole (slowest task)"),
    ("task.input", "  waiting for input rows"),
    ("task.read_decision", "  decision log reads"),
    ("task.claim", "  claim marker"),
    ("task.write", "  write"),
    ("task.write.encode", "    Arrow to COPY CSV"),
    ("task.prepare", "  prepare"),
    ("task.commit", "  commit (marked)"),
    ("driver.commit", "commit process, whole"),
    ("commit.read_decision", "  decision log read"),
    ("commit.list_prepared", "  list prepared ids"),
    ("commit.decide", "  decision log write"),
    ("commit.commit_prepared", "  COMMIT PREPARED"),
    ("commit.roll_back_others", "  roll back others"),
    ("commit.decision_applied", "  sink's batch hook"),
    ("commit.mark_done", "  decision log: done"),
)


def phase_rows(result: StreamResult) -> list[tuple[str, list[float]]]:
    """Per batch (ms): Spark's phases, then eoskit's (a task phase is its
    slowest task's, see timings.per_batch)."""
    rows = [(f"spark {key}", [float(d.get(key, 0)) for d in result.durations_ms])
            for key in SPARK_PHASES if any(key in d for d in result.durations_ms)]
    table = timings.per_batch(result.spans)
    seen = {p for b in result.batch_ids for p in table.get(b, {})}
    known = dict(EOSKIT_PHASES)
    order = [p for p, _ in EOSKIT_PHASES if p in seen] + sorted(seen - set(known))
    rows += [(f"eoskit {known.get(p, p)}", [table.get(b, {}).get(p, 0.0) for b in result.batch_ids])
             for p in order]
    return rows


def print_phases(label: str, result: StreamResult) -> None:
    """The breakdown table: batch 1, the median and the maximum of the later
    batches, then every batch."""
    rows = phase_rows(result)
    if not rows:
        return
    width = max(len(name) for name, _ in rows)
    ids = result.batch_ids
    print(f"\n{label}: where each batch's time goes (ms; batches {ids[0]}..{ids[-1]}; "
          "'later' = every batch but the first)")
    head = f"  {'phase':<{width}} {'first':>7} {'median':>7} {'max':>7}  " + " ".join(
        f"{b:>6}" for b in ids)
    print(head)
    for name, values in rows:
        later = values[1:]
        median = statistics.median(later) if later else float("nan")
        peak = max(later) if later else float("nan")
        print(f"  {name:<{width}} {values[0]:>7.0f} {median:>7.0f} {peak:>7.0f}  "
              + " ".join(f"{v:>6.0f}" for v in values))


def stream_rows(label: str, result: StreamResult) -> list[tuple[str, int, float]]:
    """Wall (start() to termination), every batch, and every batch but the first."""
    rows = [
        (f"{label} (wall)", result.rows, result.wall_s),
        (f"{label} (batches only)", result.rows, result.batch_seconds()),
    ]
    if result.batches > 1:
        rows.append((f"{label} (all but batch 1)", result.batch_rows_from(1),
                     result.batch_seconds(1)))
    return rows


def report(args: argparse.Namespace, produce_s: float, spark_start_s: float,
           baselines: list[tuple[str, BaselineResult]], eoskit: StreamResult,
           others: list[tuple[str, StreamResult]],
           facts_before: list[tuple[str, str]], sink: str, master: str = "local[2]",
           not_run: list[tuple[str, str]] | None = None) -> None:
    """``baselines``: the plain loop first, then any other contender; the
    ``x baseline`` column divides by the first one's rate. ``others``: more
    queries of this session (other commit modes, the --breakdown runs)."""
    print_table("machine (at start)", facts_before)
    print_table("parameters", [
        ("records", f"{args.records:,}"),
        ("partitions", str(args.partitions)),
        ("record value, bytes", f"about {args.value_bytes or ORDER_VALUE_BYTES:,}"),
        ("maxOffsetsPerTrigger", f"{args.max_offsets_per_trigger:,}"),
        ("spark master", master),
        ("produce (not timed in results)", f"{produce_s:.1f} s"),
        ("Spark session start (not in results)", f"{spark_start_s:.1f} s"),
    ])
    for label, result in baselines:
        print(f"\n{label} phases: " + ", ".join(
            f"{k} {v:.1f} s" for k, v in result.phases.seconds.items()))
    for label, reason in not_run or []:
        print(f"\n{label}: NOT RUN: {reason}")
    print_stream(sink, eoskit)
    for label, result in others:
        print_stream(label, result)
    if eoskit.spans:
        print_phases(f"eoskit -> {sink}", eoskit)
        for label, result in others:
            print_phases(label, result)
    base_rate = rate(baselines[0][1].rows, baselines[0][1].wall_s)
    rows = [(label, result.rows, result.wall_s) for label, result in baselines]
    rows += stream_rows("eoskit", eoskit)
    for label, result in others:
        rows += stream_rows(label, result)
    width = max(len(label) for label, _, _ in rows)
    print(f"\n  {'run':<{width}} {'rows':>10} {'seconds':>8} {'rows/s':>9} {'x baseline':>11}")
    for label, count, seconds in rows:
        r = rate(count, seconds)
        print(f"  {label:<{width}} {count:>10,} {seconds:>8.1f} {r:>9,.0f} {r / base_rate:>11.2f}")
    if len(baselines) > 1:
        print("\neoskit's rate over each other run's (whole run: wall; steady: all but batch 1):")
        ours = stream_rows("eoskit", eoskit)
        for label, result in baselines:
            theirs = rate(result.rows, result.wall_s)
            ratios = ", ".join(f"{mine.split('(')[-1].rstrip(')')} {rate(n, t) / theirs:.2f}x"
                               for mine, n, t in ours)
            print(f"  eoskit / {label}: {ratios}")
    print_table("machine (at end)", machine_facts()[2:3])


# ------------------------------------------------- machine-readable (--json-out)

def per_s(rows: int, seconds: float) -> float | None:
    """``rate``, with None where it is not a number (JSON has no NaN)."""
    return rows / seconds if seconds > 0 else None


def batch_figures(batch_rows: list[int], batch_s: list[float]) -> dict[str, Any]:
    """From each batch's rows and seconds: the first batch, the median of the
    later ones, and the steady rate (every batch but the first, as the
    "all but batch 1" rows of the reports)."""
    return {"batches": len(batch_s), "first_batch_s": batch_s[0] if batch_s else None,
            "later_batch_s": statistics.median(batch_s[1:]) if len(batch_s) > 1 else None,
            "steady_rows_per_s": per_s(sum(batch_rows[1:]), sum(batch_s[1:])),
            "batch_rows": list(batch_rows), "batch_s": list(batch_s)}


def stream_figures(result: StreamResult) -> dict[str, Any]:
    """An availableNow query's figures: wall (start() to termination), and
    per batch Spark's triggerExecution."""
    seconds = [d.get("triggerExecution", 0) / 1000 for d in result.durations_ms]
    return {"rows": result.rows, "wall_s": result.wall_s, "rows_per_s": per_s(result.rows, result.wall_s),
            "failed_tasks": result.failed_tasks, **batch_figures(result.batch_rows, seconds)}


def runner_figures(line: dict[str, Any]) -> dict[str, Any]:
    """A Spark peer's figures from the JSON line its runner printed
    (spark_peer.run_available_now): wall is its query's run_s, as in the reports."""
    return {"rows": line["rows"], "wall_s": line["run_s"], "rows_per_s": per_s(line["rows"], line["run_s"]),
            "failed_tasks": line.get("failed_tasks"),
            **batch_figures(line.get("batch_rows", []), line.get("batch_s", [])), "runner": line}


def baseline_figures(result: BaselineResult) -> dict[str, Any]:
    """A run outside this process's Spark: rows and wall; a Spark peer's batches too."""
    figures = {"rows": result.rows, "wall_s": result.wall_s, "rows_per_s": per_s(result.rows, result.wall_s),
               "phases": dict(result.phases.seconds)}
    if "batch_s" in result.extra:
        figures.update(runner_figures(result.extra))
    elif result.extra:
        figures["runner"] = result.extra
    return figures


def write_json_out(path: str | None, peers: list[dict[str, Any]]) -> None:
    """--json-out: one object per peer the run measured (or could not run),
    for benchmarks/peers.py; nothing when the option is not given."""
    if path:
        Path(path).write_text(json.dumps(peers, indent=1) + "\n")


def peer_record(group: str, peer_id: str, label: str, figures: dict[str, Any],
                problems: list[str] | None) -> dict[str, Any]:
    """``problems``: what the output's reader found wrong, None when no reader checks it."""
    return {"peer": label, "id": peer_id, "group": group, **figures,
            "verified": None if problems is None else not problems, "problems": problems or []}


# ------------------------------------------------------------------------ main

class Unavailable(Exception):
    """A contender that cannot run on this machine; the message says why."""


@dataclass(frozen=True)
class Contender:
    """Another implementation run on the same topic, after the plain loop,
    into its own table; it raises :class:`Unavailable` if it cannot run."""

    label: str
    table: str
    run: Callable[[str, str, str, int], BaselineResult]  # (bootstrap, url, topic, partitions)


@dataclass(frozen=True)
class Target:
    """What one benchmark writes to (a database, or Kafka) and how it is
    checked; the topic, the Spark side, the report and the run are shared."""

    sink: str  # the eoskit format, e.g. eoskit-postgres
    baseline: str  # what the plain loop does, for the progress line
    url_of: Callable[[Any], str]  # where the output goes, from LocalServices' endpoints
    reset_table: Callable[[str, str], None]
    table_stats: Callable[[str, str], TableStats]
    run_baseline: Callable[[str, str, str, int], BaselineResult]
    writer: Callable[[str], WriterSetup]
    #: What eoskit's query does between source and sink, and its name.
    transform: Callable[[DataFrame], DataFrame] = parse_orders
    transform_name: str = "from_json"
    baseline_label: str = "baseline (plain loop)"
    contenders: tuple[Contender, ...] = ()
    spark_master: str = "local[2]"
    #: Called for each output once it is verified (a topic held in the
    #: broker's memory, for one); tables are kept.
    drop_table: Callable[[str, str], None] | None = None
    #: More of eoskit's commit modes to run after the default one, in the
    #: same session, each into its own table, and the writer that takes a
    #: table and a mode ((url, table, mode) -> writer).
    commit_modes: tuple[str, ...] = ()
    mode_writer: Callable[[str, str, str], WriterSetup] | None = None


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: give 0 or more")
    return value


def spark_conf_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE, e.g. spark.sql.shuffle.partitions=4")
    return key.strip(), value


def parse_args(argv: list[str] | None, description: str, records: int = 1_000_000,
               max_offsets: int = 250_000,
               extend: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.Namespace:
    """The options every benchmark takes; ``extend`` adds a benchmark's own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--records", type=int, default=records)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=max_offsets)
    parser.add_argument("--breakdown", action="store_true",
                        help="record eoskit's own phases per batch (EOSKIT_TIMINGS_DIR) and print "
                             "them beside Spark's; also run the stream into Spark's noop sink, "
                             "with and without the JSON parse, to split source, parse and sink cost")
    parser.add_argument("--value-bytes", type=non_negative, default=0,
                        help="make each record's JSON value about this long, its customer name "
                             "lengthened (default: the orders as they are, about 106 bytes)")
    parser.add_argument("--master", default=None,
                        help="Spark master of eoskit's session (default: the benchmark's own, local[2] "
                             "or local[2,3]); e.g. the dev cluster's spark://host:port")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        type=spark_conf_pair,
                        help="one more setting of eoskit's session (repeatable), to measure a change "
                             "side by side, e.g. spark.sql.execution.arrow.maxRecordsPerBatch=50000")
    parser.add_argument("--services-dir", default=".eoskit/dev")
    parser.add_argument("--keep-topic", action="store_true", help="do not delete the topic at the end")
    parser.add_argument("--json-out", metavar="FILE",
                        help="also write each peer's figures to FILE as JSON (for benchmarks/peers.py)")
    if extend is not None:
        extend(parser)
    return parser.parse_args(argv)


def say(text: str) -> None:
    print(f"==> {text}", flush=True)


def fail(problems: list[str]) -> int:
    print("\n" + "!" * 72, file=sys.stderr)
    print("VERIFICATION FAILED: the output does not hold every order exactly once", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    print("!" * 72, file=sys.stderr)
    return 1


T = TypeVar("T")


def service_pids(services_dir: str) -> dict[str, int]:
    """The dev services' pids, for the CPU they take during each run; none
    when they cannot be read (the figure is a bonus)."""
    try:
        return LocalServices(services_dir).pids()
    except Exception:  # noqa: BLE001
        return {}


def run_benchmark(args: argparse.Namespace, target: Target) -> int:
    """Produce once, run the plain loop, the other contenders and eoskit on
    the same topic, verify every output, report; 1 if any output is wrong."""
    facts_before = machine_facts()
    master = args.master or target.spark_master
    endpoints = LocalServices(args.services_dir).up()
    bootstrap, url = endpoints.kafka_bootstrap, target.url_of(endpoints)
    topic = f"bench-orders-{uuid.uuid4().hex[:12]}"
    say(f"producing {args.records:,} orders to {topic} ({args.partitions} partitions)")
    expected, produce_s = produce(bootstrap, topic, args.records, args.partitions, args.value_bytes)
    outputs = [(target.baseline_label, BASELINE_TABLE)]
    baselines: list[tuple[str, BaselineResult]] = []
    not_run: list[tuple[str, str]] = []
    cpu: dict[str, dict[str, float]] = {}  # output -> CPU-seconds over its run (cpu_share)
    services = service_pids(args.services_dir)

    def measured(name: str, run: Callable[[], T]) -> T:
        span = Cpu(services).start()
        try:
            return run()
        finally:
            cpu[name] = span.stop()

    try:
        say(f"baseline: {target.baseline}, one process")
        target.reset_table(url, BASELINE_TABLE)
        baselines.append((target.baseline_label, measured(target.baseline_label, lambda: (
            target.run_baseline(bootstrap, url, topic, args.partitions)))))
        for contender in target.contenders:
            say(f"{contender.label}")
            target.reset_table(url, contender.table)
            try:
                baselines.append((contender.label, measured(contender.label, lambda: (
                    contender.run(bootstrap, url, topic, args.partitions)))))
                outputs.append((contender.label, contender.table))
            except Unavailable as exc:
                say(f"{contender.label}: not run: {exc}")
                not_run.append((contender.label, str(exc)))

        if args.breakdown:
            # Before the session: Spark's Python processes inherit the JVM's
            # environment, which is this process's when the JVM starts.
            os.environ[timings.ENV] = tempfile.mkdtemp(prefix="eoskit-bench-timings-")
        say("starting Spark")
        started = time.perf_counter()
        spark = spark_session(master, dict(args.spark_conf))
        spark_start_s = time.perf_counter() - started
        raw = kafka_stream(spark, bootstrap, topic, args.max_offsets_per_trigger)

        say(f"eoskit: eoskit-kafka -> {target.transform_name} -> {target.sink}, availableNow")
        target.reset_table(url, EOSKIT_TABLE)
        outputs.append(("eoskit", EOSKIT_TABLE))
        eoskit = measured("eoskit", lambda: run_stream(target.writer(url), target.transform(raw), "eoskit"))
        modes: list[tuple[str, str, StreamResult]] = []  # (mode, table, result)
        for mode in target.commit_modes:
            assert target.mode_writer is not None
            table = f"{EOSKIT_TABLE}_{mode}"
            say(f"eoskit, commitMode={mode} (the same session, after the default run)")
            target.reset_table(url, table)
            outputs.append((f"eoskit {mode}", table))
            writer = target.mode_writer(url, table, mode)
            modes.append((mode, table, measured(f"eoskit {mode}", lambda: run_stream(
                writer, target.transform(raw), f"eoskit-{mode}"))))
        breakdown: list[tuple[str, StreamResult]] = []
        if args.breakdown:
            say("breakdown: the same stream into Spark's noop sink, with and without the "
                f"{target.transform_name}")
            breakdown = run_breakdown(raw, target.transform, target.transform_name)
        spark.stop()
        if args.breakdown:
            shutil.rmtree(os.environ.pop(timings.ENV), ignore_errors=True)
    finally:
        if not args.keep_topic:
            delete_topic(bootstrap, topic)

    problems = []
    found: dict[str, list[str]] = {}  # output -> what its reader found wrong
    for name, table in outputs:
        say(f"verifying {name}'s output")
        found[name] = verify(name, target.table_stats(url, table), expected)
        problems += found[name]
        if target.drop_table is not None:
            target.drop_table(url, table)
    problems += [f"{label}: read {result.rows} rows, expected {expected.count}"
                 for label, result in breakdown if result.rows != expected.count]
    report(args, produce_s, spark_start_s, baselines, eoskit,
           [(f"eoskit {mode}", result) for mode, _, result in modes] + breakdown, facts_before,
           sink=target.sink, master=master, not_run=not_run)
    if cpu:
        print("\nCPU over each run (cpu_share.py; a peer in a process of its own: with its process's and "
              "JVM's start):")
        for name, figures in cpu.items():
            print(f"  {name}: {figures['wall_s']:.1f} s, {describe_cpu(figures)}")
    group = "kafka-" + target.sink.removeprefix("eoskit-")
    ids = {target.baseline_label: BASELINE_TABLE, **{c.label: c.table for c in target.contenders}}
    write_json_out(args.json_out, [
        *(peer_record(group, ids[label].removeprefix("bench_"), label,
                      {**baseline_figures(result), "cpu": cpu.get(label)}, found[label])
          for label, result in baselines),
        *({"peer": label, "id": ids[label].removeprefix("bench_"), "group": group, "not_run": reason}
          for label, reason in not_run),
        peer_record(group, "eoskit", f"eoskit-kafka -> {target.transform_name} -> {target.sink} "
                    "(default commitMode)", {**stream_figures(eoskit), "spark_start_s": spark_start_s,
                                             "cpu": cpu.get("eoskit")}, found["eoskit"]),
        *(peer_record(group, table.removeprefix("bench_"), f"eoskit, commitMode={mode} (same session, "
                      "after the default run)", {**stream_figures(result), "cpu": cpu.get(f"eoskit {mode}")},
                      found[f"eoskit {mode}"])
          for mode, table, result in modes),
    ])
    if problems:
        return fail(problems)
    say(f"verified: every output holds each of the {expected.count:,} orders exactly once "
        f"(sum {expected.amount})")
    return 0


SPARK_JDBC_TABLE = "bench_spark_jdbc"
SPARK_JDBC_RUNNER = Path(__file__).with_name("spark_jdbc_runner.py")
SPARK_FOREACH_BATCH_TABLE = "bench_spark_foreach_batch"
SPARK_FOREACH_BATCH_RUNNER = Path(__file__).with_name("spark_foreach_batch_runner.py")


#: The longest a peer in a process of its own may run.
PEER_TIMEOUT_S = 3600


def run_peer_process(label: str, command: list[str], env: dict[str, str] | None = None,
                     timeout: float = PEER_TIMEOUT_S) -> tuple[dict[str, Any], float]:
    """Run a peer in a process of its own (a Spark runner, Quix Streams,
    PyFlink) to its end: the one JSON line it printed last, and the
    process's wall seconds. Unavailable, naming ``label``, when it does not
    finish within ``timeout`` or fails (with the tail of its errors)."""
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{label} did not finish within {timeout / 60:.0f} minutes") from None
    wall = time.perf_counter() - started
    if done.returncode != 0 or not done.stdout.strip():
        tail = "\n    ".join(done.stderr.strip().splitlines()[-15:])
        raise Unavailable(f"{label} exited with {done.returncode}:\n    {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1]), wall


def spark_runner(label: str, runner: Path, argv: list[str], env: dict[str, str] | None = None
                 ) -> BaselineResult:
    """Run a Spark peer's runner (spark_peer.run_available_now) in a process
    (and JVM) of its own and read the JSON line it printed; Unavailable with
    the tail of its errors when it fails."""
    result, wall = run_peer_process(label, [sys.executable, str(runner), *argv],
                                    {"PYSPARK_PYTHON": sys.executable, **(env or {})})
    say(f"  Spark {result['pyspark']} {label}: {result['rows']:,} rows, query {result['run_s']:.1f} s, "
        f"first batch {result['first_batch_s'] or 0:.1f} s, later batches {result['later_batch_s'] or 0:.1f} s")
    phases = Timings({"process + JVM + session start (not in results)": wall - result["run_s"],
                      "the query, availableNow": result["run_s"]})
    return BaselineResult(result["rows"], result["run_s"], phases, result)


def spark_jdbc_contender(max_offsets: int) -> Contender:
    """What a Spark user runs today: Spark's `kafka` source and
    foreachBatch(write.jdbc), at-least-once, in a process (and JVM) of its own."""
    label = "Spark kafka + foreachBatch(write.jdbc), at-least-once"

    def run(bootstrap: str, url: str, topic: str, partitions: int) -> BaselineResult:
        return spark_runner(label, SPARK_JDBC_RUNNER, [
            "--bootstrap", bootstrap, "--topic", topic, "--table", SPARK_JDBC_TABLE,
            "--max-offsets", str(max_offsets)], env={URL_ENV: url})

    return Contender(label, SPARK_JDBC_TABLE, run)


def spark_foreach_batch_contender(max_offsets: int) -> Contender:
    """A Spark user who keeps Spark's `kafka` source and adds eoskit's sink
    through foreachBatch(PostgresSink(...).foreach_batch()): exactly-once,
    in a process (and JVM) of its own, on a plain Spark session."""
    label = "Spark kafka + eoskit foreach_batch(), exactly-once"

    def run(bootstrap: str, url: str, topic: str, partitions: int) -> BaselineResult:
        return spark_runner(label, SPARK_FOREACH_BATCH_RUNNER, [
            "--bootstrap", bootstrap, "--topic", topic, "--table", SPARK_FOREACH_BATCH_TABLE,
            "--max-offsets", str(max_offsets)], env={URL_ENV: url})

    return Contender(label, SPARK_FOREACH_BATCH_TABLE, run)


POSTGRES = Target(
    sink="eoskit-postgres",
    baseline="consumer + json.loads + COPY",
    url_of=lambda endpoints: endpoints.postgres_url,
    reset_table=reset_table,
    table_stats=table_stats,
    run_baseline=run_baseline,
    writer=postgres_writer,
    mode_writer=postgres_writer,
)


#: eoskit-postgres's commit modes besides the default (two-phase), for --commit-modes.
OTHER_COMMIT_MODES = ("idempotent", "at_least_once")


def postgres_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spark-jdbc", action="store_true",
                        help="also run Spark's own kafka source + foreachBatch(write.jdbc) (at-least-once), "
                             "in a process of its own, its jars from Maven Central")
    parser.add_argument("--foreach-batch", action="store_true",
                        help="also run Spark's own kafka source + eoskit's foreach_batch() (exactly-once), "
                             "in a process of its own")
    parser.add_argument("--commit-modes", action="store_true",
                        help=f"also run eoskit with commitMode={' and '.join(OTHER_COMMIT_MODES)}, each into "
                             "its own table, in the same session after the default (two-phase) run")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__.split("\n\n")[0], extend=postgres_options)
    contenders = POSTGRES.contenders
    if args.spark_jdbc:
        contenders += (spark_jdbc_contender(args.max_offsets_per_trigger),)
    if args.foreach_batch:
        contenders += (spark_foreach_batch_contender(args.max_offsets_per_trigger),)
    target = replace(POSTGRES, contenders=contenders,
                     commit_modes=OTHER_COMMIT_MODES if args.commit_modes else ())
    return run_benchmark(args, target)


if __name__ == "__main__":
    sys.exit(main())
