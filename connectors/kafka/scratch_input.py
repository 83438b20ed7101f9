"""The Kafka source's scratch input (``runtime.components.ScratchInput``):
a copy of the source's one input topic, suffixed (``orders-chaos1a2bi``),
created like the original (``scratch.create_like``: its partition count,
replication factor and the configuration set on it), filled by
``eoskit chaos --records N`` with the records its generator made, and read
by the same source from its beginning; deleted at the end. The job's own
topic is never written. Runs on the driver of ``eoskit chaos``.

The records are produced by an idempotent producer (no duplicate on a
retry) configured from the source's own Kafka settings (``admin_config``:
its bootstrap servers and security options, without the consumer's), every
delivery checked: a record not delivered fails the command, naming the topic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from eoskit.connectors.kafka.client import ClientLog, admin_config
from eoskit.connectors.kafka.pin import REPLACED
from eoskit.connectors.kafka.scratch import create_like, delete
from eoskit.connectors.kafka.settings import (
    ASSIGN,
    STARTING_OFFSETS,
    SUBSCRIBE,
    SUBSCRIBE_PATTERN,
    KafkaSourceSettings,
)
from eoskit.core.options import OptionError

if TYPE_CHECKING:
    from eoskit.connectors.kafka.pipeline_source import KafkaSource

_TIMEOUT_S = 30.0
#: The longest the producer may take to deliver every record.
_FLUSH_S = 120.0
#: The options naming what the source reads, replaced by the scratch topic.
_SUBSCRIPTION = {o.name.lower() for o in (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)}


class RecordRefusedError(ValueError):
    """A generated record the scratch topic cannot hold (a partition it lacks)."""


class DeliveryError(RuntimeError):
    """A generated record was not delivered to the scratch topic."""


@dataclass
class KafkaScratchInput:
    """The scratch copy of ``original``'s input topic, named with ``suffix``."""

    original: "KafkaSource"
    suffix: str

    def __post_init__(self) -> None:
        settings = KafkaSourceSettings.parse(self.original.all_options())
        self._kafka = settings.kafka
        self.topic = _one_topic(settings)
        self.scratch_topic = f"{self.topic}-{self.suffix}"
        self.name = f"topic {self.scratch_topic}"

    def create(self) -> None:
        create_like(self._kafka, {self.topic: self.scratch_topic}, "source")

    def produce(self, records: Iterable[Any]) -> int:
        """Every record into the scratch topic, each delivery checked; how many.

        ``records`` are ``runtime.components.InputRecord`` values (``key``,
        ``value``, ``headers``, ``partition``), already in bytes. A record
        naming a partition the topic lacks is refused before any is written."""
        records = list(records)
        partitions = self._partitions()
        for index, record in enumerate(records):
            if record.partition is not None and record.partition not in partitions:
                raise RecordRefusedError(
                    f"the record at index {index} names partition {record.partition}, but "
                    f"{self.scratch_topic} has partitions 0 to {max(partitions)}, as {self.topic}")
        return self._deliver(records)

    def _deliver(self, records: list[Any]) -> int:
        from confluent_kafka import Producer

        client_log = ClientLog()
        producer = Producer({**admin_config(self._kafka), "enable.idempotence": True, "acks": "all",
                             "linger.ms": 5, "logger": client_log})
        failed: list[str] = []
        delivered = 0

        def done(error, message) -> None:
            nonlocal delivered
            if error is None:
                delivered += 1
            else:
                failed.append(error.str() if hasattr(error, "str") else str(error))

        for record in records:
            where = {} if record.partition is None else {"partition": record.partition}
            while True:
                try:
                    producer.produce(self.scratch_topic, key=record.key, value=record.value,
                                     headers=list(record.headers) or None, on_delivery=done, **where)
                    break
                except BufferError:  # the producer's queue is full: let it send
                    producer.poll(0.1)
            producer.poll(0)
        left = producer.flush(_FLUSH_S)
        if failed:
            raise DeliveryError(f"{len(failed):,} of {len(records):,} generated records were not "
                                f"delivered to {self.scratch_topic}: {failed[0]}{client_log.reason()}")
        if left or delivered != len(records):
            raise DeliveryError(f"{len(records) - delivered:,} of {len(records):,} generated records "
                                f"were not delivered to {self.scratch_topic} within {_FLUSH_S:g} s"
                                f"{client_log.reason()}")
        return delivered

    def _partitions(self) -> set[int]:
        """The scratch topic's partitions, once the broker's metadata lists
        it (a topic just created may take a moment to appear)."""
        import time

        from confluent_kafka.admin import AdminClient

        admin = AdminClient(admin_config(self._kafka))
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            # Every topic listed, never this one asked for: asking for a topic
            # by name lets a broker with auto-creation create it.
            topic = admin.list_topics(timeout=_TIMEOUT_S).topics.get(self.scratch_topic)
            if topic is not None and topic.error is None and topic.partitions:
                return set(topic.partitions)
            if time.monotonic() > deadline:
                raise OptionError(f"the scratch input topic {self.scratch_topic} did not appear "
                                  f"within {_TIMEOUT_S:g} s of its creation")
            time.sleep(0.2)

    def source(self) -> "KafkaSource":
        """The source reading the scratch topic from its beginning: its
        other options as given, its start and end options dropped (the
        command pins the scratch topic, ``KafkaSource.bounded``)."""
        kept = {k: v for k, v in self.original.options.items()
                if k.lower() not in _SUBSCRIPTION | REPLACED}
        return replace(self.original, options={**kept, SUBSCRIBE.name: self.scratch_topic,
                                               STARTING_OFFSETS.name: "earliest"})

    def drop(self) -> None:
        delete(self._kafka, [self.scratch_topic])


def _one_topic(settings: KafkaSourceSettings) -> str:
    """The source's one input topic; refused, naming the option, otherwise."""
    subscription = settings.subscription
    if subscription.pattern is not None:
        raise OptionError(f"--records: the source reads the topics of subscribePattern="
                          f"{subscription.pattern}; a generated input fills one scratch topic, "
                          "so the source must read one topic (subscribe or assign)")
    topics = list(dict.fromkeys(subscription.topics or [t for t, _ in subscription.assigned]))
    if len(topics) != 1:
        option = "subscribe" if subscription.topics else "assign"
        raise OptionError(f"--records: the source reads {len(topics)} topics ({option}: "
                          f"{', '.join(topics)}); a generated input fills one scratch topic, so "
                          "the source must read one topic")
    return topics[0]
