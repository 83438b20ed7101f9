"""Kafka -> Kafka exactly once: eoskit against a hand-written transactional loop and Quix Streams.

All three read the SAME topic of JSON orders (produced once per run), apply
the same enrichment (``eoskit.runtime.devtools.demo.enrich``: amount with tax,
customer tier) and write JSON keyed by order id to a topic of their own,
exactly once. With ``--spark-kafka``, Spark's own ``kafka`` source and sink
(at-least-once, ``spark_kafka_runner.py``, a process of its own) does the
same on the same topic; with ``--flink``, PyFlink's ``KafkaSink``
EXACTLY_ONCE (``flink_peer.py``, a virtualenv of its own), and with
``--flink-sql`` the same job in Flink SQL. Every output is
read back by a plain read_committed consumer (``read_topic``) before any
rate is reported. Built from
kafka_to_postgres.py's parts (topic, Spark stream, progress accounting,
report, the whole run in ``run_benchmark``). See benchmarks/README.md.

    .venv/bin/python benchmarks/kafka_to_kafka.py [--records 1000000] \\
        [--quix-venv DIR] [--make-quix-venv] [--no-quix] [--spark-kafka] [--breakdown] \\
        [--flink] [--flink-sql] [--flink-venv DIR] [--make-flink-venv]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from flink_peer import flink_contender, flink_options, flink_sql_contender, make_flink_venv
from pyspark.sql.streaming import DataStreamWriter

from eoskit.runtime.devtools.demo import enrich
from eoskit.runtime.devtools.demo.orders import recreate_topic
from eoskit.runtime.devtools.services import LocalServices
from eoskit.runtime.devtools.services.kafka_topic import read_topic

from benchlib.harness import (
    Contender,
    Target,
    Unavailable,
    parse_args,
    run_benchmark,
    run_peer_process,
)
from benchlib.report import say
from benchlib.results import (
    BASELINE_TABLE,
    CONSUME_BATCH,
    EOSKIT_TABLE,
    STALL_TIMEOUT_S,
    BaselineResult,
    TableStats,
    Timings,
)
from benchlib.spark import WriterSetup
from benchlib.topics import delete_topic, end_offsets

#: The hand-written loop commits its transaction once this many records are in it.
COMMIT_EVERY = 10_000
QUIX_TABLE = "bench_quix"
QUIX_RUNNER = Path(__file__).with_name("quix_runner.py")
TIMEOUT_S = 60.0
#: Reading a million-record topic back through the verifier takes a while.
VERIFY_TIMEOUT_S = 900.0


# ------------------------------------------------------------------ the outputs

def topic_stats(bootstrap: str, topic: str, duplicates_allowed: bool = False) -> TableStats:
    """What a correct read_committed consumer of ``topic`` sees, counted the
    way the SQL benchmarks count a table, plus what else is wrong: open
    transactions, records whose key or enrichment is not the expected one.

    ``duplicates_allowed``: the output of an at-least-once run that had
    failed (retried) task attempts, where a retried task wrote its records
    again. A record whose order id came before is then counted apart (said,
    not returned) and must be a byte-identical copy of the first; the stats
    are those of the first copies, so every order must still be there. A
    clean run is never read this way: its output must hold exactly the
    input's records."""
    log = read_topic(bootstrap, topic, timeout=VERIFY_TIMEOUT_S)
    ids: set[int] = set()
    total = Decimal("0")
    created: set[str] = set()
    count = bad = wrong_keys = duplicates = changed = 0
    first_copy: dict[int, int] = {}  # order id -> hash of (key, value), duplicates_allowed only
    problems: list[str] = []
    for record in log.records():
        count += 1
        try:
            order = enrich.check_enriched(record.value or b"")
        except (ValueError, ArithmeticError, KeyError) as exc:
            bad += 1
            if bad <= 3:
                problems.append(f"partition {record.partition} offset {record.offset}: {exc}")
            continue
        if duplicates_allowed:
            digest = hash((record.key, record.value))
            if order.order_id in first_copy:
                duplicates += 1
                changed += first_copy[order.order_id] != digest
                continue
            first_copy[order.order_id] = digest
        if record.key != str(order.order_id).encode():
            wrong_keys += 1
        ids.add(order.order_id)
        total += order.amount
        created.add(order.created_at)
    if bad > 3:
        problems.append(f"{bad} records are not enriched orders")
    if wrong_keys:
        problems.append(f"{wrong_keys} records are not keyed by their order id")
    if changed:
        problems.append(f"{changed} duplicated records differ from their first copy")
    open_txns = len(log.open_transactions)
    if open_txns:
        problems.append(f"a transaction still open on {open_txns} partition(s) "
                        f"({sum(log.open_transactions.values())} offsets not stable)")
    times = sorted(datetime.fromisoformat(text) for text in created)
    say(f"  {topic}: {count:,} committed records, open transactions on {open_txns} partition(s)"
        + (f"; {duplicates:,} of them duplicates of an earlier record (at-least-once after "
           "failed task attempts: allowed, not counted below)" if duplicates_allowed else ""))
    count -= duplicates
    return TableStats(count, len(ids), total if count else None,
                      times[0] if times else None, times[-1] if times else None,
                      tuple(problems))


