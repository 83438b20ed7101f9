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

from spark_peer import kafka_stream, orders, run_available_now, session


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--path"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--spark-kafka-version", default="4.2.0")
    args = parser.parse_args()

    spark = session("bench-spark-parquet", args.spark_kafka_version)  # Spark only now
    parsed = orders(kafka_stream(spark, args.bootstrap, args.topic, args.max_offsets))
    run_available_now(spark, lambda checkpoint: (
        parsed.writeStream.format("parquet").option("path", args.path)
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()), "bench-spark-parquet-")
    spark.stop()

if __name__ == "__main__":
    main()
