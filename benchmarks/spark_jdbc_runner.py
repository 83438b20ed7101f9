"""One run of what a Spark user writes today for Kafka -> PostgreSQL, in a
process of its own: Spark's own `kafka` source and `foreachBatch` with
`DataFrame.write.jdbc` (at-least-once), the same JSON parse as eoskit's run,
availableNow in batches of --max-offsets. Spark's Kafka connector and
PostgreSQL's JDBC driver come from Maven Central (spark.jars.packages).
The database comes from the environment (``EOSKIT_BENCH_URL``, a SQLAlchemy
URL, made into the JDBC URL, user and password here), so its password is on
no command line. Prints one JSON line: rows, run_s, first_batch_s,
later_batch_s.

    EOSKIT_BENCH_URL=postgresql://... python benchmarks/spark_jdbc_runner.py --bootstrap H:P \
        --topic T --table bench_spark_jdbc --max-offsets 250000
"""

from __future__ import annotations

import argparse

from spark_peer import database_url, kafka_stream, orders, run_available_now, session
from sqlalchemy.engine import make_url

#: The PostgreSQL JDBC driver (Maven Central).
POSTGRES_JDBC = "org.postgresql:postgresql:42.7.4"


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--table"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--spark-kafka-version", default="4.2.0")
    args = parser.parse_args()
    url = make_url(database_url())
    jdbc_url = f"jdbc:postgresql://{url.host}:{url.port}/{url.database}"
    spark = session("bench-spark-jdbc", args.spark_kafka_version, (POSTGRES_JDBC,))
    properties = {"user": url.username or "", "password": url.password or "",
                  "driver": "org.postgresql.Driver"}

    def write(batch, batch_id: int) -> None:
        batch.write.jdbc(jdbc_url, args.table, mode="append", properties=properties)

    parsed = orders(kafka_stream(spark, args.bootstrap, args.topic, args.max_offsets))
    run_available_now(spark, lambda checkpoint: (
        parsed.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()), "bench-spark-jdbc-")
    spark.stop()

if __name__ == "__main__":
    main()
