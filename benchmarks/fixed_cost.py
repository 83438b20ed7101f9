"""The fixed cost of a micro-batch: eoskit's source and sink beside Spark's own.

Small batches (1,000 rows by default), back to back, in one Spark session,
so that what each query pays per batch, whatever its size, is what is
measured:

1. ``rate-micro-batch -> noop`` and ``rate-micro-batch -> parquet``: Spark's
   own source and sinks, all in the JVM: what Spark itself costs per batch;
2. ``eoskit-kafka -> noop``: eoskit's source (Python workers reading Kafka);
3. ``eoskit-kafka -> from_json -> eoskit-postgres`` (two-phase, the default):
   source, parse, and the exactly-once sink with its decision log;
4. for reference, a Python streaming source that makes its rows in memory
   (``FloorReader``: no broker, nothing of eoskit's) into ``noop``: what
   PySpark itself charges any Python source per batch (a Python worker per
   task, Arrow both ways).

The eoskit -> PostgreSQL query runs first in a session whose JVM a short
rate -> noop query has warmed, so its first batch is a job's first batch:
Python workers, the sink's planning and commit processes and its checks all
start there. Its first batch against the median of its later ones is the
first-batch figure. See benchmarks/README.md, "The fixed cost of a
micro-batch".

    .venv/bin/python benchmarks/fixed_cost.py [--batches 20] [--rows 1000] [--breakdown]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from eoskit.runtime.devtools.services import LocalServices
from eoskit.core import timings

from benchlib.postgres import reset_table, table_stats, verify
from benchlib.progress import recording
from benchlib.report import (
    fail,
    machine_facts,
    peer_record,
    print_phases,
    print_table,
    say,
    write_json_out,
)
from benchlib.results import EOSKIT_TABLE, StreamResult
from benchlib.spark import parse_orders, spark_session
from benchlib.topics import delete_topic, produce


class FloorReader(DataSourceStreamReader):
    """PySpark's own floor for a Python streaming source: each trigger has a
    batch of ``rows`` integers, made in memory by one task per partition
    (no broker, no client, nothing of eoskit's)."""

    def __init__(self, rows: int, partitions: int) -> None:
        self.rows, self.tasks, self.next = rows, partitions, 0

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self) -> dict:
        self.next += 1
        return {"batch": self.next}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(self.rows // self.tasks) for _ in range(self.tasks)]

    def read(self, partition: InputPartition):
        yield pa.RecordBatch.from_arrays([pa.array(range(partition.value), pa.int64())], ["v"])


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "eoskit-bench-python-floor"

    def schema(self) -> str:
        return "v bigint"

    def streamReader(self, schema) -> FloorReader:
        return FloorReader(int(self.options["rows"]), int(self.options["partitions"]))


#: How often a query's batches so far are counted (from its listener's
#: reports), until it has run as many as asked.
POLL_S = 0.2


@dataclass(frozen=True)
class Contest:
    """eoskit's query against Spark's, and the most eoskit's median may be."""

    ours: str
    theirs: str
    target: float


#: Not a contest: what any Python streaming source costs per batch, in the same run.
FLOOR = "a Python source made in memory -> noop"
CONTESTS = (
    Contest("eoskit-kafka -> noop", "rate-micro-batch -> noop", 1.3),
    Contest("eoskit-kafka -> from_json -> eoskit-postgres", "rate-micro-batch -> parquet", 1.5),
)
#: The first batch may cost this much more than a later one of its size.
FIRST_BATCH_EXTRA_MS = 3000.0
#: Each query's id in --json-out.
IDS = {CONTESTS[1].ours: "eoskit_postgres", CONTESTS[0].ours: "eoskit_noop", FLOOR: "python_floor",
       CONTESTS[0].theirs: "rate_noop", CONTESTS[1].theirs: "rate_parquet"}


def run_batches(df: DataFrame, configure: Callable, name: str, batches: int,
                available_now: bool) -> StreamResult:
    """Run ``df`` into the sink ``configure`` sets up until ``batches`` batches
    with rows are done; a fresh checkpoint each time."""
    checkpoint = tempfile.mkdtemp(prefix=f"eoskit-fixed-{name}-")
    spans_dir = timings.directory()
    if spans_dir is not None:
        timings.load(spans_dir, clear=True)
    try:
        with recording(df.sparkSession) as log:  # every batch, not recentProgress's last 100
            started = time.perf_counter()
            writer = configure(df.writeStream.option("checkpointLocation", checkpoint))
            if available_now:
                query = writer.trigger(availableNow=True).start()
                query.awaitTermination()
            else:
                query = writer.start()
                while query.isActive and log.count_with_rows(str(query.runId)) < batches:
                    time.sleep(POLL_S)
                # Stopping interrupts the batch in flight, which Spark logs as
                # errors at length; those batches are not measured.
                df.sparkSession.sparkContext.setLogLevel("OFF")
                query.stop()
                df.sparkSession.sparkContext.setLogLevel("WARN")
            wall = time.perf_counter() - started
            if query.exception() is not None:
                raise RuntimeError(f"{name} query failed: {query.exception()}")
            progress = log.batches(query)[:batches]
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    spans = timings.load(spans_dir, clear=True) if spans_dir is not None else []
    return StreamResult(
        rows=sum(p["numInputRows"] for p in progress), wall_s=wall, batches=len(progress),
        batch_rows=[p["numInputRows"] for p in progress],
        durations_ms=[p["durationMs"] for p in progress], failed_tasks=None,
        batch_ids=[p["batchId"] for p in progress], spans=spans)


def rate_source(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    """Spark's own source of exactly ``rows`` rows per micro-batch, whatever the time."""
    return (spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", str(rows)).option("numPartitions", str(partitions)).load())


def kafka_source(spark: SparkSession, bootstrap: str, topic: str, rows: int) -> DataFrame:
    return (spark.readStream.format("eoskit-kafka")
            .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(rows))
            .load())


def noop(writer):
    return writer.format("noop")


def parquet(path: str):
    return lambda writer: writer.format("parquet").option("path", path)


def postgres(url: str):
    return lambda writer: (writer.format("eoskit-postgres").option("url", url)
                           .option("dbtable", EOSKIT_TABLE).option("mode", "append"))


def later(result: StreamResult) -> list[float]:
    return [float(d["triggerExecution"]) for d in result.durations_ms[1:]]


def summary_rows(results: dict[str, StreamResult]) -> list[tuple[str, str]]:
    rows = []
    for label, result in results.items():
        rest = later(result)
        rows.append((label, f"first {result.durations_ms[0]['triggerExecution']:>6,} ms   "
                            f"median later {statistics.median(rest):>6,.0f} ms   "
                            f"p90 later {sorted(rest)[int(0.9 * (len(rest) - 1))]:>6,.0f} ms   "
                            f"({result.batches} batches, {result.rows:,} rows)"))
    return rows


def verdicts(results: dict[str, StreamResult]) -> list[tuple[str, str]]:
    rows = []
    for contest in CONTESTS:
        ours, theirs = (statistics.median(later(results[k])) for k in (contest.ours, contest.theirs))
        ratio = ours / theirs
        rows.append((f"{contest.ours} / {contest.theirs}",
                     f"{ratio:.2f}x (target <= {contest.target}x: "
                     f"{'met' if ratio <= contest.target else 'NOT met'})"))
    floor = statistics.median(later(results[FLOOR])) / statistics.median(
        later(results[CONTESTS[0].theirs]))
    rows.append((f"{FLOOR} / {CONTESTS[0].theirs}",
                 f"{floor:.2f}x (PySpark's own cost of a Python source's tasks, for reference)"))
    first = results[CONTESTS[1].ours]
    extra = first.durations_ms[0]["triggerExecution"] - statistics.median(later(first))
    rows.append(("first batch - median later (eoskit -> postgres)",
                 f"{extra:,.0f} ms (target <= {FIRST_BATCH_EXTRA_MS:,.0f} ms: "
                 f"{'met' if extra <= FIRST_BATCH_EXTRA_MS else 'NOT met'})"))
    return rows


def write_records(json_out: str | None, results: dict[str, StreamResult], found: list[str],
                  counts: dict[str, list[str]]) -> None:
    """Each query's record for ``--json-out`` (benchmarks/peers.py)."""
    # Only eoskit-postgres's output is read back; the others are checked for their batch count.
    write_json_out(json_out, [peer_record(
        "fixed-cost", IDS[label], label,
        {"rows": r.rows, "wall_s": r.wall_s, "batches": r.batches,
         "first_batch_s": r.durations_ms[0]["triggerExecution"] / 1000 if r.durations_ms else None,
         "later_batch_s": statistics.median(later(r)) / 1000 if r.batches > 1 else None,
         "batch_s": [d["triggerExecution"] / 1000 for d in r.durations_ms]},
        found + counts[label] if label == CONTESTS[1].ours else (counts[label] or None))
        for label, r in results.items()])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=20, help="batches measured per query (20)")
    parser.add_argument("--rows", type=int, default=1000, help="rows per batch (1,000)")
    parser.add_argument("--partitions", type=int, default=2,
                        help="Kafka partitions, and the rate source's numPartitions (2: "
                             "one task per core of local[2])")
    parser.add_argument("--breakdown", action="store_true",
                        help="record eoskit's own phases per batch and print them beside Spark's")
    parser.add_argument("--services-dir", default=".eoskit/dev")
    parser.add_argument("--json-out", metavar="FILE",
                        help="also write each query's figures to FILE as JSON (for benchmarks/peers.py)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    facts_before = machine_facts()
    endpoints = LocalServices(args.services_dir).up()
    bootstrap, url = endpoints.kafka_bootstrap, endpoints.postgres_url
    records = args.batches * args.rows
    topics = [f"bench-fixed-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    say(f"producing {records:,} orders to each of 2 topics ({args.partitions} partitions)")
    expected, _ = produce(bootstrap, topics[0], records, args.partitions)
    produce(bootstrap, topics[1], records, args.partitions)
    out = tempfile.mkdtemp(prefix="eoskit-fixed-parquet-")
    if args.breakdown:
        os.environ[timings.ENV] = tempfile.mkdtemp(prefix="eoskit-fixed-timings-")
    results: dict[str, StreamResult] = {}
    try:
        say("starting Spark (local[2])")
        spark = spark_session()
        spark.dataSource.register(FloorSource)
        say("warming the JVM: rate-micro-batch -> noop, 5 batches (not reported)")
        run_batches(rate_source(spark, args.rows, args.partitions), noop, "warmup", 5, False)
        reset_table(url, EOSKIT_TABLE)
        runs = [
            (CONTESTS[1].ours, lambda: run_batches(
                parse_orders(kafka_source(spark, bootstrap, topics[0], args.rows)),
                postgres(url), "postgres", args.batches, True)),
            (CONTESTS[0].ours, lambda: run_batches(
                kafka_source(spark, bootstrap, topics[1], args.rows), noop, "kafka-noop",
                args.batches, True)),
            (FLOOR, lambda: run_batches(
                spark.readStream.format(FloorSource.name()).option("rows", str(args.rows))
                .option("partitions", str(args.partitions)).load(), noop, "floor",
                args.batches, False)),
            (CONTESTS[0].theirs, lambda: run_batches(
                rate_source(spark, args.rows, args.partitions), noop, "rate-noop",
                args.batches, False)),
            (CONTESTS[1].theirs, lambda: run_batches(
                rate_source(spark, args.rows, args.partitions), parquet(out), "rate-parquet",
                args.batches, False)),
        ]
        for label, run in runs:
            say(label)
            results[label] = run()
        spark.stop()
    finally:
        for topic in topics:
            delete_topic(bootstrap, topic)
        shutil.rmtree(out, ignore_errors=True)
        if args.breakdown:
            shutil.rmtree(os.environ.pop(timings.ENV), ignore_errors=True)

    found = verify("eoskit-postgres", table_stats(url, EOSKIT_TABLE), expected)
    counts = {label: [f"{label}: {r.batches} batches with rows, expected {args.batches}"]
              if r.batches != args.batches else [] for label, r in results.items()}
    problems = found + [p for label in results for p in counts[label]]
    print_table("machine (at start)", facts_before)
    print_table("parameters", [("batches", str(args.batches)), ("rows per batch", f"{args.rows:,}"),
                               ("partitions", str(args.partitions)), ("spark master", "local[2]")])
    print_table("per batch (Spark's triggerExecution)", summary_rows(results))
    for label, result in results.items():
        if result.spans or args.breakdown:
            print_phases(label, result)
    print_table("against the targets (medians of the later batches)", verdicts(results))
    print_table("machine (at end)", machine_facts()[2:3])
    write_records(args.json_out, results, found, counts)
    if problems:
        return fail(problems)
    return 0


if __name__ == "__main__":
    sys.exit(main())
