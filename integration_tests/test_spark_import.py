"""Carrying on from a Spark job's own checkpoint (``eoskit checkpoint import-spark``).

A real Spark ``kafka`` + ``foreachBatch(write.jdbc)`` job, in a process of
its own with Spark's Kafka connector and PostgreSQL's JDBC driver, commits
two batches and is killed with SIGKILL halfway through writing its third.
The importer writes a new checkpoint from the old one's logs; an eoskit
query (eoskit-kafka -> eoskit-postgres, upsert on the key) continues from
it. Read back with psycopg: every record exactly once, none skipped, the
first two batches left as Spark wrote them, and the re-read exactly the
batch Spark left open (counted by the Spark job itself)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import psycopg
from pyspark.sql import functions as F
from sqlalchemy.engine import make_url


PER_BATCH = 40
RECORDS = 200
SCHEMA = "id BIGINT, amount DOUBLE"

#: The Spark job, as its user wrote it: Spark's kafka source, foreachBatch
#: with write.jdbc. In batch 2 it writes half the batch, records the
#: batch's size, and is killed.
SPARK_JOB = textwrap.dedent('''
    import os, signal, sys
    from pyspark.sql import SparkSession, functions as F

    bootstrap, topic, jdbc_url, table, checkpoint, kafka_version, marker = sys.argv[1:8]
    spark = (SparkSession.builder.master("local[2]").appName("spark-job-to-import")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.jars.packages", f"org.apache.spark:spark-sql-kafka-0-10_2.13:{kafka_version},"
                     "org.postgresql:postgresql:42.7.4").getOrCreate())
    props = {"user": os.environ["PGUSER"], "password": os.environ["PGPASSWORD"],
             "driver": "org.postgresql.Driver"}
    rows = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "%d").load()
            .select(F.from_json(F.col("value").cast("string"), "%s").alias("r")).select("r.*")
            .withColumn("writer", F.lit("spark")))

    def write(batch, batch_id):
        if batch_id == 2:
            batch = batch.persist()
            with open(marker, "w") as out:
                out.write(str(batch.count()))
            batch.filter("id %% 2 = 0").write.jdbc(jdbc_url, table, mode="append", properties=props)
            os.kill(os.getpid(), signal.SIGKILL)
        batch.write.jdbc(jdbc_url, table, mode="append", properties=props)

    rows.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint) \\
        .trigger(availableNow=True).start().awaitTermination()
''' % (PER_BATCH, SCHEMA))


def pg_connect(url: str) -> psycopg.Connection:
    u = make_url(url)
    return psycopg.connect(host=u.host, port=u.port, user=u.username, password=u.password,
                           dbname=u.database, autocommit=True)


def offset_line(checkpoint: Path, batch: int) -> dict:
    """The source line of an offset-log entry, read here as Spark wrote it."""
    return json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[2])


def test_an_eoskit_query_carries_on_from_a_killed_spark_jdbc_job(
        spark, spark_kafka, kafka, postgres, records_topic, tmp_path):
    table = f"imported_{uuid.uuid4().hex[:10]}"
    topic = records_topic([{"id": i, "amount": i * 0.5} for i in range(RECORDS)], partitions=2)
    with pg_connect(postgres) as conn:  # the table the Spark job writes, with its key
        conn.execute(f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, amount DOUBLE PRECISION, writer TEXT)")
    old, new, marker = tmp_path / "spark-checkpoint", tmp_path / "eoskit-checkpoint", tmp_path / "batch2"
    (tmp_path / "job.py").write_text(SPARK_JOB)
    u = make_url(postgres)
    job = subprocess.run(
        [sys.executable, str(tmp_path / "job.py"), kafka, topic,
         f"jdbc:postgresql://{u.host}:{u.port}/{u.database}", table, str(old),
         spark_kafka, str(marker)],
        env={**os.environ, "PGUSER": u.username or "", "PGPASSWORD": u.password or ""},
        capture_output=True, text=True, timeout=600)
    assert job.returncode == -signal.SIGKILL, f"the Spark job was to be killed in batch 2:\n{job.stderr[-3000:]}"
    assert sorted(p.name for p in (old / "commits").iterdir() if p.name.isdigit()) == ["0", "1"]
    open_batch = int(marker.read_text())

    imported = subprocess.run([str(Path(sys.executable).parent / "eoskit"), "checkpoint", "import-spark",
                               str(old), str(new), "--json"], capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    said = json.loads(imported.stdout)
    assert said["batch"] == 1 and said["startOffsets"] == offset_line(old, 1)
    assert said["replayedEndOffsets"] == offset_line(old, 2)
    assert said["replayedTotal"] == open_batch == PER_BATCH

    sink = {"url": postgres, "dbtable": table, "mode": "upsert", "key": "id"}
    df = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", topic).option("maxOffsetsPerTrigger", str(PER_BATCH)).load()
          .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r")).select("r.*")
          .withColumn("writer", F.lit("eoskit")))
    query = (df.writeStream.format("eoskit-postgres").options(**sink).option("checkpointLocation", str(new))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None

    # The eoskit query's first batch is Spark's open batch 2, with its offsets.
    assert offset_line(new, 2) == offset_line(old, 2)
    with pg_connect(postgres) as conn:
        rows = conn.execute(f"SELECT id, amount, writer FROM {table} ORDER BY id").fetchall()
        spark_ids = {r[0] for r in conn.execute(f"SELECT id FROM {table} WHERE writer = 'spark'")}
    assert [(r[0], r[1]) for r in rows] == [(i, i * 0.5) for i in range(RECORDS)]  # none lost, none twice
    assert len(spark_ids) == 2 * PER_BATCH  # batches 0 and 1 as Spark wrote them, nothing before re-read
    eoskit_rows = len(rows) - len(spark_ids)
    assert eoskit_rows == RECORDS - 2 * PER_BATCH  # the open batch and the rest, by eoskit
