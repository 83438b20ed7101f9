"""Runtime settings a real query honours: min_pause (Flink's minimum pause
between checkpoints), measured from Spark's own progress reports."""

from __future__ import annotations

import time
from datetime import datetime

from eoskit.connectors.kafka import KafkaSource
from eoskit.connectors.spark_sinks import SparkSink
from eoskit.runtime import Pipeline

PAUSE_S = 2.0


def _seconds(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def test_min_pause_starts_each_batch_that_long_after_the_previous_one_ended(
        spark, kafka, new_topic, produce_to, numbered_records, tmp_path):
    topic = new_topic(2, "pause")
    produce_to(topic, numbered_records(2, 20))  # 40 records: 4 batches of 10
    pipeline = Pipeline(
        "min_pause", KafkaSource(kafka, {"subscribe": topic, "startingOffsets": "earliest",
                                         "maxOffsetsPerTrigger": "10"}),
        SparkSink("memory"), transform=lambda df: df.select("value"),
        checkpoint_interval="200 ms", min_pause=f"{PAUSE_S}s")
    query = pipeline.start(spark, str(tmp_path / "ck"))
    try:
        deadline = time.monotonic() + 120
        while sum(p["numInputRows"] for p in query.recentProgress) < 40:
            assert query.isActive and time.monotonic() < deadline, query.exception()
            time.sleep(0.5)
    finally:
        query.stop()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in batches] == [10, 10, 10, 10]
    for before, after in zip(batches, batches[1:]):
        ended = _seconds(before["timestamp"]) + before["durationMs"]["triggerExecution"] / 1000
        gap = _seconds(after["timestamp"]) - ended
        # Held back from the commit of the batch before (a few ms before its
        # progress report ends) to the next trigger after the pause (200 ms apart).
        assert PAUSE_S - 0.25 <= gap < PAUSE_S + 3, (before["batchId"], after["batchId"], gap)
    assert spark.sql("SELECT count(*) FROM min_pause").first()[0] == 40
