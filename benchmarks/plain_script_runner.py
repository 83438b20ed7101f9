"""The plain-script path (issue 33): a Spark user's own script, its format
strings switched to eoskit's, in a process of its own.

What a user who reads the README does to an existing Kafka -> PostgreSQL
script: ``SparkSession.builder`` as before (no eoskit session helper: what
``eoskit run`` and the benchmarks' own session bring, the class archive and
the warm Python helpers, it gets only from eoskit's startup hook, as any
user's script does, unless ``EOSKIT_WARM_START=0``), and ``format("kafka")`` /
``foreachBatch(write.jdbc)`` replaced by ``format("eoskit-kafka")`` and
``format("eoskit-postgres")`` (exactly-once, two-phase, the default
``commitMode``). The session's settings are the Spark peers' own
(``spark_peer.session``: ``local[2]``, two shuffle partitions, no UI) less
their jars, which eoskit needs none of; Spark 4 finds eoskit's sources and
sinks from its installed ``pyspark_eoskit_*`` modules. The same JSON parse
as every peer, availableNow in batches of --max-offsets.

Timed as the user waits: from the process's start (the interpreter, the
imports, the JVM and session, the query) to caught up (``process_s``), as
well as the query alone (``run_s``). The database URL comes from the
environment (``EOSKIT_BENCH_URL``), so its password is on no command line.
Prints one JSON line (``spark_peer.run_available_now``); the benchmark's
listener (``benchlib.progress``) is the one thing added to the user's
script, to read every batch's figures.

    EOSKIT_BENCH_URL=postgresql://... python benchmarks/plain_script_runner.py --bootstrap H:P \\
        --topic T --table bench_plain_script --max-offsets 250000
"""

from __future__ import annotations

import argparse

from spark_peer import database_url, orders, run_available_now


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--table"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    url = database_url()

    # The user's script, as it was but for the two format strings.
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(args.master).appName("bench-plain-script")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    raw = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", args.bootstrap)
           .option("subscribe", args.topic).option("startingOffsets", "earliest")
           .option("maxOffsetsPerTrigger", str(args.max_offsets)).load())
    parsed = orders(raw)
    run_available_now(spark, lambda checkpoint: (
        parsed.writeStream.format("eoskit-postgres").option("url", url).option("dbtable", args.table)
        .option("mode", "append").option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()), "bench-plain-script-", master=args.master)
    spark.stop()


if __name__ == "__main__":
    main()