def topic_reset(partitions: int):
    def reset(bootstrap: str, topic: str) -> None:
        recreate_topic(bootstrap, topic, partitions)
    return reset


def kafka_writer(bootstrap: str) -> WriterSetup:
    """eoskit-kafka as a sink, default commitMode (exactly_once: each task's
    transaction carries its progress marker); the topic exists already."""

    def configure(writer: DataStreamWriter) -> DataStreamWriter:
        return (writer.format("eoskit-kafka")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", EOSKIT_TABLE))
    return configure


# ------------------------------------------------------- the hand-written loop

def _enrich_messages(messages: list[Message], ends: dict[int, int]) -> list[tuple[bytes, bytes]]:
    """One consume() call's records, enriched; drops partitions from ``ends`` once read."""
    out = []
    for message in messages:
        if message.error() is not None:
            raise KafkaException(message.error())
        partition, offset = message.partition(), message.offset()
        end = ends.get(partition)
        if end is None or offset >= end:
            continue
        out.append(enrich.enrich_value(message.value()))
        if offset + 1 >= end:
            del ends[partition]
    return out


def _produce(producer: Producer, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: let librdkafka send
    producer.poll(0)


def _commit(producer: Producer, consumer: Consumer) -> None:
    """The consumed positions go into the transaction, then it commits:
    output and input progress become visible together, or not at all."""
    positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), TIMEOUT_S)
    producer.commit_transaction(TIMEOUT_S)


def run_transactional_loop(bootstrap: str, url: str, topic: str, partitions: int) -> BaselineResult:
    """The canonical exactly-once consume-transform-produce loop, in one
    process: a read_committed consumer and a transactional producer; every
    COMMIT_EVERY records, the consumed offsets are sent to the transaction
    and it commits. ``url`` is the bootstrap too (the output's address)."""
    phases = Timings()
    started = time.perf_counter()
    name = f"eoskit-bench-loop-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": name,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": name})
    written = 0
    try:
        with phases.phase("init_transactions"):
            producer.init_transactions(TIMEOUT_S)
        ends = {p: end for p, end in end_offsets(consumer, topic, partitions).items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        producer.begin_transaction()
        in_transaction = 0
        last_progress = time.monotonic()
        while ends:
            with phases.phase("kafka consume"):
                messages = consumer.consume(CONSUME_BATCH, timeout=1.0)
            with phases.phase("json enrich"):
                records = _enrich_messages(messages, ends)
            with phases.phase("produce calls"):
                _produce(producer, BASELINE_TABLE, records)
            in_transaction += len(records)
            written += len(records)
            if records:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise TimeoutError(f"transactional loop: no records for {STALL_TIMEOUT_S}s; "
                                   f"partitions not finished: {ends}")
            if in_transaction >= COMMIT_EVERY or not ends:
                with phases.phase("commit (flush + offsets + commit)"):
                    _commit(producer, consumer)
                in_transaction = 0
                if ends:
                    producer.begin_transaction()
        wall = time.perf_counter() - started
    finally:
        consumer.close()
    return BaselineResult(written, wall, phases)


# ------------------------------------------------------------------ Quix Streams

def make_quix_venv(venv: Path) -> None:
    """The one command the README names: a virtualenv with Quix Streams (and
    the confluent-kafka it pins), apart from eoskit's."""
    say(f"creating {venv} with Quix Streams")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "quixstreams"], check=True)


