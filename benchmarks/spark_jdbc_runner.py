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

from spark_peer import kafka_stream, orders, run_available_now, session

#: The PostgreSQL JDBC driver (Maven Central).
POSTGRES_JDBC = "org.postgresql:postgresql:42.7.4"


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--jdbc-url", "--user", "--password", "--table"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--spark-kafka-version", default="4.2.0")
    args = parser.parse_args()
    spark = session("bench-spark-jdbc", args.spark_kafka_version, (POSTGRES_JDBC,))
    properties = {"user": args.user, "password": args.password, "driver": "org.postgresql.Driver"}

    def write(batch, batch_id: int) -> None:
        batch.write.jdbc(args.jdbc_url, args.table, mode="append", properties=properties)

    parsed = orders(kafka_stream(spark, args.bootstrap, args.topic, args.max_offsets))
    run_available_now(spark, lambda checkpoint: (
        parsed.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()), "bench-spark-jdbc-")
    spark.stop()

if __name__ == "__main__":
    main()
