"""One run of Spark's own ``kafka`` source with eoskit's ``foreach_batch()``
into PostgreSQL (exactly-once), in a process of its own: what a Spark user
who keeps Spark's source and adds eoskit's sink writes. Same JSON parse as
the other runs, availableNow in batches of --max-offsets, a plain Spark
session (Spark's Kafka connector from Maven Central; eoskit imported, not
eoskit's session helper). The database URL comes from the environment
(``EOSKIT_BENCH_URL``, a SQLAlchemy URL), so its password is on no command
line. Prints one JSON line (``spark_peer.run_available_now``).

    EOSKIT_BENCH_URL=postgresql://... python benchmarks/spark_foreach_batch_runner.py \\
        --bootstrap H:P --topic T --table bench_spark_foreach_batch --max-offsets 250000
"""

from __future__ import annotations

import argparse

from spark_peer import database_url, kafka_stream, orders, run_available_now, session

from eoskit.connectors.postgres import PostgresSink


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--table"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--spark-kafka-version", default="4.2.0")
    args = parser.parse_args()
    spark = session("bench-spark-foreach-batch", args.spark_kafka_version)
    sink = PostgresSink(database_url(), args.table)
    parsed = orders(kafka_stream(spark, args.bootstrap, args.topic, args.max_offsets))
    run_available_now(spark, lambda checkpoint: (
        parsed.writeStream.foreachBatch(sink.foreach_batch()).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()), "bench-spark-foreach-batch-")
    spark.stop()


if __name__ == "__main__":
    main()
