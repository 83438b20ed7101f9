"""The Kafka log verifier (eoskit.twophase.conformance.kafka_log) against the
real broker: what it reads must be what a correct read_committed consumer
sees, whatever the broker filters.

Producers are confluent-kafka's, as the Kafka sink's are. Values are sent
uncompressed and incompressible where the size matters, so that a topic
spans several fetches.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from eoskit.twophase.conformance import kafka_log
from eoskit.twophase.conformance.kafka_log import (
    KafkaLogError,
    LogRecord,
    RecordBatch,
    apply_read_committed,
    read_batches,
    read_topic,
)


def _producer(kafka: str, transactional_id: str | None = None) -> Producer:
    config = {"bootstrap.servers": kafka, "linger.ms": 5}
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    if transactional_id is not None:
        producer.init_transactions(30)
    return producer


def _values(records: list[LogRecord]) -> list[bytes | None]:
    return [r.value for r in records]


def _plain_read_committed(kafka: str, topic: str, partitions: int) -> list[bytes]:
    """What confluent-kafka's read_committed consumer returns, up to the end of
    every partition (the last stable offset), sorted."""
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": f"plain-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, at_end = [], set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"the consumer did not reach the end of {topic}"
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == -191, message.error()  # partition EOF
                at_end.add(message.partition())
                continue
            values.append(message.value())
    finally:
        consumer.close()
    return sorted(values)


def test_plain_records_are_all_visible_with_their_fields(kafka, new_topic):
    topic = new_topic(3)  # partition 2 stays empty
    producer = _producer(kafka)
    sent: dict[int, list[tuple[bytes | None, bytes | None, list, int]]] = {0: [], 1: []}
    for i in range(10):
        partition = i % 2
        key = None if i == 3 else f"k{i}".encode()
        value = None if i == 4 else f"v{i}".encode()
        headers = [("h", f"{i}".encode()), ("empty", None)] if i % 3 == 0 else []
        timestamp = 1_700_000_000_000 + i
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers,
                         timestamp=timestamp)
        sent[partition].append((key, value, headers, timestamp))
    assert producer.flush(30) == 0

    log = read_topic(kafka, topic)

    assert log.aborted == 0 and log.open_transactions == {}
    for partition, rows in sent.items():
        got = log.committed[partition]
        assert [r.offset for r in got] == list(range(len(rows)))
        assert [(r.key, r.value, list(r.headers), r.timestamp) for r in got] == rows
        assert all(r.topic == topic and r.partition == partition for r in got)
    assert log.committed[2] == []
    assert log.records() == log.committed[0] + log.committed[1]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_decoded(kafka, new_topic, codec):
    topic = new_topic(1)
    producer = Producer({"bootstrap.servers": kafka, "linger.ms": 50, "compression.type": codec})
    values = [f"{codec}-{i}-".encode() * 20 for i in range(500)]
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0

    batches = read_batches(kafka, topic)
    log = read_topic(kafka, topic)

    assert _values(log.records()) == values
    assert len(batches) < len(values)  # batched, so compressed as batches


def test_committed_transaction_is_visible_and_aborted_one_dropped(kafka, new_topic):
    topic = new_topic(2)
    producer = _producer(kafka, f"log-{uuid.uuid4().hex}")
    for tag, commit in (("c1", True), ("a1", False), ("c2", True)):
        producer.begin_transaction()
        for partition in (0, 1):
            producer.produce(topic, value=f"{tag}-{partition}".encode(), partition=partition)
        assert producer.flush(30) == 0  # the aborted records reach the log, then the marker
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    log = read_topic(kafka, topic)

    assert sorted(_values(log.records())) == [b"c1-0", b"c1-1", b"c2-0", b"c2-1"]
    assert log.aborted == 2 and log.open_transactions == {}
    # The log does hold them: the verifier dropped them, by their ABORT markers.
    batches = read_batches(kafka, topic)
    assert {r.value for b in batches for r in b.records} >= {b"a1-0", b"a1-1"}
    assert [b.control for b in batches if b.partition == 0 and b.control] == ["COMMIT", "ABORT", "COMMIT"]
    # Offsets are positions: data, marker, data, marker, data, marker.
    assert [r.offset for r in log.committed[0]] == [0, 4]
    # A broker that filters aborted transactions agrees with the verifier;
    # Tansu 0.6 hands the aborted records to read_committed consumers too.
    plain = _plain_read_committed(kafka, topic, 2)
    assert plain in (sorted(_values(log.records())), sorted(_values(log.records()) + [b"a1-0", b"a1-1"]))


def test_zombie_fenced_by_a_new_instance_is_dropped(kafka, new_topic):
    topic = new_topic(2)
    transactional_id = f"log-zombie-{uuid.uuid4().hex}"
    zombie = _producer(kafka, transactional_id)
    zombie.begin_transaction()
    for i in range(6):
        zombie.produce(topic, value=f"zombie-{i}".encode(), partition=i % 2)
    assert zombie.flush(30) == 0

    # A new instance with the same transactional id fences the zombie and
    # aborts its transaction, then commits its own.
    successor = _producer(kafka, transactional_id)
    successor.begin_transaction()
    for i in range(4):
        successor.produce(topic, value=f"new-{i}".encode(), partition=i % 2)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException):
        zombie.produce(topic, value=b"late", partition=0)
        zombie.flush(10)
        zombie.commit_transaction(10)

    log = read_topic(kafka, topic)

    verified = sorted(_values(log.records()))
    assert verified == [b"new-0", b"new-1", b"new-2", b"new-3"]
    assert log.aborted == 6 and log.open_transactions == {}
    # The zombie's records are in the log, ended by an ABORT marker of its producer id.
    batches = read_batches(kafka, topic)
    zombie_batches = [b for b in batches if any(r.value.startswith(b"zombie") for r in b.records)]
    zombie_ids = {b.producer_id for b in zombie_batches}
    assert any(b.control == "ABORT" and b.producer_id in zombie_ids for b in batches)
    # What a plain read_committed consumer sees: the same on a broker that
    # filters fenced transactions; the zombie's records too on Tansu 0.6,
    # which is why Kafka sink tests verify with kafka_log.
    plain = _plain_read_committed(kafka, topic, 2)
    zombie_values = [f"zombie-{i}".encode() for i in range(6)]
    assert plain in (verified, sorted(verified + zombie_values)), plain


def test_open_transaction_is_reported_not_visible(kafka, new_topic):
    topic = new_topic(2)
    open_producer = _producer(kafka, f"log-open-{uuid.uuid4().hex}")
    open_producer.begin_transaction()
    for i in range(4):
        open_producer.produce(topic, value=f"open-{i}".encode(), partition=i % 2)
    assert open_producer.flush(30) == 0
    plain = _producer(kafka)
    plain.produce(topic, value=b"after", partition=0)  # above the last stable offset
    assert plain.flush(30) == 0

    log = read_topic(kafka, topic)

    producer_ids = {b.producer_id for b in read_batches(kafka, topic) if b.transactional}
    assert len(producer_ids) == 1
    assert log.open_transactions == {0: list(producer_ids), 1: list(producer_ids)}
    assert log.open_records == 4 and log.aborted == 0
    assert _values(log.records()) == [b"after"]
    assert log.committed[0][0].offset == 2

    # Ending it turns the open records into aborted ones (and frees the topic's LSO).
    open_producer.abort_transaction(30)
    log = read_topic(kafka, topic)
    assert log.open_transactions == {} and log.aborted == 4
    assert _values(log.records()) == [b"after"]


def _watch_fetches(monkeypatch, cut: bool = False) -> list[int]:
    """Record the max_bytes of every fetch; with ``cut``, make every answer end
    at max_bytes, cutting its last batch short, as Apache Kafka does (Tansu
    0.6 answers whole batches only)."""
    asked: list[int] = []
    fetch = kafka_log._Cluster.fetch

    def watched(self, topic, partition, offset, max_bytes):
        high_watermark, data = fetch(self, topic, partition, offset, max_bytes)
        asked.append(max_bytes)
        return high_watermark, data[:max_bytes] if cut else data

    monkeypatch.setattr(kafka_log._Cluster, "fetch", watched)
    return asked


def test_many_records_over_several_partitions_and_fetches(kafka, new_topic, monkeypatch):
    partitions, size = 4, 4_000
    topic = new_topic(partitions)
    producer = _producer(kafka, f"log-many-{uuid.uuid4().hex}")
    expected: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for chunk in range(5):  # five transactions of 4,000 records, the third aborted
        producer.begin_transaction()
        for i in range(chunk * size, (chunk + 1) * size):
            value = f"{i:06d}-".encode() + os.urandom(150).hex().encode()
            producer.produce(topic, key=str(i).encode(), value=value, partition=i % partitions)
            if chunk != 2:
                expected[i % partitions].append(value)
            if i % 1_000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        if chunk == 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)

    asked = _watch_fetches(monkeypatch)
    log = read_topic(kafka, topic, timeout=120)

    assert log.aborted == size and log.open_transactions == {}
    assert {p: _values(r) for p, r in log.committed.items()} == expected
    for records in log.committed.values():
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets))
    # Each partition's log (~1.5 MB) is more than one fetch of the default 1 MiB.
    assert len(asked) > partitions

    # Fetch answers cut mid-batch (Kafka's way) give the same view, also when
    # a single batch is larger than max_bytes and the ask has to grow.
    monkeypatch.undo()
    asked = _watch_fetches(monkeypatch, cut=True)
    assert read_topic(kafka, topic, timeout=120, max_bytes=20_000) == log
    assert len(asked) > 2 * partitions and max(asked) > 20_000


def test_missing_topic_is_named(kafka):
    topic = f"missing-{uuid.uuid4().hex}"
    with pytest.raises(KafkaLogError, match=topic):
        read_topic(kafka, topic, timeout=20)


def test_unreachable_broker_is_named():
    with pytest.raises(KafkaLogError, match="127.0.0.1:9"):
        read_topic("127.0.0.1:9", "any", timeout=3)


# The rule alone, for what Apache Kafka never writes and Tansu 0.6 did not
# either: transactions fenced without an ABORT marker, writes and markers
# with a fenced epoch.


def _batch(offset: int, epoch: int, values: list[bytes] = (), control: str | None = None,
           producer_id: int = 7) -> RecordBatch:
    records = tuple(LogRecord("t", 0, offset + i, None, v, (), 0) for i, v in enumerate(values))
    return RecordBatch(0, offset, offset + max(len(values), 1) - 1, producer_id, epoch, True,
                       control, records)


def test_rule_drops_a_transaction_fenced_without_a_marker():
    log = apply_read_committed("t", [
        _batch(0, 0, [b"zombie-0", b"zombie-1"]),
        _batch(2, 1, [b"new-0"]),
        _batch(3, 1, control="COMMIT"),
    ])
    assert _values(log.records()) == [b"new-0"] and log.aborted == 2


def test_rule_drops_a_zombie_write_with_an_older_epoch():
    log = apply_read_committed("t", [
        _batch(0, 1, [b"new-0"]),
        _batch(1, 0, [b"late-zombie"]),
        _batch(2, 1, [b"new-1"]),
        _batch(3, 1, control="COMMIT"),
        _batch(4, 0, [b"later-zombie"]),
    ])
    assert _values(log.records()) == [b"new-0", b"new-1"]
    assert log.aborted == 2 and log.open_transactions == {}


def test_rule_ignores_a_marker_older_than_the_open_transaction():
    log = apply_read_committed("t", [
        _batch(0, 1, [b"new-0"]),
        _batch(1, 0, control="ABORT"),  # the fenced instance's, not the coordinator's
        _batch(2, 1, control="COMMIT"),
    ])
    assert _values(log.records()) == [b"new-0"] and log.aborted == 0


def test_rule_accepts_markers_with_a_bumped_epoch():
    # Kafka's coordinator writes markers with a bumped epoch (and with
    # transactions v2, the next transaction uses it).
    log = apply_read_committed("t", [
        _batch(0, 0, [b"a"]), _batch(1, 1, control="COMMIT"),
        _batch(2, 1, [b"b"]), _batch(3, 2, control="ABORT"),
        _batch(4, 2, [b"c"]), _batch(5, 3, control="COMMIT"),
        _batch(6, 3, [b"open"]),
    ])
    assert _values(log.records()) == [b"a", b"c"]
    assert log.aborted == 1 and log.open_transactions == {0: [7]} and log.open_records == 1
