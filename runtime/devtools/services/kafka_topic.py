"""A Kafka topic as a plain ``read_committed`` consumer reads it: the
independent reader that the Kafka tests, the demo and the benchmarks check
eoskit's Kafka sink with.

It relies on Apache Kafka's own promises and on nothing of eoskit's: a
``read_committed`` consumer never receives the records of aborted or open
transactions, nor control records; it reads each partition up to its last
stable offset (LSO), which an open transaction holds back.

``read_topic`` reads every partition from its start to the LSO at the time
of the call with a fresh consumer of no group (it commits nothing), and
reports the partitions whose LSO is behind their high watermark: a
transaction is open there, and its records are not visible yet.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

__all__ = ["KafkaTopicError", "LogRecord", "TopicLog", "read_topic"]

# librdkafka's complaints while a test's broker restarts go to a silent logger.
_QUIET = logging.getLogger("eoskit.runtime.devtools.services.kafka_topic")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


class KafkaTopicError(RuntimeError):
    """The topic could not be read; the message names it."""


@dataclass(frozen=True)
class LogRecord:
    """One record a read_committed consumer received."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


@dataclass
class TopicLog:
    """What a ``read_committed`` reader of a topic sees."""

    topic: str
    #: Per partition (every partition of the topic), in offset order.
    committed: dict[int, list[LogRecord]]
    #: Partitions whose LSO is behind the high watermark (a transaction is
    #: open there): partition -> offsets not yet stable.
    open_transactions: dict[int, int] = field(default_factory=dict)

    def records(self) -> list[LogRecord]:
        """Every committed record, partition then offset order."""
        return [r for p in sorted(self.committed) for r in self.committed[p]]


def _consumer(bootstrap: str, isolation: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"eoskit-verifier-{uuid.uuid4().hex}",  # never joined, never committed
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
        "logger": _QUIET,
    })


def read_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> TopicLog:
    """Every committed record of ``topic``, read with ``isolation.level =
    read_committed`` up to each partition's LSO as it is now."""
    deadline = time.monotonic() + timeout
    consumer = _consumer(bootstrap, "read_committed")
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise KafkaTopicError(f"topic {topic!r} does not exist on {bootstrap}")
        partitions = sorted(found.partitions)
        stable = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1]
                  for p in partitions}
        committed: dict[int, list[LogRecord]] = {p: [] for p in partitions}
        pending = {p for p in partitions if stable[p] > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        while pending:
            if time.monotonic() > deadline:
                raise KafkaTopicError(
                    f"topic {topic!r}: partitions {sorted(pending)} not read to their last "
                    f"stable offset within {timeout:.0f} s")
            for message in consumer.consume(1000, timeout=0.5):
                error = message.error()
                partition = message.partition()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if message.offset() >= stable[partition]:
                            pending.discard(partition)
                        continue
                    raise KafkaTopicError(f"topic {topic!r} partition {partition}: {error}")
                if message.offset() >= stable[partition]:
                    continue  # committed after the call started
                committed[partition].append(LogRecord(
                    topic, partition, message.offset(), message.key(), message.value(),
                    tuple(message.headers() or ()), message.timestamp()[1]))
                if message.offset() + 1 >= stable[partition]:
                    pending.discard(partition)
    except KafkaException as exc:
        raise KafkaTopicError(f"topic {topic!r} on {bootstrap}: {exc}") from None
    finally:
        consumer.close()
    return TopicLog(topic, committed, _unstable(bootstrap, topic, stable, timeout))


def _unstable(bootstrap: str, topic: str, stable: dict[int, int], timeout: float) -> dict[int, int]:
    """Partitions whose high watermark is past their LSO."""
    consumer = _consumer(bootstrap, "read_uncommitted")
    try:
        high = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1]
                for p in stable}
    finally:
        consumer.close()
    return {p: high[p] - stable[p] for p in stable if high[p] > stable[p]}
