"""Kafka -> Parquet throughput: eoskit's exactly-once files sink against Spark's own parquet sink.

Both read the SAME topic (produced once per run) through the same source
and parse, in the same Spark session, into Parquet files on the same disk:
the only difference is the sink, ``format("parquet")`` (Spark's file sink,
exactly-once for readers of its ``_spark_metadata`` log) against
``format("eoskit-parquet")`` (every reader). A small warm-up topic goes
through both sinks first (not counted: the session's first query pays for
the JVM's compilation and the Python workers' start, whichever sink it
uses); then they run in the order Spark, eoskit, eoskit, Spark, so that
each takes one turn right after the other, and the totals over both turns
are compared (``--rounds N`` repeats the four turns, to average out noise).
With ``--spark-parquet``, what a Spark user writes today runs first on the
same topic, in a process (and JVM) of its own: Spark's own ``kafka`` source
and ``parquet`` sink (``spark_parquet_runner.py``); its directory is read
back with pyarrow as every turn's is, and its figures are printed beside
eoskit-parquet's. See benchmarks/README.md.

    .venv/bin/python benchmarks/kafka_to_parquet.py [--records 1000000] [--partitions 4] [--rounds 1] \\
        [--spark-parquet]
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
from dataclasses import dataclass
from datetime import timezone
from decimal import Decimal
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql.streaming import DataStreamWriter

from eoskit.runtime.devtools.demo.orders import OrderTotals
from eoskit.runtime.devtools.services import LocalServices

from benchlib.harness import Unavailable, parse_args, run_peer_process
from benchlib.report import (
    fail,
    machine_facts,
    peer_record,
    per_s,
    print_stream,
    print_table,
    rate,
    runner_figures,
    say,
    stream_rows,
    write_json_out,
)
from benchlib.results import CREATED_AT, StreamResult
from benchlib.spark import (
    WriterSetup,
    kafka_stream,
    parse_orders,
    run_breakdown,
    run_stream,
    spark_session,
)
from benchlib.topics import delete_topic, produce

SINKS = ("spark parquet", "eoskit-parquet")
ORDER = (0, 1, 1, 0)
WARM_UP_RECORDS = 20_000
SPARK_PARQUET_RUNNER = Path(__file__).with_name("spark_parquet_runner.py")
SPARK_PARQUET_LABEL = "Spark kafka + parquet, own process"


def spark_parquet(path: str) -> WriterSetup:
    """Spark's built-in file sink, its defaults (snappy)."""

    def configure(writer: DataStreamWriter) -> DataStreamWriter:
        return writer.format("parquet").option("path", path)
    return configure


def eoskit_parquet(path: str) -> WriterSetup:
    """eoskit's files sink, its defaults (snappy, commitMode=twophase)."""

    def configure(writer: DataStreamWriter) -> DataStreamWriter:
        return writer.format("eoskit-parquet").option("path", path)
    return configure


@dataclass
class DirectoryStats:
    files: int
    bytes: int
    count: int
    distinct_ids: int
    amount: Decimal
    created: tuple


def directory_stats(path: str) -> DirectoryStats:
    """An independent reading of a run's directory: pyarrow.dataset lists it
    as DuckDB, pandas or Trino would (``_``-prefixed names skipped, Spark's
    ``_spark_metadata`` log not consulted)."""
    dataset = ds.dataset(path, format="parquet")
    table = dataset.to_table(columns=["order_id", "amount", "created_at"])
    created = table.column("created_at")
    if created.type.tz is None:  # Spark's INT96 reads back naive, in UTC
        created = pc.assume_timezone(created, "UTC")
    low, high = pc.min_max(created).values()
    return DirectoryStats(
        files=len(dataset.files), bytes=sum(os.path.getsize(f) for f in dataset.files),
        count=table.num_rows, distinct_ids=pc.count_distinct(table.column("order_id")).as_py(),
        amount=pc.sum(table.column("amount")).as_py(),
        created=(low.as_py().astimezone(timezone.utc), high.as_py().astimezone(timezone.utc)))


