"""One run of what a Spark user writes today for Kafka -> PostgreSQL, in a
process of its own: Spark's own `kafka` source and `foreachBatch` with
`DataFrame.write.jdbc` (at-least-once), the same JSON parse as eoskit's run,
availableNow in batches of --max-offsets. Spark's Kafka connector and
PostgreSQL's JDBC driver come from Maven Central (spark.jars.packages).
Prints one JSON line: rows, run_s, first_batch_s, later_batch_s.

    python benchmarks/spark_jdbc_runner.py --bootstrap H:P --topic T --jdbc-url jdbc:postgresql://H:P/db \
        --user U --password P --table bench_spark_jdbc --max-offsets 250000
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time

import pyspark
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

ORDER_SCHEMA = "order_id BIGINT, customer STRING, amount DECIMAL(12,2), created_at TIMESTAMP"
#: The PostgreSQL JDBC driver (Maven Central).
POSTGRES_JDBC = "org.postgresql:postgresql:42.7.4"
#: Spark's Kafka connector; the newest served for this Spark (see integration_tests/conftest.py).
SPARK_KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--jdbc-url", "--user", "--password", "--table"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--spark-kafka-version", default="4.2.0")
    args = parser.parse_args()
    packages = f"{SPARK_KAFKA.format(version=args.spark_kafka_version)},{POSTGRES_JDBC}"
    spark = (SparkSession.builder.master("local[2]").appName("bench-spark-jdbc")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.jars.packages", packages).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    properties = {"user": args.user, "password": args.password, "driver": "org.postgresql.Driver"}
    batches: list[float] = []

    def write(batch, batch_id: int) -> None:
        started = time.perf_counter()
        batch.write.jdbc(args.jdbc_url, args.table, mode="append", properties=properties)
        batches.append(time.perf_counter() - started)

    orders = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(args.max_offsets)).load()
              .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o")).select("o.*"))
    checkpoint = tempfile.mkdtemp(prefix="bench-spark-jdbc-")
    try:
        started = time.perf_counter()
        query = (orders.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        run_s = time.perf_counter() - started
        if query.exception() is not None:
            raise SystemExit(f"the query failed: {query.exception()}")
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    print(json.dumps({"rows": sum(p["numInputRows"] for p in progress), "run_s": run_s,
                      "batches": len(progress), "first_batch_s": durations[0] if durations else None,
                      "later_batch_s": (sum(durations[1:]) / len(durations[1:])) if len(durations) > 1 else None,
                      "pyspark": pyspark.__version__}))
    spark.stop()


if __name__ == "__main__":
    main()
