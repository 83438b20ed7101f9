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
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import psycopg
from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyspark.sql.streaming import DataStreamWriter
from spark_peer import URL_ENV

from benchlib.harness import Contender, Target, parse_args, run_benchmark, spark_runner
from benchlib.postgres import pg_connect, reset_table, table_stats
from benchlib.results import (
    BASELINE_TABLE,
    COLUMNS,
    CONSUME_BATCH,
    EOSKIT_TABLE,
    STALL_TIMEOUT_S,
    BaselineResult,
    Timings,
)
from benchlib.spark import WriterSetup
from benchlib.topics import end_offsets


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


SPARK_JDBC_TABLE = "bench_spark_jdbc"
SPARK_JDBC_TUNED_TABLE = "bench_spark_jdbc_tuned"
SPARK_JDBC_RUNNER = Path(__file__).with_name("spark_jdbc_runner.py")
SPARK_FOREACH_BATCH_TABLE = "bench_spark_foreach_batch"
SPARK_FOREACH_BATCH_RUNNER = Path(__file__).with_name("spark_foreach_batch_runner.py")
PLAIN_SCRIPT_TABLE = "bench_plain_script"
PLAIN_SCRIPT_COLD_TABLE = "bench_plain_script_cold"
#: What a user's shell does not have and this benchmark's own eoskit session
#: sets in its environment (``get_session``), removed for the plain script.
USER_UNSET = ("PYSPARK_PYTHON", "EOSKIT_CHOSEN_PYSPARK_PYTHON", "EOSKIT_PREFORK")
PLAIN_SCRIPT_RUNNER = Path(__file__).with_name("plain_script_runner.py")
#: Spark's JDBC writer as a user who cares about speed sets it (issue 33):
#: rows per JDBC batch, and the driver's multi-row INSERTs.
TUNED_BATCHSIZE = 10_000


def spark_jdbc_argv(bootstrap: str, topic: str, max_offsets: int, partitions: int, tuned: bool) -> list[str]:
    """spark_jdbc_runner.py's options: Spark's defaults, or tuned (batchsize
    TUNED_BATCHSIZE, reWriteBatchedInserts, numPartitions the topic's partition count)."""
    argv = ["--bootstrap", bootstrap, "--topic", topic, "--max-offsets", str(max_offsets),
            "--table", SPARK_JDBC_TUNED_TABLE if tuned else SPARK_JDBC_TABLE]
    if tuned:
        argv += ["--batchsize", str(TUNED_BATCHSIZE), "--rewrite-batched-inserts",
                 "--num-partitions", str(partitions)]
    return argv


def spark_jdbc_contender(max_offsets: int, tuned: bool = False) -> Contender:
    """What a Spark user runs today: Spark's `kafka` source and
    foreachBatch(write.jdbc), at-least-once, in a process (and JVM) of its
    own; with Spark's JDBC defaults, or ``tuned`` (see spark_jdbc_argv)."""
    label = ("Spark kafka + foreachBatch(write.jdbc), tuned (batchsize 10000, reWriteBatchedInserts, "
             "numPartitions = partitions), at-least-once" if tuned else
             "Spark kafka + foreachBatch(write.jdbc), Spark's defaults, at-least-once")

    def run(bootstrap: str, url: str, topic: str, partitions: int) -> BaselineResult:
        return spark_runner(label, SPARK_JDBC_RUNNER, spark_jdbc_argv(
            bootstrap, topic, max_offsets, partitions, tuned), env={URL_ENV: url})

    return Contender(label, SPARK_JDBC_TUNED_TABLE if tuned else SPARK_JDBC_TABLE, run)


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


