"""Producing sample records to the local broker, so that all of them are
visible to offset queries.

The local Kafka-compatible broker (Tansu 0.6) answers ListOffsets with the
base offset of a partition's last record batch plus one, so the tail of a
batched produce stays invisible to a source that plans by offsets until more
data arrives. The last record of each partition is therefore held back and
sent in a batch of its own. Harmless against Apache Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Producer

Record = tuple[int, bytes | None, bytes]  # (partition, key, value)


def produce_records(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "compression.type": "lz4"})
    tail: dict[int, tuple[bytes | None, bytes]] = {}
    for count, (partition, key, value) in enumerate(records):
        if partition in tail:
            held_key, held_value = tail[partition]
            producer.produce(topic, key=held_key, value=held_value, partition=partition,
                             headers=headers)
        tail[partition] = (key, value)
        if count % 10_000 == 0:
            producer.poll(0)
    _flush(producer, topic)
    for partition, (key, value) in tail.items():
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
        _flush(producer, topic)


def _flush(producer: Producer, topic: str) -> None:
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} record(s) to topic {topic!r} were not delivered")
