"""One run of what a Spark user writes today for Kafka -> PostgreSQL, in a
process of its own: Spark's own `kafka` source and `foreachBatch` with
`DataFrame.write.jdbc` (at-least-once), the same JSON parse as eoskit's run,
availableNow in batches of --max-offsets. Spark's Kafka connector and
PostgreSQL's JDBC driver come from Maven Central (spark.jars.packages).
The database comes from the environment (``EOSKIT_BENCH_URL``, a SQLAlchemy
URL, made into the JDBC URL, user and password here), so its password is on
no command line. Prints one JSON line (``spark_peer.run_available_now``).

Two ways, each its own line in the benchmark (issue 33):

- Spark's defaults (no tuning option): ``batchsize`` 1,000, one INSERT per
  row sent in JDBC batches, one connection per partition of the batch;
- tuned as a user who cares about speed tunes it: ``--batchsize 10000``,
  ``--rewrite-batched-inserts`` (the driver's ``reWriteBatchedInserts=true``
  in the JDBC URL: each JDBC batch sent as multi-row INSERTs) and
  ``--num-partitions N`` (Spark's ``numPartitions``: at most N connections
  write at once, the batch coalesced to N partitions when it has more).

    EOSKIT_BENCH_URL=postgresql://... python benchmarks/spark_jdbc_runner.py --bootstrap H:P \\
        --topic T --table bench_spark_jdbc --max-offsets 250000 \\
        [--batchsize 10000 --rewrite-batched-inserts --num-partitions 4]
"""

from __future__ import annotations

import argparse

from spark_peer import database_url, kafka_stream, orders, run_available_now, session
from sqlalchemy.engine import URL, make_url

#: The PostgreSQL JDBC driver (Maven Central).
POSTGRES_JDBC = "org.postgresql:postgresql:42.7.4"


def jdbc_target(url: URL, batchsize: int | None = None, rewrite_batched_inserts: bool = False,
                num_partitions: int | None = None) -> tuple[str, dict[str, str]]:
    """The JDBC URL and the properties ``DataFrame.write.jdbc`` is given
    (Spark takes its JDBC options, ``batchsize`` and ``numPartitions``, from
    the properties too); an option not given is left to Spark's default."""
    jdbc_url = f"jdbc:postgresql://{url.host}:{url.port}/{url.database}"
    if rewrite_batched_inserts:
        jdbc_url += "?reWriteBatchedInserts=true"
    properties = {"user": url.username or "", "password": url.password or "",
                  "driver": "org.postgresql.Driver"}
    if batchsize is not None:
        properties["batchsize"] = str(batchsize)
    if num_partitions is not None:
        properties["numPartitions"] = str(num_partitions)
    return jdbc_url, properties


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--table"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--spark-kafka-version", default="4.2.0")
    parser.add_argument("--batchsize", type=int, default=None,
                        help="Spark's JDBC batchsize: rows per JDBC batch (Spark's default 1000)")
    parser.add_argument("--rewrite-batched-inserts", action="store_true",
                        help="reWriteBatchedInserts=true in the JDBC URL (PostgreSQL's driver)")
    parser.add_argument("--num-partitions", type=int, default=None,
                        help="Spark's JDBC numPartitions: at most this many connections write at once")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    jdbc_url, properties = jdbc_target(make_url(database_url()), args.batchsize,
                                       args.rewrite_batched_inserts, args.num_partitions)
    spark = session("bench-spark-jdbc", args.spark_kafka_version, (POSTGRES_JDBC,))

    def write(batch, batch_id: int) -> None:
        batch.write.jdbc(jdbc_url, args.table, mode="append", properties=properties)

    parsed = orders(kafka_stream(spark, args.bootstrap, args.topic, args.max_offsets))
    run_available_now(spark, lambda checkpoint: (
        parsed.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()), "bench-spark-jdbc-",
        jdbc={key: value for key, value in properties.items() if key in ("batchsize", "numPartitions")}
        | {"reWriteBatchedInserts": args.rewrite_batched_inserts})
    spark.stop()


if __name__ == "__main__":
    main()