def verify(name: str, stats: DirectoryStats, expected: OrderTotals) -> list[str]:
    problems = []
    if stats.count != expected.count or stats.distinct_ids != expected.count:
        problems.append(f"{name}: {stats.count} rows, {stats.distinct_ids} distinct order_ids, "
                        f"expected {expected.count} of each")
    if stats.amount != expected.amount:
        problems.append(f"{name}: sum(amount) = {stats.amount}, expected {expected.amount}")
    if stats.created != (CREATED_AT, CREATED_AT):
        problems.append(f"{name}: created_at spans {stats.created}, expected {CREATED_AT} only")
    return problems


def run_spark_parquet(bootstrap: str, topic: str, path: str, max_offsets: int) -> dict:
    """What a Spark user runs today: Spark's `kafka` source and `parquet`
    sink, in a process (and JVM) of its own, into ``path``; its JSON line,
    with ``wall_s`` (the process's whole life) added."""
    command = [sys.executable, str(SPARK_PARQUET_RUNNER), "--bootstrap", bootstrap, "--topic", topic,
               "--path", path, "--max-offsets", str(max_offsets)]
    result, wall = run_peer_process("Spark's kafka source + parquet sink", command,
                                    {"PYSPARK_PYTHON": sys.executable})
    failed = result["failed_tasks"]
    say(f"  Spark {result['pyspark']} kafka source + parquet sink: {result['rows']:,} rows, "
        f"query {result['run_s']:.1f} s, first batch {result['first_batch_s'] or 0:.1f} s, later "
        f"batches {result['later_batch_s'] or 0:.1f} s, "
        f"{'unknown' if failed is None else failed} failed task attempts")
    return {**result, "wall_s": wall}


def print_spark_parquet(peer: dict, runs: list[tuple[int, str, StreamResult]]) -> None:
    """The peer beside eoskit-parquet's turns: whole run (the peer's query
    against eoskit's turns' wall) and steady state (every batch but the
    first, on both sides)."""
    print(f"\n{SPARK_PARQUET_LABEL} phases: process + JVM + session start (not in results) "
          f"{peer['wall_s'] - peer['run_s']:.1f} s, the query, availableNow {peer['run_s']:.1f} s")
    ours = [r for s, _, r in runs if s == 1]
    rows = [
        (f"{SPARK_PARQUET_LABEL} (query)", peer["rows"], peer["run_s"]),
        (f"{SPARK_PARQUET_LABEL} (all but batch 1)", sum(peer["batch_rows"][1:]), sum(peer["batch_s"][1:])),
        (f"eoskit-parquet, {len(ours)} turns (wall)", sum(r.rows for r in ours), sum(r.wall_s for r in ours)),
        (f"eoskit-parquet, {len(ours)} turns (all but batch 1)",
         sum(r.batch_rows_from(1) for r in ours), sum(r.batch_seconds(1) for r in ours)),
    ]
    width = max(len(label) for label, _, _ in rows)
    print(f"\n  {'run':<{width}} {'rows':>10} {'seconds':>8} {'rows/s':>9}")
    for label, count, seconds in rows:
        print(f"  {label:<{width}} {count:>10,} {seconds:>8.1f} {rate(count, seconds):>9,.0f}")
    rates = [rate(count, seconds) for _, count, seconds in rows]
    whole, steady = (mine / theirs if theirs else float("nan")
                     for mine, theirs in ((rates[2], rates[0]), (rates[3], rates[1])))
    print(f"  eoskit-parquet / {SPARK_PARQUET_LABEL}: whole run {whole:.2f}x, steady (all but batch 1) "
          f"{steady:.2f}x (eoskit's turns follow the warm-up; the peer's query is its JVM's first)")


def turns_figures(turns: list[StreamResult]) -> dict:
    """One sink's turns as one peer: rows and wall summed over the turns (as
    the total printed), steady over every turn's batches but its first, the
    median of the turns' first batches and of all their later batches."""
    rows, wall = sum(r.rows for r in turns), sum(r.wall_s for r in turns)
    seconds = [[d.get("triggerExecution", 0) / 1000 for d in r.durations_ms] for r in turns]
    first = [turn[0] for turn in seconds if turn]
    later = [s for turn in seconds for s in turn[1:]]
    return {"rows": rows, "wall_s": wall, "rows_per_s": per_s(rows, wall), "turns": len(turns),
            "steady_rows_per_s": per_s(sum(r.batch_rows_from(1) for r in turns),
                                       sum(r.batch_seconds(1) for r in turns)),
            "first_batch_s": statistics.median(first) if first else None,
            "later_batch_s": statistics.median(later) if later else None,
            "batch_rows": [r.batch_rows for r in turns], "batch_s": seconds}


