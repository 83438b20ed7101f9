"""One run of what a Spark user writes today for Kafka -> Parquet files, in a
process of its own: Spark's own `kafka` source and Spark's built-in `parquet`
file sink (``writeStream.format("parquet")``: exactly-once for readers of
its ``_spark_metadata`` log), the same JSON parse as kafka_to_parquet.py's
runs, availableNow in batches of --max-offsets, into --path. Spark's Kafka
connector comes from Maven Central (spark.jars.packages). Prints one JSON
line: rows, run_s, first_batch_s, later_batch_s.

    python benchmarks/spark_parquet_runner.py --bootstrap H:P --topic T --path DIR --max-offsets 250000
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time

ORDER_SCHEMA = "order_id BIGINT, customer STRING, amount DECIMAL(12,2), created_at TIMESTAMP"
#: Spark's Kafka connector; the newest served for this Spark (see integration_tests/conftest.py).
SPARK_KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"


def failed_task_attempts(spark) -> int | None:
    """Failed task attempts so far in this Spark application (Spark's status
    store, through py4j, as kafka_to_postgres.py reads it); None when it
    cannot be read."""
    try:
        jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)  # a Scala Seq
        return sum(jobs.apply(i).numFailedTasks() for i in range(jobs.length()))
    except Exception:  # noqa: BLE001 - an internal API: the count is a bonus
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--path"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--spark-kafka-version", default="4.2.0")
    args = parser.parse_args()

    # Spark only once the run starts: importing this file starts nothing.
    import pyspark
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master("local[2]").appName("bench-spark-parquet")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.jars.packages", SPARK_KAFKA.format(version=args.spark_kafka_version))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    orders = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(args.max_offsets)).load()
              .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o")).select("o.*"))
    checkpoint = tempfile.mkdtemp(prefix="bench-spark-parquet-")
    failed_before = failed_task_attempts(spark)
    try:
        started = time.perf_counter()
        query = (orders.writeStream.format("parquet").option("path", args.path)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        run_s = time.perf_counter() - started
        if query.exception() is not None:
            raise SystemExit(f"the query failed: {query.exception()}")
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    failed_after = failed_task_attempts(spark)
    print(json.dumps({"rows": sum(p["numInputRows"] for p in progress), "run_s": run_s,
                      "batches": len(progress), "first_batch_s": durations[0] if durations else None,
                      "later_batch_s": (sum(durations[1:]) / len(durations[1:])) if len(durations) > 1 else None,
                      "batch_rows": [p["numInputRows"] for p in progress], "batch_s": durations,
                      "failed_tasks": (None if failed_before is None or failed_after is None
                                       else failed_after - failed_before),
                      "pyspark": pyspark.__version__}))
    spark.stop()


if __name__ == "__main__":
    main()
