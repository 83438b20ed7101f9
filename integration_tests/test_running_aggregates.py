"""Running aggregates into a table, the way users write them:
``groupBy(...).agg(...)`` in Spark's update output mode, upserted into
PostgreSQL or MySQL through the sink's ``foreach_batch()`` entry point, on
the two-phase protocol keyed by the batch id Spark passes; a replayed batch
writes nothing."""

from __future__ import annotations

import uuid

import psycopg
import pymysql
from pyspark.sql import functions as F
from sqlalchemy.engine import make_url

from eoskit.connectors.mysql import MySQLSink
from eoskit.connectors.postgres import PostgresSink
from eoskit.runtime import Pipeline
from eoskit.runtime.state.checkpoints import Checkpoint

ORDERS = "customer string, amount long"
BATCHES = [
    [{"customer": "c1", "amount": 10}, {"customer": "c2", "amount": 5}, {"customer": "c1", "amount": 1}],
    [{"customer": "c1", "amount": 100}, {"customer": "c3", "amount": 7}],
]


def totals(orders):
    return orders.groupBy("customer").agg(F.sum("amount").alias("total"), F.count("*").alias("orders"))


def expected(batches):
    out: dict[str, tuple[int, int]] = {}
    for batch in batches:
        for row in batch:
            total, count = out.get(row["customer"], (0, 0))
            out[row["customer"]] = (total + row["amount"], count + 1)
    return sorted((c, t, n) for c, (t, n) in out.items())


def pg_rows(url: str, sql: str) -> list[tuple]:
    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, password=u.password,
                         dbname=u.database, autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


def test_update_mode_aggregates_are_upserted_into_postgres_and_a_replayed_batch_writes_nothing(
        spark, postgres, json_files, tmp_path):
    table, ck = f"totals_{uuid.uuid4().hex[:8]}", str(tmp_path / "ck")
    orders = json_files(ORDERS)
    for batch in BATCHES:
        orders.add(*batch)
    sink = PostgresSink(postgres, table, {"mode": "upsert", "key": "customer", "createTable": "true"})

    def run() -> None:
        query = (totals(orders.read_stream(spark)).writeStream.outputMode("update")
                 .foreachBatch(sink.foreach_batch())
                 .option("checkpointLocation", ck).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None

    run()
    assert pg_rows(postgres, f"SELECT customer, total, orders FROM {table} ORDER BY 1") == expected(BATCHES)
    assert pg_rows(postgres, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'eoskit:%'") == []
    (sink_info,) = Checkpoint(ck).sinks()
    assert sink_info.decided_batches == (0, 1)

    # Spark replays batch 1 when its commit-log entry is missing (a driver
    # that died after the sink committed): the decision log says it is done.
    pg_rows(postgres, f"UPDATE {table} SET total = -1 WHERE customer = 'c1'")
    for name in ("1", ".1.crc"):
        (tmp_path / "ck" / "commits" / name).unlink(missing_ok=True)
    run()
    assert Checkpoint(ck).latest_committed() == 1
    assert pg_rows(postgres, f"SELECT total FROM {table} WHERE customer = 'c1'") == [(-1,)]


def test_a_pipeline_with_update_output_mode_upserts_into_mysql(spark, mysql, json_files, tmp_path):
    table = f"totals_{uuid.uuid4().hex[:8]}"
    orders = json_files(ORDERS)
    orders.add(*BATCHES[0])
    sink = MySQLSink(mysql, table, {"mode": "upsert", "key": "customer", "createTable": "true"},
                     output_mode="update")
    pipeline = Pipeline("mysql_totals", orders, sink, transform=totals)
    pipeline.run(tmp_path / "ck", until_caught_up=True, spark=spark)
    orders.add(*BATCHES[1])
    pipeline.run(tmp_path / "ck", until_caught_up=True, spark=spark)
    u = make_url(mysql)
    conn = pymysql.connect(host=u.host, port=u.port, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT customer, total, orders FROM `{table}` ORDER BY 1")
            assert sorted(cur.fetchall()) == expected(BATCHES)
            cur.execute("XA RECOVER")
            assert [row for row in cur.fetchall() if row[3].startswith(b"eoskit:")] == []
    finally:
        conn.close()
