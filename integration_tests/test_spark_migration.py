"""A Spark job written for `kafka` + JDBC moves to eoskit by its format
strings alone: the option dictionaries it carries (Spark's Kafka source
options; Spark's JDBC writer options with a jdbc: URL, user, password,
driver, batchsize, isolationLevel, queryTimeout, createTableColumnTypes,
createTableOptions, and no createTable) are taken verbatim by eoskit-kafka
and eoskit-postgres / eoskit-mysql. The table is created as Spark's JDBC
writer would create it, and every record lands once, across a restart;
read back by the servers' own catalogs and a plain client."""

from __future__ import annotations

import json
import uuid

import psycopg
import pymysql
import pytest
from pyspark.sql import functions as F
from sqlalchemy.engine import make_url

SCHEMA = "id BIGINT, amount DOUBLE, customer STRING"


def spark_kafka_options(kafka: str, topic: str) -> dict[str, str]:
    """What a Spark job hands `spark.readStream.format("kafka")`."""
    return {"kafka.bootstrap.servers": kafka, "subscribe": topic, "startingOffsets": "earliest",
            "failOnDataLoss": "true", "maxOffsetsPerTrigger": "40",
            "kafka.client.id": "orders-etl"}


def jdbc_options(url: str, subprotocol: str, driver: str, table: str, **extra: str) -> dict[str, str]:
    """What a Spark job hands `df.write.format("jdbc")`."""
    u = make_url(url)
    return {"url": f"jdbc:{subprotocol}://{u.host}:{u.port}/{u.database}", "dbtable": table,
            "user": u.username, "password": u.password or "", "driver": driver,
            "batchsize": "1000", "isolationLevel": "READ_COMMITTED", "queryTimeout": "60",
            "createTableColumnTypes": "customer VARCHAR(32), amount DECIMAL(12, 2)", **extra}


def run(spark, source_format: str, source: dict, sink_format: str, sink: dict, checkpoint) -> None:
    """The job, with only its formats as parameters."""
    df = (spark.readStream.format(source_format).options(**source).load()
          .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r")).select("r.*"))
    query = (df.writeStream.format(sink_format).options(**sink)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None


def records(start: int, count: int) -> list[dict]:
    return [{"id": i, "amount": i * 1.25, "customer": f"c{i % 7}"} for i in range(start, start + count)]


def pg_connect(url: str) -> psycopg.Connection:
    """A plain psycopg client, apart from the sink's."""
    u = make_url(url)
    return psycopg.connect(host=u.host, port=u.port, user=u.username, password=u.password,
                           dbname=u.database, autocommit=True)


@pytest.fixture
def table() -> str:
    return f"migrated_{uuid.uuid4().hex[:10]}"


def test_a_kafka_and_jdbc_job_into_postgres(spark, kafka, postgres, records_topic, produce_to, table, tmp_path):
    topic = records_topic(records(0, 100), partitions=2)
    sink = jdbc_options(postgres, "postgresql", "org.postgresql.Driver", table,
                        createTableOptions="WITH (fillfactor = 90)")
    run(spark, "eoskit-kafka", spark_kafka_options(kafka, topic), "eoskit-postgres", sink, tmp_path / "c")
    produce_to(topic, {1: [(b"k", json.dumps(r).encode()) for r in records(100, 30)]})
    run(spark, "eoskit-kafka", spark_kafka_options(kafka, topic), "eoskit-postgres", sink, tmp_path / "c")

    with pg_connect(postgres) as conn:
        rows = conn.execute(f"SELECT id, amount, customer FROM {table} ORDER BY id").fetchall()
        columns = dict(conn.execute(
            "SELECT column_name, format_type(atttypid, atttypmod) FROM information_schema.columns "
            "JOIN pg_attribute ON attrelid = %s::regclass AND attname = column_name "
            "WHERE table_name = %s", (table, table)).fetchall())
        options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass",
                               (table,)).fetchone()[0]
    assert [(r[0], float(r[1]), r[2]) for r in rows] == [
        (r["id"], r["amount"], r["customer"]) for r in records(0, 130)]
    assert columns == {"id": "bigint", "amount": "numeric(12,2)", "customer": "character varying(32)"}
    assert options == ["fillfactor=90"]


def test_a_kafka_and_jdbc_job_into_mariadb(spark, kafka, mysql, records_topic, produce_to, table, tmp_path):
    topic = records_topic(records(0, 100), partitions=2)
    sink = jdbc_options(mysql, "mariadb", "org.mariadb.jdbc.Driver", table,
                        createTableOptions="ENGINE=InnoDB COMMENT='migrated from Spark JDBC'")
    run(spark, "eoskit-kafka", spark_kafka_options(kafka, topic), "eoskit-mysql", sink, tmp_path / "c")
    produce_to(topic, {0: [(b"k", json.dumps(r).encode()) for r in records(100, 30)]})
    run(spark, "eoskit-kafka", spark_kafka_options(kafka, topic), "eoskit-mysql", sink, tmp_path / "c")

    u = make_url(mysql)
    conn = pymysql.connect(host=u.host, port=u.port, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, amount, customer FROM `{table}` ORDER BY id")
            rows = cur.fetchall()
            cur.execute("SELECT column_name, column_type FROM information_schema.columns "
                        "WHERE table_schema = DATABASE() AND table_name = %s", (table,))
            columns = {name.lower(): kind.lower() for name, kind in cur.fetchall()}
            cur.execute("SELECT engine, table_comment FROM information_schema.tables "
                        "WHERE table_schema = DATABASE() AND table_name = %s", (table,))
            engine, comment = cur.fetchone()
        cur = conn.cursor()
        cur.execute(f"DROP TABLE `{table}`")
    finally:
        conn.close()
    assert [(r[0], float(r[1]), r[2]) for r in rows] == [
        (r["id"], r["amount"], r["customer"]) for r in records(0, 130)]
    assert columns == {"id": "bigint(20)", "amount": "decimal(12,2)", "customer": "varchar(32)"}
    assert (engine, comment) == ("InnoDB", "migrated from Spark JDBC")


def test_the_same_source_options_read_by_spark_s_own_kafka_source(
        spark, spark_kafka, kafka, postgres, records_topic, table, tmp_path):
    """The source half of the switch, the other way: the dictionary eoskit-kafka
    took is the one Spark's `kafka` format takes (its connector, loaded from
    Maven Central by the shared session), here into eoskit-postgres."""
    topic = records_topic(records(0, 60), partitions=2)
    sink = jdbc_options(postgres, "postgresql", "org.postgresql.Driver", table)
    run(spark, "kafka", spark_kafka_options(kafka, topic), "eoskit-postgres", sink, tmp_path / "c")
    with pg_connect(postgres) as conn:
        rows = conn.execute(f"SELECT id FROM {table} ORDER BY id").fetchall()
    assert [r[0] for r in rows] == list(range(60))
