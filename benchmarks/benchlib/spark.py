"""The Spark side every benchmark shares: the session, the eoskit-kafka
stream, the orders' parse, a query run to the end of the topic
(availableNow) with its figures, and the noop runs of ``--breakdown``."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from eoskit.connectors.format_sink import FormatSink
from eoskit.connectors.kafka import KafkaSource
from eoskit.runtime.job.chain import ArrowTransform, chained_writer
from eoskit.runtime.spark.session import get_session
from eoskit.core import timings

from benchlib.progress import recording
from benchlib.results import ORDER_SCHEMA, StreamResult


def spark_session(master: str = "local[2]", extra: dict[str, str] | None = None) -> SparkSession:
    """local[2]: the machine's two cores, as a small deployment would give one job.

    No registration call: Spark 4 registers eoskit-kafka and eoskit-postgres
    from their installed pyspark_eoskit_* modules (registering again only
    logs a "replaced a statically registered data source" warning).
    """
    return get_session("bench", {
        "spark.master": master,
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        **(extra or {}),
    })


def kafka_stream(spark: SparkSession, bootstrap: str, topic: str, max_offsets: int) -> DataFrame:
    """The eoskit-kafka source over the whole topic, in batches of ``max_offsets``."""
    return (spark.readStream.format("eoskit-kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(max_offsets))
            .load())


def decoded_stream(spark: SparkSession, bootstrap: str, topic: str, max_offsets: int) -> DataFrame:
    """``kafka_stream`` with the values decoded in the source (``value.format=json``,
    issue 33): the same typed columns ``parse_orders`` gives, parsed by pyarrow
    in the source's worker instead of by ``from_json`` in the JVM."""
    return (spark.readStream.format("eoskit-kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(max_offsets))
            .option("value.format", "json")
            .option("value.timeZone", spark.conf.get("spark.sql.session.timeZone"))
            .schema(ORDER_SCHEMA)
            .load())


def parse_orders(raw: DataFrame) -> DataFrame:
    """JSON value -> typed columns, the way a Spark user would write it."""
    return raw.select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o")).select("o.*")


WriterSetup = Callable[[DataStreamWriter], DataStreamWriter]


def failed_task_attempts(spark: SparkSession) -> int | None:
    """Failed task attempts so far in this Spark application (Spark's status
    store, through py4j); None when it cannot be read."""
    try:
        jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)  # a Scala Seq
        return sum(jobs.apply(i).numFailedTasks() for i in range(jobs.length()))
    except Exception:  # noqa: BLE001 - an internal API: the count is a bonus
        return None


def run_stream(configure: WriterSetup, orders: DataFrame, name: str) -> StreamResult:
    """Run one availableNow query to its end in a fresh checkpoint and read
    its progress, every batch of it (``benchlib.progress``)."""
    return run_query(orders.sparkSession, lambda checkpoint: configure(
        orders.writeStream.option("checkpointLocation", checkpoint)), name)


def run_chained(spark: SparkSession, bootstrap: str, topic: str, max_offsets: int, sink: str,
                options: dict[str, str], name: str) -> StreamResult:
    """``run_stream`` of the chained query (issue 33, item 2): eoskit-kafka
    decoding the orders in its tasks (``value.format=json``), which write to
    ``sink`` themselves; an identity ``ArrowTransform``, as ``parse_orders``
    has nothing more to do once the values are decoded."""
    source = KafkaSource(bootstrap, {"subscribe": topic, "startingOffsets": "earliest",
                                     "maxOffsetsPerTrigger": str(max_offsets)}, value_schema=ORDER_SCHEMA)
    transform = ArrowTransform(lambda batch: batch, ORDER_SCHEMA)

    def writer_for(checkpoint: str) -> DataStreamWriter:
        writer = chained_writer(transform, source, FormatSink(sink, options), spark,
                                {**options, "checkpointLocation": checkpoint})
        if writer is None:
            raise RuntimeError(f"{name}: the query did not chain")
        return writer.option("checkpointLocation", checkpoint)

    return run_query(spark, writer_for, name)


def run_query(spark: SparkSession, writer_for: Callable[[str], DataStreamWriter], name: str) -> StreamResult:
    """``run_stream`` of the writer ``writer_for`` gives for a fresh checkpoint."""
    checkpoint = tempfile.mkdtemp(prefix=f"eoskit-bench-{name}-")
    failed_before = failed_task_attempts(spark)
    spans_dir = timings.directory()
    if spans_dir is not None:
        timings.load(spans_dir, clear=True)  # an earlier query's spans are not this one's
    try:
        with recording(spark) as log:  # every batch, not recentProgress's last 100
            started = time.perf_counter()
            query = writer_for(checkpoint).trigger(availableNow=True).start()
            query.awaitTermination()
            wall = time.perf_counter() - started
            if query.exception() is not None:
                raise RuntimeError(f"{name} query failed: {query.exception()}")
            progress = log.batches(query)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    failed_after = failed_task_attempts(spark)
    spans = timings.load(spans_dir, clear=True) if spans_dir is not None else []
    return StreamResult(
        rows=sum(p["numInputRows"] for p in progress),
        wall_s=wall,
        batches=len(progress),
        batch_rows=[p["numInputRows"] for p in progress],
        durations_ms=[p["durationMs"] for p in progress],
        failed_tasks=(None if failed_before is None or failed_after is None
                      else failed_after - failed_before),
        batch_ids=[p["batchId"] for p in progress],
        spans=spans,
    )


def noop_writer(writer: DataStreamWriter) -> DataStreamWriter:
    """Spark's noop sink: every row is produced, none is written anywhere."""
    return writer.format("noop")


def run_breakdown(raw: DataFrame, transform: Callable[[DataFrame], DataFrame] = parse_orders,
                  what: str = "parse") -> list[tuple[str, StreamResult]]:
    """The same stream without the sink, then without the transform too: the
    differences between these and the eoskit run are the sink's and the
    transform's shares. They run after the eoskit query, on warm Python workers."""
    return [
        (f"noop: source + {what}", run_stream(noop_writer, transform(raw), "noop-parsed")),
        ("noop: source only", run_stream(noop_writer, raw.select("value"), "noop-raw")),
    ]
