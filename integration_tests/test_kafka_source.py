"""The eoskit-kafka source against a real broker, through Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

#: Also run on Apache Kafka 3.9 (the kafka3 tier, conftest.py).
pytestmark = pytest.mark.kafka_versions


def stream(spark, kafka, topic=None, **options):
    reader = spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
    if topic is not None:
        reader = reader.option("subscribe", topic)
    options.setdefault("startingOffsets", "earliest")
    return reader.options(**{k: str(v) for k, v in options.items()}).load()


def run_available_now(df, path: Path, checkpoint: Path):
    """Write everything available now to parquet (Spark's exactly-once file sink)."""
    query = (
        df.writeStream.format("parquet")
        .option("path", str(path))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert not query.isActive
    assert query.exception() is None, query.exception()
    return query


def test_multi_partition_topic_read_exactly_once_across_batches_and_restart(
    spark, kafka, new_topic, produce_to, numbered_records, tmp_path
):
    topic = new_topic(3)
    produce_to(topic, numbered_records(3, 40))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = run_available_now(stream(spark, kafka, topic, maxOffsetsPerTrigger=25), out, checkpoint)
    assert len([p for p in first.recentProgress if p["numInputRows"]]) >= 120 // 25

    produce_to(topic, numbered_records(3, 20, start=120))
    run_available_now(stream(spark, kafka, topic, maxOffsetsPerTrigger=25), out, checkpoint)

    rows = spark.read.parquet(str(out)).selectExpr("cast(value as string) v", "partition", "offset").collect()
    values = sorted(int(r.v) for r in rows)
    assert values == list(range(180))
    assert len({(r.partition, r.offset) for r in rows}) == 180

    # The offset log holds the source's offsets in Spark's format.
    logs = sorted((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last = json.loads(logs[-1].read_text().splitlines()[-1])
    assert last == {topic: {"0": 60, "1": 60, "2": 60}}


def test_max_offsets_per_trigger_bounds_every_batch(
    spark, kafka, new_topic, produce_to, numbered_records, tmp_path
):
    topic = new_topic(2)
    produce_to(topic, numbered_records(2, 50))
    query = run_available_now(
        stream(spark, kafka, topic, maxOffsetsPerTrigger=30), tmp_path / "o", tmp_path / "c"
    )
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 100
    assert max(sizes) <= 30
    assert len(sizes) >= 4


def _wait_for(predicate, timeout=90.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def _memory_count(spark, table):
    return spark.sql(f"select count(*) c from {table}").collect()[0].c


def test_topic_matching_pattern_created_while_running_is_read(
    spark, kafka, new_topic, produce_to, numbered_records, tmp_path
):
    prefix = f"pat{os.getpid()}{int(time.time())}"
    first = new_topic(1, prefix=prefix)
    produce_to(first, numbered_records(1, 5))
    query = (
        stream(spark, kafka, subscribePattern=f"{prefix}-.*")
        .writeStream.format("memory").queryName("pattern_sink")
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(processingTime="500 milliseconds").start()
    )
    try:
        _wait_for(lambda: _memory_count(spark, "pattern_sink") == 5, what="first topic")
        second = new_topic(2, prefix=prefix)
        produce_to(second, numbered_records(2, 4, start=100))
        _wait_for(lambda: _memory_count(spark, "pattern_sink") == 13, what="new topic's partitions")
        topics = {r.topic for r in spark.sql("select distinct topic from pattern_sink").collect()}
        assert topics == {first, second}
    finally:
        query.stop()


def _broker_supports_create_partitions(kafka: str) -> str | None:
    admin = AdminClient({"bootstrap.servers": kafka})
    from confluent_kafka.admin import NewTopic

    name = f"probe-{time.time_ns()}"
    for f in admin.create_topics([NewTopic(name, 1, 1)]).values():
        f.result(30)
    try:
        for f in admin.create_partitions([NewPartitions(name, 2)]).values():
            f.result(30)
    except Exception as exc:  # noqa: BLE001 - the probe reports any refusal as the reason
        return str(exc)
    return None


def test_partition_added_to_subscribed_topic_while_running(
    spark, kafka, new_topic, produce_to, numbered_records, tmp_path
):
    refusal = _broker_supports_create_partitions(kafka)
    if refusal is not None:
        pytest.skip(f"this broker cannot add partitions (CreatePartitions: {refusal}); "
                    "runs against Apache Kafka (EOSKIT_SERVICES=docker)")
    topic = new_topic(1)
    produce_to(topic, numbered_records(1, 5))
    query = (
        stream(spark, kafka, topic).writeStream.format("memory").queryName("grow_sink")
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(processingTime="500 milliseconds").start()
    )
    try:
        _wait_for(lambda: _memory_count(spark, "grow_sink") == 5)
        admin = AdminClient({"bootstrap.servers": kafka})
        for f in admin.create_partitions([NewPartitions(topic, 3)]).values():
            f.result(30)
        produce_to(topic, {1: [(b"a", b"1")], 2: [(b"b", b"2")]})
        _wait_for(lambda: _memory_count(spark, "grow_sink") == 7, what="new partitions")
    finally:
        query.stop()


def test_open_transaction_is_not_read_until_it_commits(spark, kafka, new_topic, produce_to, tmp_path):
    topic = new_topic(2)
    produce_to(topic, {1: [(b"plain", b"p%d" % i) for i in range(5)]})
    tx = Producer({"bootstrap.servers": kafka, "transactional.id": f"tx-{topic}"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(7):
        tx.produce(topic, value=b"tx%d" % i, partition=0)
    tx.flush(30)
    query = (
        stream(spark, kafka, topic).writeStream.format("memory").queryName("tx_sink")
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(processingTime="500 milliseconds").start()
    )
    try:
        _wait_for(lambda: _memory_count(spark, "tx_sink") == 5, what="plain records")
        time.sleep(3)  # several more triggers: the open transaction must stay invisible
        assert _memory_count(spark, "tx_sink") == 5
        tx.commit_transaction(30)
        _wait_for(lambda: _memory_count(spark, "tx_sink") == 12, what="committed transaction")
        values = {r.v for r in spark.sql("select cast(value as string) v from tx_sink").collect()}
        assert {f"tx{i}" for i in range(7)} <= values
        # the commit marker leaves a gap: no record at the marker's offset
        offsets = sorted(r.offset for r in spark.sql("select offset from tx_sink where partition = 0").collect())
        assert offsets == list(range(7))
    finally:
        query.stop()


def test_aborted_transactions_are_never_read_and_leave_gaps(spark, kafka, new_topic, tmp_path):
    """read_committed: an aborted transaction's records and every control
    record occupy offsets that no batch returns; offsets are positions, not
    counts. A streaming run and a batch read agree with a plain
    read_committed consumer."""
    topic = new_topic(1)
    tx = Producer({"bootstrap.servers": kafka, "transactional.id": f"tx-{topic}"})
    tx.init_transactions(30)
    for name, count, commit in (("aborted", 5, False), ("kept", 3, True), ("aborted2", 2, False),
                                ("kept2", 4, True)):
        tx.begin_transaction()
        for i in range(count):
            tx.produce(topic, value=f"{name}-{i}".encode(), partition=0)
        tx.flush(30)
        (tx.commit_transaction if commit else tx.abort_transaction)(30)
    # offsets: aborted 0-4, marker 5, kept 6-8, marker 9, aborted2 10-11, marker 12, kept2 13-16, marker 17
    expected = [(6, "kept-0"), (7, "kept-1"), (8, "kept-2"),
                (13, "kept2-0"), (14, "kept2-1"), (15, "kept2-2"), (16, "kept2-3")]
    out = tmp_path / "out"
    run_available_now(stream(spark, kafka, topic, maxOffsetsPerTrigger=4), out, tmp_path / "ck")
    streamed = sorted((r.offset, r.v) for r in spark.read.parquet(str(out))
                      .selectExpr("offset", "cast(value as string) v").collect())
    batch = sorted((r.offset, r.v) for r in spark.read.format("eoskit-kafka")
                   .option("kafka.bootstrap.servers", kafka).option("subscribe", topic).load()
                   .selectExpr("offset", "cast(value as string) v").collect())
    from eoskit.runtime.devtools.services.kafka_topic import read_topic

    consumer = [(r.offset, r.value.decode()) for r in read_topic(kafka, topic).records()]
    assert streamed == batch == consumer == expected


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_truncated_topic_fails_or_skips_by_option(
    spark, kafka, new_topic, produce_to, numbered_records, tmp_path, fail_on_data_loss
):
    """Records deleted from the head of a partition (DeleteRecords, as
    retention does) before the query read them: failOnDataLoss=true fails
    naming the lost offsets; false skips them, says so, and reads the rest."""
    from confluent_kafka.admin import AdminClient

    topic = new_topic(1)
    produce_to(topic, numbered_records(1, 30))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(stream(spark, kafka, topic), out, checkpoint)
    produce_to(topic, numbered_records(1, 20, start=30))  # offsets 30..49
    admin = AdminClient({"bootstrap.servers": kafka})
    for f in admin.delete_records([TopicPartition(topic, 0, 40)]).values():
        f.result(30)
    query = (
        stream(spark, kafka, topic, failOnDataLoss=str(fail_on_data_loss).lower())
        .writeStream.format("parquet").option("path", str(out))
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    if fail_on_data_loss:
        with pytest.raises(Exception) as err:
            query.awaitTermination(300)
        assert "offsets 30 to 39" in str(err.value) and "failOnDataLoss=false" in str(err.value)
        assert spark.read.parquet(str(out)).count() == 30
    else:
        query.awaitTermination(300)
        assert query.exception() is None
        values = sorted(int(r.v) for r in spark.read.parquet(str(out)).selectExpr("cast(value as string) v").collect())
        assert values == list(range(30)) + list(range(40, 50))


def test_compacted_topic_is_read_as_a_plain_consumer_reads_it(spark, kafka, tmp_path):
    """A compacted topic: the log cleaner removed older records of each key,
    leaving gaps in the offsets. The source reads what is left, in a stream
    and in a batch read, exactly as a plain consumer does."""
    from confluent_kafka.admin import NewTopic

    from eoskit.runtime.devtools.services.kafka_topic import read_topic

    topic = f"compacted-{os.urandom(4).hex()}"
    admin = AdminClient({"bootstrap.servers": kafka})
    config = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.001",
              "min.compaction.lag.ms": "0", "delete.retention.ms": "100"}
    for f in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": kafka})
    for round_ in range(3):
        for key in range(5):
            producer.produce(topic, key=f"k{key}".encode(), value=f"{round_}".encode(), partition=0)
        producer.flush(30)
        time.sleep(0.3)  # a new segment for each round: only closed segments are compacted

    rolls = iter(range(1000))

    def compacted() -> bool:
        """Each of k0..k4 down to its last value; nothing else can go then
        (the records that roll the active segment have keys of their own)."""
        producer.produce(topic, key=f"roll-{next(rolls)}".encode(), value=b"x", partition=0)
        producer.flush(30)
        return len([r for r in read_topic(kafka, topic).records() if r.key.startswith(b"k")]) == 5

    _wait_for(compacted, timeout=90, what="the log cleaner's compaction")
    expected = sorted((r.offset, r.key, r.value) for r in read_topic(kafka, topic).records())
    out = tmp_path / "out"
    run_available_now(stream(spark, kafka, topic, maxOffsetsPerTrigger=3), out, tmp_path / "ck")
    streamed = sorted((r.offset, bytes(r.key), bytes(r.value))
                      for r in spark.read.parquet(str(out)).select("offset", "key", "value").collect())
    batch = sorted((r.offset, bytes(r.key), bytes(r.value)) for r in spark.read.format("eoskit-kafka")
                   .option("kafka.bootstrap.servers", kafka).option("subscribe", topic).load()
                   .select("offset", "key", "value").collect())
    assert streamed == batch == expected
    assert [o for o, _, _ in expected] != list(range(len(expected))), "no gap: nothing was compacted"


def _recreate(kafka, topic, partitions):
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": kafka})
    for f in admin.delete_topics([topic]).values():
        f.result(30)
    _wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, what="topic deletion")
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    _wait_for(lambda: topic in admin.list_topics(timeout=10).topics, what="topic creation")


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_deleted_offsets_fail_or_skip_by_option(
    spark, kafka, new_topic, produce_to, numbered_records, tmp_path, fail_on_data_loss
):
    topic = new_topic(1)
    produce_to(topic, numbered_records(1, 30))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(stream(spark, kafka, topic), out, checkpoint)
    # The topic is deleted and recreated: the checkpointed offset 30 no
    # longer exists, and the new topic's records start again at 0.
    _recreate(kafka, topic, 1)
    produce_to(topic, numbered_records(1, 4, start=1000))
    df = stream(spark, kafka, topic, failOnDataLoss=str(fail_on_data_loss).lower())
    query = (
        df.writeStream.format("parquet").option("path", str(out))
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    if fail_on_data_loss:
        with pytest.raises(Exception) as err:
            query.awaitTermination(300)
        assert "went back from 30 to 4" in str(err.value)
        assert "failOnDataLoss=false" in str(err.value)
        assert spark.read.parquet(str(out)).count() == 30
    else:
        query.awaitTermination(300)
        assert query.exception() is None
        values = sorted(int(r.v) for r in spark.read.parquet(str(out)).selectExpr("cast(value as string) v").collect())
        assert values == list(range(30)) + [1000, 1001, 1002, 1003]


def test_batch_read_between_offsets_with_headers(spark, kafka, new_topic, produce_to, numbered_records):
    topic = new_topic(2)
    produce_to(topic, numbered_records(2, 10), headers=[("source", b"test")])
    df = (
        spark.read.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
        .option("subscribe", topic).option("includeHeaders", "true")
        .option("startingOffsets", json.dumps({topic: {"0": 2, "1": -2}}))
        .option("endingOffsets", json.dumps({topic: {"0": 6, "1": -1}}))
        .load()
    )
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = df.collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(0, o) for o in range(2, 6)] + [(1, o) for o in range(10)]
    assert all(r.headers[0].key == "source" and bytes(r.headers[0].value) == b"test" for r in rows)
    assert all(r.timestampType == 0 and r.timestamp is not None for r in rows)


def test_min_partitions_splits_ranges_without_loss(spark, kafka, new_topic, produce_to, numbered_records):
    topic = new_topic(1)
    produce_to(topic, numbered_records(1, 100))
    df = (spark.read.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", topic).option("minPartitions", "4").load())
    assert df.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(100))


def test_consumer_reused_across_ranges_in_one_worker(kafka, new_topic, produce_to, numbered_records):
    from eoskit.connectors.kafka import reader
    from eoskit.connectors.kafka.offsets import OffsetRange
    from eoskit.connectors.kafka.schema import arrow_schema

    topic = new_topic(2)
    produce_to(topic, numbered_records(2, 10))
    settings = {"bootstrap.servers": kafka}
    before = dict(reader._consumers)
    got = []
    schema = arrow_schema(False)
    for partition in (0, 1, 0):
        for batch in reader.read_range(OffsetRange(topic, partition, 0, 10), settings, schema, 30_000, True):
            got.append(batch.num_rows)
    new = set(reader._consumers) - set(before)
    assert len(new) == 1  # one consumer served all three ranges
    assert got == [10, 10, 10]
    reader._close_all()


def test_source_commits_offsets_to_named_group_for_lag_tools(
    spark, kafka, new_topic, produce_to, numbered_records, tmp_path
):
    topic = new_topic(2)
    produce_to(topic, numbered_records(2, 6))
    group = f"lag-{topic}"
    query = (
        stream(spark, kafka, topic, commitOffsetsToGroup=group)
        .writeStream.format("memory").queryName("lag_sink")
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(processingTime="500 milliseconds").start()
    )
    try:
        _wait_for(lambda: _memory_count(spark, "lag_sink") == 12)
        # Spark hands a source its committed offsets when it plans the next
        # batch: one more record makes batch 0's offsets reach the group.
        produce_to(topic, {0: [(b"k", b"more")]})
        _wait_for(lambda: _memory_count(spark, "lag_sink") == 13)
        consumer = Consumer({"bootstrap.servers": kafka, "group.id": group})

        def committed():
            tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
            return [tp.offset for tp in consumer.committed(tps, timeout=30)]

        try:
            _wait_for(lambda: committed() == [6, 6], what="committed group offsets")
        finally:
            consumer.close()
    finally:
        query.stop()


def test_unknown_option_fails_at_load(spark, kafka):
    with pytest.raises(Exception) as err:
        (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
         .option("subscribe", "x").option("startingOffset", "earliest").load())
    assert "unknown option 'startingoffset'" in str(err.value)
    assert "Did you mean 'startingOffsets'" in str(err.value)


DISCOVERY_SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
df = (spark.read.format("eoskit-kafka").option("kafka.bootstrap.servers", sys.argv[1])
      .option("subscribe", sys.argv[2]).load())
print("COUNT", df.count())
"""


@pytest.mark.parametrize("launcher", ["python", pytest.param("spark-submit", marks=pytest.mark.full)])
def test_spark_finds_the_source_without_registration(
    kafka, new_topic, produce_to, numbered_records, tmp_path, launcher
):
    import pkgutil

    if "pyspark_eoskit_kafka" not in {m.name for m in pkgutil.iter_modules()}:
        pytest.skip("pyspark_eoskit_kafka is not on sys.path as a file: an editable install "
                    "(pip install -e) hides it from Spark's pyspark_* discovery; "
                    "install with `pip install .` to run this test")
    topic = new_topic(1)
    produce_to(topic, numbered_records(1, 3))
    script = tmp_path / "discover.py"
    script.write_text(DISCOVERY_SCRIPT)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    if launcher == "python":
        cmd = [sys.executable, str(script), kafka, topic]
    else:
        cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]", str(script), kafka, topic]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert "COUNT 3" in result.stdout, result.stderr[-3000:]


# --- the edges, as Spark users expect them --------------------------------


def batch(spark, kafka, **options):
    reader = spark.read.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
    return reader.options(**{k: str(v) for k, v in options.items()}).load()


def test_batch_read_of_an_empty_topic_or_unmatched_pattern_is_an_empty_dataframe(spark, kafka, new_topic):
    topic = new_topic(2)
    assert batch(spark, kafka, subscribe=topic).count() == 0
    assert batch(spark, kafka, subscribePattern=f"{topic}-nothing-.*").count() == 0


@pytest.mark.parametrize("option", ["subscribe", "assign"])
def test_batch_read_of_a_missing_topic_names_it(spark, kafka, option):
    topic = f"missing-{time.time_ns()}"
    value = topic if option == "subscribe" else json.dumps({topic: [0]})
    with pytest.raises(Exception) as err:
        batch(spark, kafka, **{option: value}).collect()
    text = str(err.value)
    assert f"option '{option}' names topic '{topic}' that does not exist" in text
    assert "cannot reach" not in text
    # and the source created nothing
    assert topic not in AdminClient({"bootstrap.servers": kafka}).list_topics(timeout=10).topics


def test_assign_of_a_partition_the_topic_lacks_names_it(spark, kafka, new_topic):
    topic = new_topic(2)
    with pytest.raises(Exception) as err:
        batch(spark, kafka, assign=json.dumps({topic: [0, 5]})).collect()
    assert f"{topic}-5 ({topic} has partitions 0-1)" in str(err.value)


def test_batch_read_refuses_latest_start_naming_the_option(spark, kafka, new_topic):
    topic = new_topic(1)
    with pytest.raises(Exception) as err:
        batch(spark, kafka, subscribe=topic, startingOffsets="latest").collect()
    assert "option 'startingOffsets' cannot be latest" in str(err.value)


def test_streaming_subscribe_to_a_missing_topic_fails_the_query_naming_it(spark, kafka, tmp_path):
    topic = f"missing-{time.time_ns()}"
    query = (
        stream(spark, kafka, topic).writeStream.format("memory").queryName("missing_sink")
        .option("checkpointLocation", str(tmp_path / "c")).start()
    )
    try:
        with pytest.raises(Exception) as err:
            query.awaitTermination(120)
        assert f"option 'subscribe' names topic '{topic}' that does not exist" in str(err.value)
    finally:
        query.stop()


def test_spark_option_eoskit_lacks_is_named_at_load_not_taken_for_a_typo(spark, kafka):
    with pytest.raises(Exception) as err:
        (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
         .option("subscribe", "x").option("fetchOffset.numRetries", "5").load())
    assert ("option 'fetchOffset.numRetries' is a Spark Kafka source option that the "
            "eoskit-kafka source does not take") in str(err.value)
    assert "Did you mean" not in str(err.value)


def _values(df) -> list[int]:
    return sorted(int(r.v) for r in df.selectExpr("cast(value as string) v").collect())


@pytest.fixture
def two_eras(new_topic, produce_to, numbered_records):
    """A 2-partition topic: records 0-9, then (a second later) records 100-109,
    and a timestamp between the two."""
    topic = new_topic(2)
    produce_to(topic, numbered_records(2, 5))
    time.sleep(1.0)
    boundary = int(time.time() * 1000)
    time.sleep(1.0)
    produce_to(topic, numbered_records(2, 5, start=100))
    return topic, boundary


def test_batch_reads_start_and_end_by_timestamp(spark, kafka, two_eras):
    topic, boundary = two_eras
    assert _values(batch(spark, kafka, subscribe=topic, startingTimestamp=boundary)) == list(range(100, 110))
    assert _values(batch(spark, kafka, subscribe=topic, endingTimestamp=boundary)) == list(range(10))
    per_partition = json.dumps({topic: {"0": boundary, "1": 0}})
    got = batch(spark, kafka, subscribe=topic, startingOffsetsByTimestamp=per_partition)
    # partition 0 (even values) from the boundary on, partition 1 (odd values) from its start
    assert _values(got) == [v for v in [*range(10), *range(100, 110)] if v % 2 == 1 or v >= 100]
    late = int(time.time() * 1000) + 3_600_000
    with pytest.raises(Exception) as err:
        batch(spark, kafka, subscribe=topic, startingTimestamp=late).collect()
    assert "option 'startingTimestamp': no record at or after the given timestamp" in str(err.value)
    assert "startingOffsetsByTimestampStrategy=latest" in str(err.value)
    assert batch(spark, kafka, subscribe=topic, startingTimestamp=late,
                 startingOffsetsByTimestampStrategy="latest").count() == 0


def test_streaming_query_starts_at_a_timestamp(spark, kafka, two_eras, tmp_path):
    topic, boundary = two_eras
    df = stream(spark, kafka, topic, startingTimestamp=boundary)
    run_available_now(df, tmp_path / "o", tmp_path / "c")
    assert _values(spark.read.parquet(str(tmp_path / "o"))) == list(range(100, 110))


def test_max_records_per_partition_and_group_id_prefix(spark, kafka, new_topic, produce_to, numbered_records):
    topic = new_topic(1)
    produce_to(topic, numbered_records(1, 100))
    df = batch(spark, kafka, subscribe=topic, maxRecordsPerPartition=30, groupIdPrefix="eoskit-test")
    assert df.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(100))


def _batch_sizes(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_min_offsets_per_trigger_waits_for_enough_offsets_or_the_delay(
    spark, kafka, new_topic, produce_to, numbered_records, tmp_path
):
    topic = new_topic(1)
    produce_to(topic, numbered_records(1, 3))
    query = (
        stream(spark, kafka, topic, minOffsetsPerTrigger=5, maxTriggerDelay="1h")
        .writeStream.format("memory").queryName("min_sink")
        .option("checkpointLocation", str(tmp_path / "c1"))
        .trigger(processingTime="300 milliseconds").start()
    )
    try:
        _wait_for(lambda: _memory_count(spark, "min_sink") == 3, what="first trigger")  # always runs
        produce_to(topic, numbered_records(1, 3, start=10))
        time.sleep(3)  # ten triggers, each with 3 < 5 offsets: all skipped
        assert _memory_count(spark, "min_sink") == 3
        produce_to(topic, numbered_records(1, 2, start=20))
        _wait_for(lambda: _memory_count(spark, "min_sink") == 8, what="enough offsets")
        # The sink's rows show before Spark records the batch's progress.
        _wait_for(lambda: sum(_batch_sizes(query)) >= 8, what="the batch's progress")
        assert _batch_sizes(query) == [3, 5]
    finally:
        query.stop()

    # The same topic from the start, but few offsets and a short delay: the
    # delay lets a small batch through.
    query = (
        stream(spark, kafka, topic, minOffsetsPerTrigger=1000, maxTriggerDelay="2s")
        .writeStream.format("memory").queryName("delay_sink")
        .option("checkpointLocation", str(tmp_path / "c2"))
        .trigger(processingTime="300 milliseconds").start()
    )
    try:
        _wait_for(lambda: _memory_count(spark, "delay_sink") == 8, what="first trigger")
        produce_to(topic, numbered_records(1, 2, start=30))
        _wait_for(lambda: _memory_count(spark, "delay_sink") == 10, what="maxTriggerDelay")
    finally:
        query.stop()


def test_available_now_reads_everything_despite_min_offsets_per_trigger(
    spark, kafka, new_topic, produce_to, numbered_records, tmp_path
):
    topic = new_topic(1)
    produce_to(topic, numbered_records(1, 10))
    df = stream(spark, kafka, topic, maxOffsetsPerTrigger=4, minOffsetsPerTrigger=3, maxTriggerDelay="1h")
    query = run_available_now(df, tmp_path / "o", tmp_path / "c")
    assert _batch_sizes(query) == [4, 4, 2]  # the last 2 < 3 are read all the same
    assert _values(spark.read.parquet(str(tmp_path / "o"))) == list(range(10))


UNREACHABLE_SCRIPT = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1").getOrCreate())
from eoskit.connectors.kafka import KafkaDataSource
spark.dataSource.register(KafkaDataSource)
try:
    (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", sys.argv[1])
     .option("subscribe", "x").load())
except Exception as exc:
    print("LOAD FAILED:", exc)
"""


def test_unreachable_broker_fails_load_with_one_clear_error_and_a_quiet_stderr(tmp_path):
    """Before the query starts; in a process of its own, to see all of its stderr."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    script = tmp_path / "unreachable.py"
    script.write_text(UNREACHABLE_SCRIPT)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    result = subprocess.run([sys.executable, str(script), address], capture_output=True,
                            text=True, env=env, timeout=300)
    assert "LOAD FAILED:" in result.stdout, result.stderr[-3000:]
    assert f"cannot reach Kafka at kafka.bootstrap.servers={address!r}" in result.stdout
    assert "Connection refused" in result.stdout
    noise = [line for line in result.stderr.splitlines() if "rdkafka" in line or "FAIL" in line]
    assert noise == [], noise[:5]
    assert len(result.stderr.splitlines()) < 40, result.stderr[-3000:]
