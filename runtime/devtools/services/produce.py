"""Producing sample records to a topic, every one acknowledged before returning."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Producer

Record = tuple[int, bytes | None, bytes]  # (partition, key, value)


#: How long to let the producer deliver when its local queue is full.
_FULL_QUEUE_WAIT_S = 0.1


def produce_records(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    headers: list[tuple[str, bytes]] | None = None,
    config: dict[str, str | int] | None = None,
) -> None:
    """Produce ``records``, then wait until none is left in the producer's
    queue (``_flush``). ``config``: more producer settings.

    The producer's local queue holds 100,000 records by default; a broker
    slower than this loop (many partitions, a busy machine) fills it, and
    ``produce`` raises ``BufferError``. The record is then produced again
    once the producer has delivered some (``poll``), so a slow broker slows
    the loop down instead of failing it. The wait is bounded: a record the
    broker never takes leaves the queue after ``message.timeout.ms``."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "compression.type": "lz4", **(config or {})})
    for count, (partition, key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
                break
            except BufferError:
                producer.poll(_FULL_QUEUE_WAIT_S)
        if count % 10_000 == 0:
            producer.poll(0)
    _flush(producer, topic)


def _flush(producer: Producer, topic: str) -> None:
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} record(s) to topic {topic!r} were not delivered")