def parquet_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the four turns (Spark, eoskit, eoskit, Spark) this many times")
    parser.add_argument("--spark-parquet", action="store_true",
                        help="also run Spark's own kafka source + parquet sink, in a process of its "
                             "own, its jars from Maven Central")


def print_report(args: argparse.Namespace, facts_before: list[tuple[str, str]], order: tuple[int, ...],
                 produce_s: float, spark_start_s: float, runs: list[tuple[int, str, StreamResult]],
                 breakdown: list[tuple[str, StreamResult]], peer: dict | None,
                 peer_not_run: str | None) -> None:
    """The turns' tables, Spark parquet against eoskit-parquet, and the peer's."""
    rounds = args.rounds
    print_table("machine (at start)", facts_before)
    print_table("parameters", [
        ("records", f"{args.records:,}"), ("partitions", str(args.partitions)),
        ("maxOffsetsPerTrigger", f"{args.max_offsets_per_trigger:,}"), ("spark master", "local[2]"),
        ("turns", ", ".join(SINKS[s] for s in order) + f" (after a {WARM_UP_RECORDS:,}-record warm-up)"),
        ("peer", "not asked (--spark-parquet)" if not args.spark_parquet
         else f"{SPARK_PARQUET_LABEL}, before the turns"),
        ("produce (not timed in results)", f"{produce_s:.1f} s"),
        ("Spark session start (not in results)", f"{spark_start_s:.1f} s"),
    ])
    for turn, (sink, _, result) in enumerate(runs):
        print_stream(f"turn {turn + 1}: {SINKS[sink]}", result)
    for label, result in breakdown:
        print_stream(label, result)
    print(f"\n  {'run':<36} {'rows':>10} {'seconds':>8} {'rows/s':>9}")
    for turn, (sink, _, result) in enumerate(runs):
        for label, seconds in (("wall", result.wall_s), ("batches only", result.batch_seconds())):
            name = f"turn {turn + 1} {SINKS[sink]} ({label})"
            print(f"  {name:<36} {result.rows:>10,} {seconds:>8.1f} {rate(result.rows, seconds):>9,.0f}")
    for label, result in breakdown:
        for name, count, seconds in stream_rows(label, result)[:2]:
            print(f"  {name:<36} {count:>10,} {seconds:>8.1f} {rate(count, seconds):>9,.0f}")
    totals = [sum(r.wall_s for s, _, r in runs if s == sink) for sink in (0, 1)]
    rows = [sum(r.rows for s, _, r in runs if s == sink) for sink in (0, 1)]
    print(f"\n  total wall, {2 * rounds} turns each: Spark parquet {totals[0]:.1f} s "
          f"({rate(rows[0], totals[0]):,.0f} rows/s), eoskit-parquet {totals[1]:.1f} s "
          f"({rate(rows[1], totals[1]):,.0f} rows/s)")
    print(f"  eoskit-parquet / Spark parquet throughput: {totals[0] / totals[1]:.2f} x")
    if peer is not None:
        print_spark_parquet(peer, runs)
    if peer_not_run is not None:
        print(f"\n{SPARK_PARQUET_LABEL}: NOT RUN: {peer_not_run}")
    print_table("machine (at end)", machine_facts()[2:3])


