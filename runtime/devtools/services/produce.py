"""Producing sample records to a topic, every one acknowledged before returning."""

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
    for count, (partition, key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
        if count % 10_000 == 0:
            producer.poll(0)
    _flush(producer, topic)


def _flush(producer: Producer, topic: str) -> None:
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} record(s) to topic {topic!r} were not delivered")
