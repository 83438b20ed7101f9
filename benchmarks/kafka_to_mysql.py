"""Kafka -> MariaDB / MySQL throughput: a plain loop against eoskit's exactly-once query.

The sibling of kafka_to_postgres.py, and built from its parts: the same
orders topic, the same Spark stream and progress accounting, the same
report. Only the database side differs: PyMySQL for the baseline and the
verification, ``eoskit-mysql`` (XA two-phase commit) for eoskit. See
benchmarks/README.md.

    .venv/bin/python benchmarks/kafka_to_mysql.py [--records 200000] [--partitions 4]
"""

from __future__ import annotations

import json
import sys
import time
import uuid

import pymysql
from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyspark.sql.streaming import DataStreamWriter
from sqlalchemy.engine import make_url

from eoskit.connectors.mysql.connection import connect_kwargs

from benchlib.harness import Target, parse_args, run_benchmark
from benchlib.results import (
    BASELINE_TABLE,
    COLUMNS,
    CONSUME_BATCH,
    CREATED_AT,
    EOSKIT_TABLE,
    STALL_TIMEOUT_S,
    BaselineResult,
    TableStats,
    Timings,
)
from benchlib.spark import WriterSetup
from benchlib.topics import end_offsets

TABLE_DDL = ("(order_id BIGINT, customer TEXT, amount DECIMAL(12,2), created_at DATETIME(6)) "
             "ENGINE=InnoDB")
INSERT = f"INSERT INTO {BASELINE_TABLE} ({', '.join(COLUMNS)}) VALUES (%s, %s, %s, %s)"


# ----------------------------------------------------------------------- mysql

def my_connect(sqlalchemy_url: str) -> pymysql.connections.Connection:
    """PyMySQL from the SQLAlchemy URL (eoskit's own mapping), in UTC."""
    return pymysql.connect(**connect_kwargs(make_url(sqlalchemy_url)), autocommit=False,
                           init_command="SET time_zone = '+00:00'")


def reset_table(sqlalchemy_url: str, table: str) -> None:
    """Both runs start from an empty table of the same layout (no index, no key)."""
    conn = my_connect(sqlalchemy_url)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}")
            cur.execute(f"CREATE TABLE {table} {TABLE_DDL}")
    finally:
        conn.close()


def table_stats(sqlalchemy_url: str, table: str) -> TableStats:
    """An independent reading of what a run left in the table; DATETIME
    holds UTC wall-clock time, so it is read back as UTC."""
    conn = my_connect(sqlalchemy_url)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*), count(DISTINCT order_id), sum(amount), "
                        f"min(created_at), max(created_at) FROM {table}")
            row = cur.fetchone()
    finally:
        conn.close()
    count, distinct, amount, low, high = row
    utc = [None if t is None else t.replace(tzinfo=CREATED_AT.tzinfo) for t in (low, high)]
    return TableStats(count, distinct, amount, *utc)


# -------------------------------------------------------------------- baseline

def _consume_rows(consumer: Consumer, ends: dict[int, int], phases: Timings) -> list[tuple]:
    """One consume() call's records as INSERT rows; drops partitions from ``ends`` once read."""
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
            # MySQL's DATETIME takes no 'T' and no 'Z': the UTC wall-clock time.
            created = order["created_at"].replace("T", " ").rstrip("Z")
            rows.append((order["order_id"], order["customer"], order["amount"], created))
            if offset + 1 >= end:
                del ends[partition]
    return rows


def _insert_rows(conn: pymysql.connections.Connection, rows: list[tuple], phases: Timings) -> None:
    """PyMySQL's executemany turns an INSERT ... VALUES into multi-row
    statements (up to its 1 MB max_stmt_length), one commit per batch."""
    with phases.phase("mysql insert+commit"):
        with conn.cursor() as cur:
            cur.executemany(INSERT, rows)
        conn.commit()


def run_baseline(bootstrap: str, mysql_url: str, topic: str, partitions: int) -> BaselineResult:
    """The plain single-process loop, no guarantees (a crash between a commit
    and any offset bookkeeping would duplicate or lose a batch)."""
    phases = Timings()
    started = time.perf_counter()
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"eoskit-bench-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })
    rows_written = 0
    conn = my_connect(mysql_url)
    try:
        ends = {p: end for p, end in end_offsets(consumer, topic, partitions).items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        last_progress = time.monotonic()
        while ends:
            rows = _consume_rows(consumer, ends, phases)
            if rows:
                _insert_rows(conn, rows, phases)
                rows_written += len(rows)
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise TimeoutError(f"baseline: no records for {STALL_TIMEOUT_S}s; "
                                   f"partitions not finished: {ends}")
        wall = time.perf_counter() - started
    finally:
        consumer.close()
        conn.close()
    return BaselineResult(rows_written, wall, phases)


# ----------------------------------------------------------------------- spark

def mysql_writer(mysql_url: str) -> WriterSetup:
    """eoskit-mysql, default commitMode=twophase (XA); the table exists already."""

    def configure(writer: DataStreamWriter) -> DataStreamWriter:
        return (writer.format("eoskit-mysql")
                .option("url", mysql_url)
                .option("dbtable", EOSKIT_TABLE)
                .option("mode", "append")
                .option("createTable", "true"))
    return configure


# ------------------------------------------------------------------------ main

MYSQL = Target(
    sink="eoskit-mysql",
    baseline="consumer + json.loads + PyMySQL multi-row INSERT",
    url_of=lambda endpoints: endpoints.mysql_url,
    reset_table=reset_table,
    table_stats=table_stats,
    run_baseline=run_baseline,
    writer=mysql_writer,
)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__.split("\n\n")[0], records=200_000, max_offsets=50_000)
    return run_benchmark(args, MYSQL)


if __name__ == "__main__":
    sys.exit(main())
