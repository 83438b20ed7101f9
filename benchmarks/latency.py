"""End-to-end latency at a steady rate: produce -> visible, eoskit-postgres beside Spark's parquet sink.

Records are produced at ``--rate`` per second, each carrying the time it was
produced, into a job with a ``--trigger-seconds`` processing-time trigger.
An independent reader polls the output and notes, for every record, when it
first saw it; latency = seen - produced. Two turns in one run, each on a
fresh topic with the same source (``eoskit-kafka``) and parse:

1. ``eoskit-postgres``, two-phase (the default ``commitMode``); the reader is
   a psycopg connection of its own polling the table (rows become visible at
   ``COMMIT PREPARED``, so this is what any other client of the table sees);
2. Spark's own ``parquet`` sink; the reader polls the sink's commit log
   (``_spark_metadata``): a file is visible to Spark's readers once a log
   entry names it, and the reader then reads its rows with pyarrow.

See benchmarks/README.md ("Latency").

    .venv/bin/python benchmarks/latency.py [--rate 5000] [--seconds 40] [--warmup 20]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from eoskit.runtime.devtools.demo.orders import recreate_topic
from eoskit.runtime.devtools.services import LocalServices

from soak import SteadyProducer

from benchlib.postgres import pg_connect
from benchlib.progress import recording
from benchlib.report import fail, machine_facts, peer_record, print_table, say, write_json_out
from benchlib.spark import spark_session
from benchlib.topics import delete_topic

SCHEMA = "id BIGINT, produced_us BIGINT"
TABLE = "bench_latency"
#: How often the readers look at the output; a record's latency is known to
#: within this (it became visible at most one interval before it was seen).
POLL_S = 0.05
#: After the input stops, how long the job may take to make every record visible.
CATCH_UP_S = 120.0


class TimedProducer(SteadyProducer):
    """The soak's steady producer (id i -> partition i mod partitions, linger
    20 ms, idempotent), with the wall-clock time of each produce call in the
    record: ``{"id": i, "produced_us": ...}``."""

    def record(self, i: int) -> tuple[int, bytes, bytes]:
        value = {"id": i, "produced_us": time.time_ns() // 1000}
        return i % self.partitions, str(i).encode(), json.dumps(value).encode()


@dataclass
class Seen:
    """When each record id was first seen, and when it was produced (epoch µs)."""

    seen_us: dict[int, int] = field(default_factory=dict)
    produced_us: dict[int, int] = field(default_factory=dict)

    def add(self, rows: list[tuple[int, int]], now_us: int) -> None:
        for record_id, produced in rows:
            if record_id not in self.seen_us:
                self.seen_us[record_id] = now_us
                self.produced_us[record_id] = produced


class Poller(threading.Thread):
    """Calls ``poll`` every POLL_S until stopped; ``poll`` returns the
    (id, produced_us) rows it finds visible now (may repeat earlier ones)."""

    def __init__(self, poll: Callable[[], list[tuple[int, int]]]) -> None:
        super().__init__(name="latency-poller", daemon=True)
        self.poll, self.seen, self.errors = poll, Seen(), []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            started = time.time_ns() // 1000
            try:
                self.seen.add(self.poll(), started)
            except Exception as exc:  # noqa: BLE001 - reported, and the turn fails
                self.errors.append(repr(exc))
            self._halt.wait(POLL_S)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def postgres_poll(url: str) -> Callable[[], list[tuple[int, int]]]:
    """Rows with ids at or above the lowest id not yet seen (an index on id
    keeps each poll small): the ids are 0..n-1, so everything below is seen."""
    conn = pg_connect(url, autocommit=True)
    state = {"floor": 0, "above": set()}

    def poll() -> list[tuple[int, int]]:
        rows = conn.execute(f"SELECT id, produced_us FROM {TABLE} WHERE id >= %s",
                            (state["floor"],)).fetchall()
        above = state["above"]
        above.update(r[0] for r in rows)
        while state["floor"] in above:
            above.discard(state["floor"])
            state["floor"] += 1
        return rows
    return poll


def spark_metadata_poll(path: Path) -> Callable[[], list[tuple[int, int]]]:
    """The rows of every data file Spark's file sink has committed: each
    entry of ``_spark_metadata`` ("v1", then one JSON line per file) names a
    file readers may see; each file is read once."""
    read: set[str] = set()
    log_dir = path / "_spark_metadata"

    def poll() -> list[tuple[int, int]]:
        rows: list[tuple[int, int]] = []
        if not log_dir.is_dir():
            return rows
        for entry in sorted(log_dir.iterdir()):
            if entry.name.startswith(".") or entry.name.endswith(".tmp"):
                continue
            for line in entry.read_text().splitlines()[1:]:
                info = json.loads(line)
                if info.get("action") != "add" or info["path"] in read:
                    continue
                read.add(info["path"])
                table = pq.read_table(urlparse(info["path"]).path,
                                      columns=["id", "produced_us"])
                rows += zip(table.column("id").to_pylist(), table.column("produced_us").to_pylist())
        return rows
    return poll


@dataclass
class Turn:
    label: str
    produced: int
    measured: int  # records produced after the warm-up
    latencies_ms: list[float]
    batch_ms: list[int]  # triggerExecution of each batch with rows
    missing: int
    errors: list[str]

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_turn(spark: SparkSession, bootstrap: str, args: argparse.Namespace, label: str,
             configure: Callable[[DataStreamWriter], DataStreamWriter],
             poll: Callable[[], list[tuple[int, int]]], workdir: Path) -> Turn:
    """One sink: a fresh topic, the query started first, then the steady
    input for warm-up + measured seconds, then catch-up until every record
    is seen (or CATCH_UP_S)."""
    topic = f"bench-latency-{uuid.uuid4().hex[:12]}"
    recreate_topic(bootstrap, topic, args.partitions)
    checkpoint = tempfile.mkdtemp(prefix=f"eoskit-latency-{label}-", dir=workdir)
    raw = (spark.readStream.format("eoskit-kafka")
           .option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic)
           .option("startingOffsets", "earliest")
           .load())
    parsed: DataFrame = raw.select(
        F.from_json(F.col("value").cast("string"), SCHEMA).alias("r")).select("r.*")
    with recording(spark) as log:  # every batch, not recentProgress's last 100
        query = (configure(parsed.writeStream.option("checkpointLocation", checkpoint))
                 .trigger(processingTime=f"{args.trigger_seconds} seconds").start())
        poller = Poller(poll)
        producer = TimedProducer(bootstrap, topic, args.partitions, args.rate,
                                 workdir / f"producer-{label}.log")
        try:
            poller.start()
            producer.start()
            time.sleep(args.warmup)
            first_measured = producer.produced
            time.sleep(args.seconds)
            last_measured = producer.produced
            total = producer.finish()
            deadline = time.monotonic() + CATCH_UP_S
            while len(poller.seen.seen_us) < total and time.monotonic() < deadline:
                if query.exception() is not None:
                    break
                time.sleep(0.2)
        finally:
            poller.stop()
            query.stop()
            if not args.keep_topic:
                delete_topic(bootstrap, topic)
        errors = list(poller.errors) + producer.errors
        if query.exception() is not None:
            errors.append(f"query failed: {query.exception()}")
        seen = poller.seen
        window = range(first_measured, last_measured)
        latencies = [(seen.seen_us[i] - seen.produced_us[i]) / 1000 for i in window if i in seen.seen_us]
        progress = log.batches(query)
    return Turn(label, total, len(window), latencies,
                [p["durationMs"].get("triggerExecution", 0) for p in progress],
                missing=total - len(seen.seen_us), errors=errors)


def none_if_nan(value: float) -> float | None:
    return None if value != value else value


def report(turns: list[Turn], args: argparse.Namespace, facts: list[tuple[str, str]]) -> None:
    print_table("machine (at start)", facts)
    print_table("parameters", [
        ("rate", f"{args.rate:,} records/s"),
        ("partitions", str(args.partitions)),
        ("trigger", f"{args.trigger_seconds} s (processing time)"),
        ("warm-up (not measured) + measured", f"{args.warmup} s + {args.seconds} s"),
        ("poll interval", f"{POLL_S * 1000:.0f} ms"),
    ])
    print("\nlatency, produce -> visible to an independent reader (ms), records produced "
          "after the warm-up:")
    print(f"  {'sink':<34} {'records':>8} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} "
          f"{'batches':>8} {'median batch':>13}")
    for t in turns:
        batch = statistics.median(t.batch_ms) if t.batch_ms else float("nan")
        print(f"  {t.label:<34} {len(t.latencies_ms):>8,} {t.percentile(0.5):>7.0f} "
              f"{t.percentile(0.9):>7.0f} {t.percentile(0.99):>7.0f} "
              f"{max(t.latencies_ms, default=float('nan')):>7.0f} {len(t.batch_ms):>8} "
              f"{batch:>10.0f} ms")
    print_table("machine (at end)", machine_facts()[2:3])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=5000, help="records per second")
    parser.add_argument("--seconds", type=float, default=40, help="measured seconds of input")
    parser.add_argument("--warmup", type=float, default=20,
                        help="seconds of input first, not measured (workers start, first batches)")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--services-dir", default=".eoskit/dev")
    parser.add_argument("--keep-topic", action="store_true")
    parser.add_argument("--json-out", metavar="FILE",
                        help="also write each sink's latencies to FILE as JSON (for benchmarks/peers.py)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    facts = machine_facts()
    endpoints = LocalServices(args.services_dir).up()
    bootstrap, url = endpoints.kafka_bootstrap, endpoints.postgres_url
    workdir = Path(tempfile.mkdtemp(prefix="eoskit-latency-"))
    with pg_connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        conn.execute(f"CREATE TABLE {TABLE} (id bigint, produced_us bigint)")
        conn.execute(f"CREATE INDEX ON {TABLE} (id)")
    say("starting Spark")
    spark = spark_session()
    turns = []
    try:
        say(f"eoskit-postgres (two-phase): {args.rate:,} records/s, "
            f"{args.warmup:g} s warm-up + {args.seconds:g} s")

        def eoskit(writer: DataStreamWriter) -> DataStreamWriter:
            return (writer.format("eoskit-postgres").option("url", url)
                    .option("dbtable", TABLE).option("mode", "append"))
        turns.append(run_turn(spark, bootstrap, args, "eoskit-postgres (two-phase)", eoskit,
                              postgres_poll(url), workdir))
        out = workdir / "parquet-out"
        say("Spark's parquet sink, same source and rate")

        def parquet(writer: DataStreamWriter) -> DataStreamWriter:
            return writer.format("parquet").option("path", str(out))
        turns.append(run_turn(spark, bootstrap, args, "Spark parquet (_spark_metadata)", parquet,
                              spark_metadata_poll(out), workdir))
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report(turns, args, facts)
    problems = [f"{t.label}: {e}" for t in turns for e in t.errors]
    with pg_connect(url, autocommit=True) as conn:
        rows, ids = conn.execute(f"SELECT count(*), count(DISTINCT id) FROM {TABLE}").fetchone()
    if rows != ids or rows != turns[0].produced:
        problems.append(f"{TABLE}: {rows} rows, {ids} distinct ids, expected "
                        f"{turns[0].produced} once each")
    problems += [f"{t.label}: {t.missing} of {t.produced} records never became visible "
                 f"within {CATCH_UP_S:.0f} s of the input's end" for t in turns if t.missing]
    # Each turn's share: its own lines, and the table's line for eoskit's turn.
    found = {t.label: [p for p in problems if p.startswith(f"{t.label}: ")
                       or (t is turns[0] and p.startswith(f"{TABLE}: "))] for t in turns}
    write_json_out(args.json_out, [peer_record("latency", peer_id, t.label, {
        "records": len(t.latencies_ms), "produced": t.produced, "missing": t.missing,
        **{f"p{round(q * 100)}_ms": none_if_nan(t.percentile(q)) for q in (0.5, 0.9, 0.99)},
        "max_ms": max(t.latencies_ms, default=None), "batches": len(t.batch_ms),
        "median_batch_ms": statistics.median(t.batch_ms) if t.batch_ms else None,
        "rate": args.rate, "trigger_s": args.trigger_seconds}, found[t.label])
        for peer_id, t in zip(("eoskit_postgres", "spark_parquet"), turns)])
    if problems:
        return fail(problems)
    return 0


if __name__ == "__main__":
    sys.exit(main())
