"""What the Spark peers of the benchmarks share (``spark_jdbc_runner.py``,
``spark_kafka_runner.py``, ``spark_parquet_runner.py``): a local session
with Spark's Kafka connector from Maven Central, Spark's own ``kafka``
source read in batches of ``maxOffsetsPerTrigger``, and one availableNow
run timed from its progress, printed as the one JSON line the benchmarks
read. Imports Spark only when called."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

ORDER_SCHEMA = "order_id BIGINT, customer STRING, amount DECIMAL(12,2), created_at TIMESTAMP"
#: Spark's Kafka connector; the newest served for this Spark (see integration_tests/conftest.py).
SPARK_KAFKA = "org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
#: The database a runner writes to, a SQLAlchemy URL: passed in the
#: environment, so that its password is on no command line.
URL_ENV = "EOSKIT_BENCH_URL"


def database_url() -> str:
    url = os.environ.get(URL_ENV)
    if not url:
        raise SystemExit(f"{URL_ENV} is not set: the database URL to write to")
    return url


def session(app: str, kafka_version: str, extra_packages: tuple[str, ...] = (), master: str = "local[2]"):
    from pyspark.sql import SparkSession

    packages = ",".join([SPARK_KAFKA.format(version=kafka_version), *extra_packages])
    spark = (SparkSession.builder.master(master).appName(app)
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.jars.packages", packages).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def kafka_stream(spark, bootstrap: str, topic: str, max_offsets: int):
    """Spark's own ``kafka`` source from the earliest offsets, ``max_offsets`` a batch."""
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(max_offsets)).load())


def orders(raw):
    """The JSON orders of eoskit's runs, parsed as theirs are."""
    from pyspark.sql import functions as F

    return raw.select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o")).select("o.*")


def failed_task_attempts(spark) -> int | None:
    """Failed task attempts so far in this Spark application (Spark's status
    store, through py4j, as kafka_to_postgres.py reads it); None when it
    cannot be read."""
    try:
        jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)  # a Scala Seq
        return sum(jobs.apply(i).numFailedTasks() for i in range(jobs.length()))
    except Exception:  # noqa: BLE001 - an internal API: the count is a bonus
        return None


def since_process_start(now: float) -> float:
    """Seconds from this process's start (its creation, as the kernel
    records it: the interpreter's start and every import included) to
    ``now`` (``time.time()``)."""
    import psutil

    return now - psutil.Process().create_time()


def run_available_now(spark, start: Callable[[str], Any], prefix: str, **extra: Any) -> None:
    """Start the query (``start(checkpoint)``: its writer, availableNow), wait
    for it, and print its figures as one JSON line: rows, run_s (start() to
    the query's end), process_s (the process's start to the query's end:
    the interpreter, imports, JVM and session too), batches, first_batch_s,
    later_batch_s, batch_rows, batch_s (every batch: ``benchlib.progress``),
    failed_tasks, pyspark and ``extra``. A failed query exits naming its
    exception."""
    import pyspark

    from benchlib.progress import recording

    checkpoint = tempfile.mkdtemp(prefix=prefix)
    failed_before = failed_task_attempts(spark)
    try:
        with recording(spark) as log:  # every batch, not recentProgress's last 100
            started = time.perf_counter()
            query = start(checkpoint)
            query.awaitTermination()
            run_s = time.perf_counter() - started
            caught_up = time.time()
            if query.exception() is not None:
                raise SystemExit(f"the query failed: {query.exception()}")
            progress = log.batches(query)
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    failed_after = failed_task_attempts(spark)
    print(json.dumps({"rows": sum(p["numInputRows"] for p in progress), "run_s": run_s,
                      "process_s": since_process_start(caught_up),
                      "batches": len(progress), "first_batch_s": durations[0] if durations else None,
                      "later_batch_s": (sum(durations[1:]) / len(durations[1:])) if len(durations) > 1 else None,
                      "batch_rows": [p["numInputRows"] for p in progress], "batch_s": durations,
                      "failed_tasks": (None if failed_before is None or failed_after is None
                                       else failed_after - failed_before),
                      "pyspark": pyspark.__version__, **extra}))
