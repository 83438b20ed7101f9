"""One run of what a Spark user writes today for Kafka -> Kafka, in a process
of its own: Spark's own `kafka` source and `kafka` sink (at-least-once: a
retried task writes its records again), the same enrichment as eoskit's run
(``eoskit.runtime.devtools.demo.enrich.enrich_orders``: Spark columns only, so the
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

from spark_peer import kafka_stream, run_available_now, session


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--output"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--master", default="local[2]",
                        help="local[2,3] lets a failed task be retried, as eoskit's Kafka run does")
    parser.add_argument("--spark-kafka-version", default="4.2.0")
    args = parser.parse_args()

    # eoskit's module imports PySpark inside enrich_orders: importing this file starts nothing.
    from eoskit.runtime.devtools.demo.enrich import enrich_orders

    spark = session("bench-spark-kafka", args.spark_kafka_version, master=args.master)
    # key: the order id, value: the enriched order as JSON
    enriched = enrich_orders(kafka_stream(spark, args.bootstrap, args.topic, args.max_offsets))
    run_available_now(spark, lambda checkpoint: (
        enriched.writeStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()), "bench-spark-kafka-", master=args.master)
    spark.stop()

if __name__ == "__main__":
    main()