def write_records(args: argparse.Namespace, runs: list[tuple[int, str, StreamResult]], peer: dict | None,
                  peer_not_run: str | None, found: dict[str, list[str]]) -> None:
    """The peers' records for ``--json-out`` (benchmarks/peers.py)."""
    group = "kafka-files"
    records = [peer_record(group, "spark_parquet_process", SPARK_PARQUET_LABEL,
                           runner_figures(peer),
                           found[SPARK_PARQUET_LABEL])] if peer is not None else []
    if peer_not_run is not None:
        records.append({"peer": SPARK_PARQUET_LABEL, "id": "spark_parquet_process", "group": group,
                        "not_run": peer_not_run})
    for sink, (peer_id, label) in enumerate((
            ("spark_parquet_turns", "eoskit-kafka -> Spark parquet, in-session turns"),
            ("eoskit_parquet", "eoskit-kafka -> eoskit-parquet (twophase), in-session turns"))):
        records.append(peer_record(group, peer_id, label,
                                   turns_figures([r for s, _, r in runs if s == sink]), found[SINKS[sink]]))
    write_json_out(args.json_out, records)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__.split("\n\n")[0], extend=parquet_options)
    rounds = args.rounds
    order = ORDER * rounds
    facts_before = machine_facts()
    bootstrap = LocalServices(args.services_dir).up().kafka_bootstrap
    topic = f"bench-orders-{uuid.uuid4().hex[:12]}"
    warm_up = f"{topic}-warm-up"
    say(f"producing {args.records:,} orders to {topic} ({args.partitions} partitions)")
    expected, produce_s = produce(bootstrap, topic, args.records, args.partitions)
    produce(bootstrap, warm_up, WARM_UP_RECORDS, args.partitions)
    workdir = tempfile.mkdtemp(prefix="eoskit-bench-parquet-")
    runs: list[tuple[int, str, StreamResult]] = []
    problems: list[str] = []
    breakdown: list[tuple[str, StreamResult]] = []
    peer: dict | None = None
    peer_not_run: str | None = None
    found: dict[str, list[str]] = {SPARK_PARQUET_LABEL: [], **{name: [] for name in SINKS}}
    try:
        if args.spark_parquet:
            # Before this process's Spark starts: the two JVMs never share the cores.
            out = f"{workdir}/spark-kafka-parquet"
            say(f"{SPARK_PARQUET_LABEL}: kafka -> from_json -> parquet, availableNow")
            try:
                peer = run_spark_parquet(bootstrap, topic, out, args.max_offsets_per_trigger)
            except Unavailable as exc:
                say(f"{SPARK_PARQUET_LABEL}: not run: {exc}")
                peer_not_run = str(exc)
            else:
                stats = directory_stats(out)
                found[SPARK_PARQUET_LABEL] = verify(SPARK_PARQUET_LABEL, stats, expected)
                problems += found[SPARK_PARQUET_LABEL]
                say(f"  {stats.files} files, {stats.bytes / 1e6:.1f} MB, {stats.count:,} rows")
            shutil.rmtree(out, ignore_errors=True)
        say("starting Spark")
        started = time.perf_counter()
        spark = spark_session()
        spark_start_s = time.perf_counter() - started
        say(f"warm-up: {WARM_UP_RECORDS:,} records into each sink (not counted)")
        warm = kafka_stream(spark, bootstrap, warm_up, WARM_UP_RECORDS // 2)
        for sink, setup in enumerate((spark_parquet, eoskit_parquet)):
            run_stream(setup(f"{workdir}/warm-up-{sink}"), parse_orders(warm), f"warm-up-{sink}")
        raw = kafka_stream(spark, bootstrap, topic, args.max_offsets_per_trigger)
        for turn, sink in enumerate(order):
            out = f"{workdir}/{turn}"
            say(f"turn {turn + 1}: eoskit-kafka -> from_json -> {SINKS[sink]}, availableNow")
            setup = (spark_parquet if sink == 0 else eoskit_parquet)(out)
            runs.append((sink, out, run_stream(setup, parse_orders(raw), f"{sink}-{turn}")))
            stats = directory_stats(out)
            turn_problems = verify(f"turn {turn + 1} ({SINKS[sink]})", stats, expected)
            found[SINKS[sink]] += turn_problems
            problems += turn_problems
            say(f"  {stats.files} files, {stats.bytes / 1e6:.1f} MB, {stats.count:,} rows")
            shutil.rmtree(out, ignore_errors=True)
        if args.breakdown:
            say("breakdown: the same stream into Spark's noop sink, with and without the parse")
            breakdown = run_breakdown(raw)
        spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        delete_topic(bootstrap, warm_up)
        if not args.keep_topic:
            delete_topic(bootstrap, topic)

    print_report(args, facts_before, order, produce_s, spark_start_s, runs, breakdown, peer, peer_not_run)
    write_records(args, runs, peer, peer_not_run, found)
    if problems:
        return fail(problems)
    checked = "every turn's directory" + (" and the peer's" if peer is not None else "")
    say(f"verified: {checked} holds each of the {expected.count:,} orders exactly once "
        f"(sum {expected.amount}), read by pyarrow.dataset")
    return 0


if __name__ == "__main__":
    sys.exit(main())