def plain_script_contender(max_offsets: int, warm: bool = True) -> Contender:
    """The plain-script path: a user's own SparkSession.builder script with
    eoskit-kafka -> eoskit-postgres (exactly-once), in a process of its
    own, timed from the process's start to caught up (plain_script_runner.py).

    Its environment is a user's: no ``PYSPARK_PYTHON`` nor any eoskit
    setting this benchmark's own session left in its environment, so the
    startup hook gives it the warm start (issue 33, item 6); or, not
    ``warm``, with ``EOSKIT_WARM_START=0`` and the venv's ``bin`` first on
    ``PATH``, as an activated venv has it (Spark's helpers then run
    ``python3`` from PATH): the cold path every plain script took before."""
    label = ("plain script: SparkSession.builder, eoskit-kafka -> eoskit-postgres, from process start"
             + ("" if warm else ", EOSKIT_WARM_START=0"))
    table = PLAIN_SCRIPT_TABLE if warm else PLAIN_SCRIPT_COLD_TABLE
    env: dict[str, str | None] = {name: None for name in USER_UNSET}
    if not warm:
        env |= {"EOSKIT_WARM_START": "0",
                "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}

    def run(bootstrap: str, url: str, topic: str, partitions: int) -> BaselineResult:
        return spark_runner(label, PLAIN_SCRIPT_RUNNER, [
            "--bootstrap", bootstrap, "--topic", topic, "--table", table,
            "--max-offsets", str(max_offsets)], env={**env, URL_ENV: url}, from_process_start=True)

    return Contender(label, table, run)


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


def chained_postgres_options(postgres_url: str, table: str) -> dict[str, str]:
    """``postgres_writer``'s options (two-phase), for the chained line."""
    return {"url": postgres_url, "dbtable": table, "mode": "append", "createTable": "true"}


#: eoskit-postgres's commit modes besides the default (two-phase), for --commit-modes.
OTHER_COMMIT_MODES = ("idempotent", "at_least_once")


def postgres_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spark-jdbc", action="store_true",
                        help="also run Spark's own kafka source + foreachBatch(write.jdbc) (at-least-once), "
                             "in a process of its own, its jars from Maven Central: twice, with Spark's "
                             f"JDBC defaults and tuned (batchsize {TUNED_BATCHSIZE}, reWriteBatchedInserts, "
                             "numPartitions the topic's partitions), each its own line")
    parser.add_argument("--plain-script", action="store_true",
                        help="also run a user's own SparkSession.builder script with eoskit-kafka -> "
                             "eoskit-postgres, in a process of its own, timed from its start to caught up: "
                             "twice, with the startup hook's warm start and with EOSKIT_WARM_START=0")
    parser.add_argument("--foreach-batch", action="store_true",
                        help="also run Spark's own kafka source + eoskit's foreach_batch() (exactly-once), "
                             "in a process of its own")
    parser.add_argument("--decoded", action="store_true",
                        help="also run eoskit with the values decoded in the source (value.format=json, "
                             "no from_json in the JVM), into its own table, in the same session after the "
                             "default run (issue 33, item 1)")
    parser.add_argument("--chained", action="store_true",
                        help="also run eoskit chained (issue 33, item 2: decoded, transformed and written in "
                             "the source's tasks, the rows never in the JVM), into its own table, in the same "
                             "session after the default run")
    parser.add_argument("--commit-modes", action="store_true",
                        help=f"also run eoskit with commitMode={' and '.join(OTHER_COMMIT_MODES)}, each into "
                             "its own table, in the same session after the default (two-phase) run")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__.split("\n\n")[0], extend=postgres_options)
    contenders = POSTGRES.contenders
    if args.spark_jdbc:
        contenders += (spark_jdbc_contender(args.max_offsets_per_trigger),
                       spark_jdbc_contender(args.max_offsets_per_trigger, tuned=True))
    if args.foreach_batch:
        contenders += (spark_foreach_batch_contender(args.max_offsets_per_trigger),)
    if args.plain_script:
        contenders += (plain_script_contender(args.max_offsets_per_trigger),
                       plain_script_contender(args.max_offsets_per_trigger, warm=False))
    target = replace(POSTGRES, contenders=contenders,
                     commit_modes=OTHER_COMMIT_MODES if args.commit_modes else (), decoded_line=args.decoded,
                     chained_options=chained_postgres_options if args.chained else None)
    return run_benchmark(args, target)


if __name__ == "__main__":
    sys.exit(main())