def quix_contender(venv: Path, records: int) -> Contender:
    def run(bootstrap: str, url: str, topic: str, partitions: int) -> BaselineResult:
        python = venv / "bin" / "python"
        if not python.exists():
            raise Unavailable(f"no virtualenv at {venv}: rerun with --make-quix-venv, or "
                              f"python -m venv {venv} && {venv}/bin/pip install quixstreams")
        command = [str(python), str(QUIX_RUNNER), "--bootstrap", bootstrap, "--input", topic,
                   "--output", QUIX_TABLE, "--records", str(records),
                   "--enrich", enrich.__file__, "--commit-every", str(COMMIT_EVERY)]
        result, wall = run_peer_process("Quix Streams", command)
        say(f"  Quix Streams {result['quixstreams']}, confluent-kafka {result['confluent_kafka']}: "
            f"{result['rows']:,} records in {result['run_s']:.1f} s")
        first = result["from_first_record_s"] or result["run_s"]
        phases = Timings({"interpreter start + imports (not in results)": wall - result["run_s"],
                          "group join, before the first record": result["run_s"] - first,
                          "from the first record on": first})
        return BaselineResult(result["rows"], result["run_s"], phases, result)
    return Contender("Quix Streams exactly-once", QUIX_TABLE, run)


# ---------------------------------------------- Spark's own kafka source and sink

SPARK_KAFKA_TABLE = "bench_spark_kafka"
SPARK_KAFKA_RUNNER = Path(__file__).with_name("spark_kafka_runner.py")


def spark_kafka_contender(max_offsets: int, master: str, retried: dict[str, int]) -> Contender:
    """What a Spark user runs today: Spark's `kafka` source and `kafka` sink,
    at-least-once, the same enrichment, in a process (and JVM) of its own,
    on eoskit's master (a failed task is retried there as in eoskit's run).
    Its failed task attempts go into ``retried`` (output topic -> count): a
    run with none is clean, and its topic must hold exactly the input's
    records; a run with some may hold duplicates (see ``topic_stats``)."""

    def run(bootstrap: str, url: str, topic: str, partitions: int) -> BaselineResult:
        command = [sys.executable, str(SPARK_KAFKA_RUNNER), "--bootstrap", bootstrap,
                   "--topic", topic, "--output", SPARK_KAFKA_TABLE,
                   "--max-offsets", str(max_offsets), "--master", master]
        try:
            result, wall = run_peer_process("Spark's kafka source + kafka sink", command,
                                            {"PYSPARK_PYTHON": sys.executable})
        except Unavailable:
            delete_topic(bootstrap, SPARK_KAFKA_TABLE)  # not verified, so never dropped after
            raise
        failed = result["failed_tasks"]
        if failed:
            retried[SPARK_KAFKA_TABLE] = failed
        say(f"  Spark {result['pyspark']} kafka source + kafka sink ({result['master']}): "
            f"{result['rows']:,} rows, query {result['run_s']:.1f} s, first batch "
            f"{result['first_batch_s'] or 0:.1f} s, later batches {result['later_batch_s'] or 0:.1f} s, "
            f"{'unknown' if failed is None else failed} failed task attempts"
            + (" (clean run: its topic must hold exactly the input's records)" if failed == 0 else ""))
        phases = Timings({"process + JVM + session start (not in results)": wall - result["run_s"],
                          "the query, availableNow": result["run_s"]})
        return BaselineResult(result["rows"], result["run_s"], phases, result)

    return Contender("Spark kafka source + kafka sink, at-least-once", SPARK_KAFKA_TABLE, run)


# ------------------------------------------------- one sink task, outside Spark

#: Rows per Arrow batch that Spark hands a Python sink (spark.sql.execution.arrow.maxRecordsPerBatch).
ARROW_BATCH_ROWS = 10_000


