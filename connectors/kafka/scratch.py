"""The Kafka sink's scratch copy (``runtime.components.Scratch``): its
topic, and its marker and dead-letter topics, suffixed (``orders-chaosr1``),
created with the originals' partition count, replication factor and the
configuration set on them; read from the start to the end with a plain
``read_committed`` consumer; deleted at the end. Runs on the driver of
``eoskit chaos``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from eoskit.connectors.kafka.client import admin_config, consumer_config
from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings
from eoskit.core.options import OptionError

if TYPE_CHECKING:
    from eoskit.connectors.kafka.pipeline_sink import KafkaSink

#: The columns a scratch topic's rows are compared by.
COLUMNS = ("key", "value", "headers")
_RENAMED = ("topic", "markertopic", "deadlettertopic")
_DROPPED = ("sinkid",)  # each run's checkpoint gives it a sink id of its own
_TIMEOUT_S = 30.0


@dataclass
class KafkaScratch:
    """The scratch copy of ``original``'s topics, named with ``suffix``."""

    original: "KafkaSink"
    suffix: str

    def __post_init__(self) -> None:
        settings = KafkaSinkSettings.parse(self.original.all_options())
        if settings.topic is None:
            raise OptionError("the eoskit-kafka sink has no option 'topic' (its rows carry their "
                              "topics): eoskit chaos cannot redirect it to a scratch topic")
        self._kafka = settings.kafka
        #: original topic -> scratch topic
        self.topics = {t: f"{t}-{self.suffix}" for t in dict.fromkeys(
            [settings.topic, settings.marker_topic, settings.dead_letter_topic]) if t}
        options = {k: v for k, v in self.original.options.items() if k.lower() not in _RENAMED + _DROPPED}
        options["topic"] = self.topics[settings.topic]
        if settings.marker_topic:
            options["markerTopic"] = self.topics[settings.marker_topic]
        if settings.dead_letter_topic:
            options["deadLetterTopic"] = self.topics[settings.dead_letter_topic]
        self._sink = replace(self.original, options=options)
        self._topic = self.topics[settings.topic]
        self.name = f"topic {self._topic}"

    def sink(self) -> "KafkaSink":
        return self._sink

    def create(self) -> None:
        create_like(self._kafka, self.topics, "sink")

    def rows(self) -> tuple[tuple[str, ...], list[tuple], tuple[str, ...]]:
        """Every committed record of the scratch topic, read to the end each
        partition had when reading began: a partition is read once the
        consumer's position (past records and transaction markers) reaches it;
        an empty one is not waited for."""
        import time

        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({**consumer_config(self._kafka), "auto.offset.reset": "earliest"})
        try:
            metadata = consumer.list_topics(self._topic, timeout=_TIMEOUT_S)
            every = [TopicPartition(self._topic, p, 0) for p in sorted(metadata.topics[self._topic].partitions)]
            bounds = {tp.partition: consumer.get_watermark_offsets(tp, timeout=_TIMEOUT_S) for tp in every}
            ends = {partition: high for partition, (_, high) in bounds.items()}
            # A partition that holds nothing is not read: the consumer's position
            # there stays unknown (-1001) however long it waits.
            partitions = [tp for tp in every if bounds[tp.partition][1] > bounds[tp.partition][0]]
            consumer.assign(partitions)
            rows: list[tuple] = []
            deadline = time.monotonic() + 4 * _TIMEOUT_S
            while any(tp.offset < ends[tp.partition] for tp in consumer.position(partitions)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {self._topic} to its end took over {4 * _TIMEOUT_S:g} s")
                for message in consumer.consume(10_000, timeout=1.0):
                    if message.error():
                        raise RuntimeError(f"reading {self._topic}: {message.error()}")
                    rows.append((message.key(), message.value(), tuple(message.headers() or ())))
            return COLUMNS, rows, ("key",)
        finally:
            consumer.close()

    def drop(self) -> None:
        delete(self._kafka, self.topics.values())


def _admin(kafka: Mapping[str, str]):
    from confluent_kafka.admin import AdminClient

    return AdminClient(admin_config(kafka))


def create_like(kafka: Mapping[str, str], topics: Mapping[str, str], whose: str) -> None:
    """Create each scratch topic of ``topics`` (original -> scratch) like its
    original: its partition count, replication factor, and the configuration
    set on it (not the broker's defaults). ``whose`` (``sink``, ``source``)
    names the original in the error when one does not exist."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic

    admin = _admin(kafka)
    metadata = admin.list_topics(timeout=_TIMEOUT_S)
    missing = [t for t in topics if t not in metadata.topics]
    if missing:
        raise OptionError(f"the {whose}'s topic {missing[0]!r} does not exist: eoskit chaos "
                          "creates its scratch topics like the job's own")
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    configs = {r.name: f.result(_TIMEOUT_S) for r, f in admin.describe_configs(resources).items()}
    new = []
    for original, scratch in topics.items():
        partitions = metadata.topics[original].partitions
        replicas = len(next(iter(partitions.values())).replicas)
        set_here = {name: entry.value for name, entry in configs[original].items()
                    if not entry.is_default and entry.source in (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)}
        new.append(NewTopic(scratch, num_partitions=len(partitions), replication_factor=replicas,
                            config=set_here))
    for topic, future in admin.create_topics(new, operation_timeout=_TIMEOUT_S).items():
        future.result(_TIMEOUT_S)


def delete(kafka: Mapping[str, str], topics: Iterable[str]) -> None:
    """Delete those of ``topics`` that exist; the others are no error."""
    admin = _admin(kafka)
    existing = admin.list_topics(timeout=_TIMEOUT_S).topics
    gone = [t for t in topics if t in existing]
    for future in admin.delete_topics(gone, operation_timeout=_TIMEOUT_S).values() if gone else ():
        future.result(_TIMEOUT_S)
