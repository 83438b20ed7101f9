"""The eoskit-kafka sink against the real broker: Spark's Kafka sink columns
and options, exactly-once output read by a plain read_committed consumer
(``eoskit.runtime.devtools.services.kafka_topic``), and bad input refused
with the column, topic or partition named."""

from __future__ import annotations

import json
import uuid

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from eoskit.runtime.devtools.services.kafka_topic import read_topic

#: Also run on Apache Kafka 3.9 (the kafka3 tier, conftest.py).
pytestmark = pytest.mark.kafka_versions

def run_to_kafka(spark, kafka, source_topic, transform, options, tmp_path, name=None):
    checkpoint = tmp_path / (name or f"ck-{uuid.uuid4().hex[:6]}")
    df = (spark.readStream.format("eoskit-kafka")
          .option("kafka.bootstrap.servers", kafka).option("subscribe", source_topic)
          .option("startingOffsets", "earliest").load())
    query = (transform(df).writeStream.format("eoskit-kafka")
             .option("kafka.bootstrap.servers", kafka).options(**options)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    return checkpoint


def failure(spark, kafka, source_topic, transform, options, tmp_path) -> str:
    with pytest.raises(StreamingQueryException) as err:
        run_to_kafka(spark, kafka, source_topic, transform, options, tmp_path)
    return str(err.value)


@pytest.fixture
def source(new_topic, produce_to, numbered_records):
    topic = new_topic(3, "ksrc")
    produce_to(topic, numbered_records(3, 400))
    return topic


def test_copies_key_value_and_headers_exactly_once(spark, kafka, source, new_topic, tmp_path):
    out = new_topic(2, "kout")
    run_to_kafka(spark, kafka, source,
                 lambda df: df.select("key", F.concat(F.lit("v="), F.col("value").cast("string")).alias("value"),
                                      F.array(F.struct(F.lit("h").alias("key"),
                                                       F.col("key").alias("value"))).alias("headers")),
                 {"topic": out, "includeHeaders": "true"}, tmp_path)
    log = read_topic(kafka, out)
    records = log.records()
    assert sorted(int(r.value.decode()[2:]) for r in records) == list(range(1200))
    assert all(r.headers == (("h", r.key),) for r in records)
    assert log.open_transactions == {}


def test_rows_choose_topic_and_partition_and_the_marker_topic_is_needed(
        spark, kafka, source, new_topic, tmp_path):
    even, odd = new_topic(2, "keven"), new_topic(3, "kodd")

    def route(df):
        n = F.col("value").cast("string").cast("int")
        return df.select(F.col("value"), F.when(n % 2 == 0, F.lit(even)).otherwise(F.lit(odd)).alias("topic"),
                         (n % 2).cast("int").alias("partition"))

    error = failure(spark, kafka, source, route, {}, tmp_path)
    assert "markerTopic" in error
    run_to_kafka(spark, kafka, source, route, {"markerTopic": even}, tmp_path)
    evens = read_topic(kafka, even).committed
    odds = read_topic(kafka, odd).committed
    assert sorted(int(r.value) for r in evens[0]) == list(range(0, 1200, 2)) and not evens[1]
    assert sorted(int(r.value) for r in odds[1]) == list(range(1, 1200, 2))
    assert not odds[0] and not odds[2]


def test_a_rerun_of_a_committed_checkpoint_writes_nothing_more(spark, kafka, source, new_topic, tmp_path):
    out = new_topic(2, "kout")
    options = {"topic": out, "sinkId": f"rr{uuid.uuid4().hex[:8]}"}
    checkpoint = run_to_kafka(spark, kafka, source, lambda df: df.select("value"), options,
                              tmp_path, "ck")
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # Spark forgets the commit: it replays the batch
        (commits / name).unlink(missing_ok=True)
    run_to_kafka(spark, kafka, source, lambda df: df.select("value"), options, tmp_path, "ck")
    assert sorted(int(r.value) for r in read_topic(kafka, out).records()) == list(range(1200))


def test_a_deleted_checkpoint_with_the_same_sink_id_is_refused(spark, kafka, source, new_topic, tmp_path):
    out = new_topic(1, "kout")
    options = {"topic": out, "sinkId": f"del{uuid.uuid4().hex[:8]}"}
    run_to_kafka(spark, kafka, source, lambda df: df.select("value"), options, tmp_path, "ck1")
    error = failure(spark, kafka, source, lambda df: df.select("value"), options, tmp_path)
    assert "already committed batch" in error and "new 'sinkId'" in error
    assert len(read_topic(kafka, out).records()) == 1200


@pytest.mark.parametrize("transform, options, expected", [
    (lambda df: df.select(F.col("key")), {"topic": "x"}, "no 'value' column"),
    (lambda df: df.select("value"), {}, "needs a topic"),
    (lambda df: df.select("value", F.lit(1).cast("long").alias("partition")), {"topic": "x"},
     "column 'partition' is bigint"),
    (lambda df: df.select("value"), {"topic": "no-such-topic-eoskit"},
     "topic 'no-such-topic-eoskit' does not exist"),
    (lambda df: df.select("value"), {"topic": "x", "kafka.transactional.id": "t"},
     "kafka.transactional.id"),
], ids=["no-value", "no-topic", "partition-type", "missing-topic", "owned-setting"])
def test_bad_input_is_refused_before_data_moves(spark, kafka, source, transform, options,
                                                expected, tmp_path):
    options = {k: v for k, v in options.items()}
    assert expected in failure(spark, kafka, source, transform, options, tmp_path)


def test_a_row_naming_a_missing_partition_fails_and_commits_nothing(
        spark, kafka, source, new_topic, tmp_path):
    out = new_topic(2, "kout")
    error = failure(spark, kafka, source,
                    lambda df: df.select("value", F.lit(7).cast("int").alias("partition")),
                    {"topic": out}, tmp_path)
    assert f"partition 7 of topic '{out}'" in error and "partitions 0..1" in error
    log = read_topic(kafka, out)
    assert log.records() == [] and log.open_transactions == {}


def test_a_record_over_the_size_limit_is_named(spark, kafka, source, new_topic, tmp_path):
    out = new_topic(1, "kout")

    def transform(df):
        return df.select(F.when(F.col("value").cast("string") == "7", F.expr("repeat('x', 2000)"))
                         .otherwise(F.col("value").cast("string")).alias("value"))

    with pytest.raises(StreamingQueryException) as err:
        run_to_kafka(spark, kafka, source, transform,
                     {"topic": out, "kafka.message.max.bytes": "1500"}, tmp_path, name="ck")
    error = str(err.value)
    assert "message.max.bytes" in error and f"for topic '{out}'" in error
    # Each task commits its own transaction: the task that read record 7 (source
    # partition 1, records i % 3 == 1) committed nothing. Which of the others
    # committed before Spark cancelled the stage is up to the scheduler, but
    # each is all of its partition's records, once, or none.
    log = read_topic(kafka, out)
    values = sorted(int(r.value) for r in log.records())
    assert len(values) == len(set(values))
    partitions = {i % 3 for i in values}
    assert 1 not in partitions
    assert values == [i for i in range(1200) if i % 3 in partitions]
    # A task Spark cancelled in the middle of its transaction (the stage failed
    # under it) cannot abort it: the transaction stays open, its records
    # invisible to read_committed readers, until the restart's task for that
    # partition fences its transactional id and aborts it (asserted below).
    # The fix, restarted from the same checkpoint: the tasks that committed
    # skip by their markers, the rest write; every record once.
    run_to_kafka(spark, kafka, source, transform,
                 {"topic": out, "kafka.message.max.bytes": "5000"}, tmp_path, name="ck")
    log = read_topic(kafka, out)
    values = sorted(r.value.decode() for r in log.records())
    assert sorted(values) == sorted("x" * 2000 if i == 7 else str(i) for i in range(1200))
    assert log.open_transactions == {}


def test_an_unreachable_broker_is_named(spark, kafka, source, tmp_path):
    df = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", source).option("startingOffsets", "earliest").load())
    query = (df.select("value").writeStream.format("eoskit-kafka")
             .option("kafka.bootstrap.servers", "127.0.0.1:9").option("topic", "x")
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException) as err:
        query.awaitTermination(120)
    assert "127.0.0.1:9" in str(err.value)


def test_at_least_once_mode_writes_every_record(spark, kafka, source, new_topic, tmp_path):
    out = new_topic(2, "kout")
    run_to_kafka(spark, kafka, source, lambda df: df.select("key", "value"),
                 {"topic": out, "commitMode": "at_least_once"}, tmp_path)
    assert sorted(int(r.value) for r in read_topic(kafka, out).records()) == list(range(1200))


def test_transactions_left_open_by_a_run_with_more_tasks_are_aborted_at_start(
        spark, kafka, source, new_topic, produce_to, numbered_records, tmp_path):
    """A run with more task partitions than this one left a transaction open
    (its driver was killed mid-batch): no task of this run reuses that
    transactional id, so the start must abort it, or read_committed readers
    of the topic would stall on it for good."""
    from confluent_kafka import Producer

    from eoskit.twophase.decision_log import DecisionLog

    out = new_topic(2, "kout")
    sink_id = f"lo{uuid.uuid4().hex[:8]}"
    options = {"topic": out, "sinkId": sink_id}
    checkpoint = run_to_kafka(spark, kafka, source, lambda df: df.select("value"), options,
                              tmp_path, "ck")
    zombie = Producer({"bootstrap.servers": kafka, "transactional.id": f"eoskit-{sink_id}-5"})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(out, b"from a task of a run with six tasks", partition=0)
    zombie.flush(30)
    DecisionLog(str(checkpoint), sink_id).write_meta("kafka-tasks", {"partitions": 6, "batch": 0})
    assert read_topic(kafka, out).open_transactions, "the zombie's transaction should be open"
    produce_to(source, numbered_records(3, 10, start=1200))
    # A new run, as `eoskit run` marks one: the sink's start-up work runs again.
    from eoskit.runtime.job.control import ControlDir

    record = ControlDir(str(checkpoint)).claim("restart")
    try:
        # Other options: this session's planning process checks the sink anew.
        run_to_kafka(spark, kafka, source, lambda df: df.select("value"),
                     {**options, "kafka.client.id": "second-run"}, tmp_path, "ck")
    finally:
        record.release()
    log = read_topic(kafka, out)
    assert log.open_transactions == {}
    assert sorted(int(r.value) for r in log.records()) == list(range(1230))
