"""confluent-kafka clients for the source: configuration and broker metadata.

Runs on the driver (planning) and on executors (configuration only). The
Kafka settings a user gives as ``kafka.*`` options reach librdkafka
unchanged, as Spark's built-in source passes them to the Java client.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from eoskit.connectors.kafka.offsets import PartitionOffsets, TopicPartition

log = logging.getLogger(__name__)

#: Kafka settings the source owns, refused as ``kafka.*`` options with the
#: option that replaces them (the same list as Spark's built-in source).
OWNED_SETTINGS = {
    "auto.offset.reset": "startingOffsets",
    "enable.auto.commit": "commitOffsetsToGroup (offsets live in Spark's checkpoint)",
    "key.deserializer": "a cast or from_json on the binary key column",
    "value.deserializer": "a cast or from_json on the binary value column",
    "interceptor.classes": "nothing (Java only)",
}

#: Keys whose values never appear in logs or errors.
SECRET_KEYS = ("password", "secret", "sasl.oauthbearer.config", "ssl.key.pem")

DEFAULT_GROUP_ID = "eoskit-kafka-source"


class BrokerUnreachable(ConnectionError):
    """The bootstrap servers did not answer a metadata request in time."""


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config safe to print."""
    return {
        k: ("<redacted>" if any(s in k.lower() for s in SECRET_KEYS) else v)
        for k, v in config.items()
    }


def consumer_config(kafka_settings: Mapping[str, str]) -> dict[str, Any]:
    """The reading consumer's config: never commits, read_committed unless overridden."""
    config: dict[str, Any] = {
        "group.id": DEFAULT_GROUP_ID,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # A missing position is data loss, reported by the source, never a silent jump.
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
    }
    config.update(kafka_settings)
    return config


def admin_config(kafka_settings: Mapping[str, str]) -> dict[str, Any]:
    """Settings meaningful to an AdminClient: consumer-only keys are dropped."""
    consumer_only = ("group.", "isolation.level", "fetch.", "max.poll", "session.timeout",
                     "heartbeat.", "auto.", "enable.auto", "partition.assignment",
                     "max.partition.fetch", "queued.", "check.crcs", "client.rack")
    return {k: v for k, v in kafka_settings.items() if not k.startswith(consumer_only)}


def _isolation(kafka_settings: Mapping[str, str]) -> IsolationLevel:
    level = kafka_settings.get("isolation.level", "read_committed")
    return (
        IsolationLevel.READ_UNCOMMITTED if level == "read_uncommitted" else IsolationLevel.READ_COMMITTED
    )


class KafkaMetadata:
    """Topics, partitions and offset bounds, asked of the broker by the driver.

    One AdminClient for the life of the query: Spark asks for the latest
    offsets at every trigger, and reconnecting each time would dominate a
    short trigger interval.
    """

    def __init__(self, kafka_settings: Mapping[str, str], timeout_s: float = 30.0) -> None:
        self._settings = dict(kafka_settings)
        self._bootstrap = self._settings.get("bootstrap.servers", "")
        self._timeout_s = timeout_s
        self._admin = AdminClient(admin_config(self._settings))

    def topics(self) -> dict[str, list[int]]:
        """Every topic the broker lists, with its partition numbers."""
        try:
            metadata = self._admin.list_topics(timeout=self._timeout_s)
        except KafkaException as exc:
            raise BrokerUnreachable(
                f"cannot reach Kafka at kafka.bootstrap.servers={self._bootstrap!r}: "
                f"{exc.args[0].str() if exc.args else exc}"
            ) from None
        return {
            name: sorted(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }

    def _offsets(self, partitions: Iterable[TopicPartition], spec: OffsetSpec) -> PartitionOffsets:
        request = {KafkaTopicPartition(t, p): spec for t, p in partitions}
        if not request:
            return {}
        futures = self._admin.list_offsets(
            request,
            isolation_level=_isolation(self._settings),
            request_timeout=self._timeout_s,
        )
        result: PartitionOffsets = {}
        for tp, future in futures.items():
            try:
                result[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException as exc:
                raise BrokerUnreachable(
                    f"listing offsets of {tp.topic}-{tp.partition} at "
                    f"kafka.bootstrap.servers={self._bootstrap!r} failed: "
                    f"{exc.args[0].str() if exc.args else exc}"
                ) from None
        return result

    def earliest(self, partitions: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._offsets(partitions, OffsetSpec.earliest())

    def latest(self, partitions: Iterable[TopicPartition]) -> PartitionOffsets:
        """The last stable offset under read_committed: nothing of an open
        transaction, nor anything after it, is below it."""
        return self._offsets(partitions, OffsetSpec.latest())

    def close(self) -> None:
        # AdminClient has no close(); dropping the reference frees it.
        self._admin = None  # type: ignore[assignment]