def profile_sink_task(bootstrap: str, rows: int, tasks: int = 3) -> list[tuple[str, float]]:
    """Where one exactly-once sink task's time goes, measured on eoskit's own
    writer in this process (no Spark): ``tasks`` consecutive batches of one
    task partition, each of ``rows`` enriched orders in Arrow batches of
    ARROW_BATCH_ROWS, as Spark hands them. Every claim makes its producer
    (init_transactions), as every task attempt does."""
    import pyarrow as pa

    from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings
    from eoskit.connectors.kafka.sink_writer import KafkaMarkedWriter
    from eoskit.twophase.contract import Marker

    topic = f"bench-sink-task-{uuid.uuid4().hex[:8]}"
    recreate_topic(bootstrap, topic, 1)
    sink_id = f"prof{uuid.uuid4().hex[:8]}"
    settings = KafkaSinkSettings.parse({"kafka.bootstrap.servers": bootstrap, "topic": topic})
    pairs = [enrich.enrich_value(json.dumps({
        "order_id": i, "customer": f"customer-{i % 500}", "amount": "123.45",
        "created_at": "2026-11-21T12:00:00Z"}).encode()) for i in range(rows)]
    arrow = [pa.RecordBatch.from_pydict({"key": [k for k, _ in pairs[i:i + ARROW_BATCH_ROWS]],
                                         "value": [v for _, v in pairs[i:i + ARROW_BATCH_ROWS]]})
             for i in range(0, rows, ARROW_BATCH_ROWS)]
    timings: list[tuple[str, float]] = []
    try:
        for batch in range(tasks):
            writer = KafkaMarkedWriter(settings, Marker(sink_id, batch, 0), attempt=0)
            started = time.perf_counter()
            assert writer.claim()
            claimed = time.perf_counter()
            for record_batch in arrow:
                writer.write(record_batch)
            written = time.perf_counter()
            writer.commit()
            done = time.perf_counter()
            timings += [(f"task {batch}: claim (new producer)", claimed - started),
                        (f"task {batch}: write {rows:,} rows (produce calls)", written - claimed),
                        (f"task {batch}: commit (flush + marker + commit)", done - written)]
    finally:
        delete_topic(bootstrap, topic)
    return timings


# ------------------------------------------------------------------------ main

def kafka_target(args: argparse.Namespace) -> Target:
    # Up to three attempts per task, as a cluster retries: a task whose
    # cached producer another Python worker fenced fails once and is
    # retried (benchmarks/README.md). Spark's own pair runs on it too.
    master = "local[2,3]"
    contenders: tuple[Contender, ...] = ()
    if not args.no_quix:
        contenders += (quix_contender(Path(args.quix_venv), args.records),)
    if args.flink:
        contenders += (flink_contender(Path(args.flink_venv), args.records),)
    if args.flink_sql:
        contenders += (flink_sql_contender(Path(args.flink_venv), args.records),)
    #: Outputs of at-least-once runs that had failed task attempts (topic ->
    #: count): only these may hold duplicates.
    retried: dict[str, int] = {}
    if args.spark_kafka:
        contenders += (spark_kafka_contender(args.max_offsets_per_trigger, master, retried),)

    def stats(bootstrap: str, topic: str) -> TableStats:
        return topic_stats(bootstrap, topic, duplicates_allowed=topic in retried)

    return Target(
        sink="eoskit-kafka",
        baseline=f"consumer + json enrich + transactional producer, commit every {COMMIT_EVERY:,}",
        url_of=lambda endpoints: endpoints.kafka_bootstrap,
        reset_table=topic_reset(args.partitions),
        table_stats=stats,
        run_baseline=run_transactional_loop,
        writer=kafka_writer,
        transform=enrich.enrich_orders,
        transform_name="enrich",
        baseline_label="hand-written EOS loop",
        contenders=contenders,
        spark_master=master,
        drop_table=delete_topic,
    )


def quix_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quix-venv", default=".eoskit/quix-venv",
                        help="virtualenv with quixstreams (default .eoskit/quix-venv)")
    parser.add_argument("--make-quix-venv", action="store_true",
                        help="create --quix-venv with `pip install quixstreams` if it is missing")
    parser.add_argument("--no-quix", action="store_true", help="run eoskit and the loop only")
    parser.add_argument("--spark-kafka", action="store_true",
                        help="also run Spark's own kafka source + kafka sink (at-least-once), in a "
                             "process of its own, its jars from Maven Central")
    flink_options(parser)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__.split("\n\n")[0], extend=quix_options)
    venv = Path(args.quix_venv)
    if args.make_quix_venv and not args.no_quix and not (venv / "bin" / "python").exists():
        make_quix_venv(venv)
    if (args.flink or args.flink_sql) and args.make_flink_venv:
        make_flink_venv(Path(args.flink_venv))  # idempotent: completes a virtualenv without its jar
    status = run_benchmark(args, kafka_target(args))
    if args.breakdown:
        rows = args.max_offsets_per_trigger // args.partitions
        say(f"one sink task's time, outside Spark ({rows:,} rows per task, as in the run)")
        bootstrap = LocalServices(args.services_dir).up().kafka_bootstrap
        for label, seconds in profile_sink_task(bootstrap, rows):
            print(f"  {label:<48} {seconds * 1000:>8.0f} ms")
    return status


if __name__ == "__main__":
    sys.exit(main())
