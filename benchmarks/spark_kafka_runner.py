"""One run of what a Spark user writes today for Kafka -> Kafka, in a process
of its own: Spark's own `kafka` source and `kafka` sink (at-least-once: a
retried task writes its records again), the same enrichment as eoskit's run
(``eoskit.runtime.demo.enrich.enrich_orders``: Spark columns only, so the
whole query runs in the JVM), availableNow in batches of --max-offsets, into
an output topic that exists already. Spark's Kafka connector comes from Maven
Central (spark.jars.packages). Prints one JSON line: rows, run_s,
first_batch_s, later_batch_s, and the failed (retried) task attempts, which
say whether the run was clean.

    python benchmarks/spark_kafka_runner.py --bootstrap H:P --topic T --output bench_spark_kafka \
        --max-offsets 250000 [--master local[2,3]]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time

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
    for name in ("--bootstrap", "--topic", "--output"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--master", default="local[2]",
                        help="local[2,3] lets a failed task be retried, as eoskit's Kafka run does")
    parser.add_argument("--spark-kafka-version", default="4.2.0")
    args = parser.parse_args()

    # Spark (and eoskit's module, which imports PySpark inside enrich_orders)
    # only once the run starts: importing this file starts nothing.
    import pyspark
    from pyspark.sql import SparkSession

    from eoskit.runtime.demo.enrich import enrich_orders

    spark = (SparkSession.builder.master(args.master).appName("bench-spark-kafka")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.jars.packages", SPARK_KAFKA.format(version=args.spark_kafka_version))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
           .option("subscribe", args.topic).option("startingOffsets", "earliest")
           .option("maxOffsetsPerTrigger", str(args.max_offsets)).load())
    enriched = enrich_orders(raw)  # key: the order id, value: the enriched order as JSON
    checkpoint = tempfile.mkdtemp(prefix="bench-spark-kafka-")
    failed_before = failed_task_attempts(spark)
    try:
        started = time.perf_counter()
        query = (enriched.writeStream.format("kafka")
                 .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.output)
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
                      "master": args.master, "pyspark": pyspark.__version__}))
    spark.stop()


if __name__ == "__main__":
    main()
