"""confluent-kafka clients for the source: configuration and broker metadata.

Runs on the driver (planning) and on executors (configuration only). The
Kafka settings a user gives as ``kafka.*`` options reach librdkafka
unchanged, as Spark's built-in source passes them to the Java client.

librdkafka logs every failed connection attempt, twenty a second while a
broker is down. The source's clients send those lines to the
``eoskit.connectors.kafka.librdkafka`` logger at DEBUG instead of stderr, and
keep the last error line to put in the one clear error the user sees.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition as KafkaTopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from eoskit.connectors.kafka.offsets import PartitionOffsets, TopicPartition
from eoskit.twophase.verdicts import Verdict

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
SECRET_KEYS = ("password", "secret", "sasl.oauthbearer.config", "ssl.key.pem", "jaas",
               "ssl.keystore.key")

DEFAULT_GROUP_ID = "eoskit-kafka-source"
#: ``client.id`` of the source's clients unless ``kafka.client.id`` is given,
#: so that broker logs and quotas name the source.
DEFAULT_CLIENT_ID = "eoskit-kafka-source"

LIBRDKAFKA_LOG = logging.getLogger("eoskit.connectors.kafka.librdkafka")


class BrokerUnreachableError(ConnectionError):
    """The bootstrap servers did not answer a metadata request in time."""


class KafkaAuthenticationError(PermissionError):
    """The broker refused the client's SASL credentials (or its TLS handshake
    failed): retrying with the same settings cannot help."""

    #: eoskit.twophase.verdicts: the service refused us; a restart cannot fix it.
    verdict: ClassVar[Verdict] = Verdict.REFUSED


#: What librdkafka logs when the broker refuses the credentials, or the TLS
#: handshake fails.
_AUTH_MARKERS = ("SASL authentication error", "Authentication failed", "SSL handshake failed",
                 "certificate verify failed")


class PartitionNotFoundError(LookupError):
    """A partition the source asked about does not exist on the broker (any more)."""


class ClientLog:
    """A librdkafka client's log: to ``LIBRDKAFKA_LOG`` at DEBUG, last error kept.

    confluent-kafka calls ``log(level, format, *args)`` on the object given as
    the client's ``logger``; it queues the lines until the client is polled,
    so a client that is not otherwise polled must be drained with
    ``poll(0)`` (``KafkaMetadata`` does it after every request).
    """

    def __init__(self) -> None:
        self.last_error: str | None = None
        #: The last line saying the broker refused the credentials or the TLS handshake failed.
        self.auth_error: str | None = None

    def log(self, level: int, msg: str, *args: Any) -> None:
        text = msg % args if args else msg
        if level >= logging.ERROR:
            self.last_error = text
        if any(marker in text for marker in _AUTH_MARKERS):
            self.auth_error = text
        LIBRDKAFKA_LOG.debug("%s", text)

    def reason(self) -> str:
        """The last error line, for an error message; empty if there was none."""
        if not self.last_error:
            return ""
        # "FAIL [client#producer-1] [thrd:...]: host:port/bootstrap: Connect to ... failed: ..."
        return "; last client error: " + self.last_error.rsplit("]: ", 1)[-1]


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config safe to print."""
    return {
        k: ("<redacted>" if any(s in k.lower() for s in SECRET_KEYS) else v)
        for k, v in config.items()
    }


#: How long the broker may hold a reading consumer's fetch with nothing new.
FETCH_WAIT_MAX_MS = 10
#: How long a partition's fetch waits after its queue was full.
FETCH_QUEUE_BACKOFF_MS = 10
#: Records a reading consumer keeps prefetched per partition.
QUEUED_MIN_MESSAGES = 20_000


def consumer_config(
    kafka_settings: Mapping[str, str], client_log: ClientLog | None = None
) -> dict[str, Any]:
    """The reading consumer's config: never commits, read_committed unless overridden."""
    config: dict[str, Any] = {
        "group.id": DEFAULT_GROUP_ID,
        "client.id": DEFAULT_CLIENT_ID,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        # A missing position is data loss, reported by the source, never a silent jump.
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
        # A task reads a range that exists, then the consumer is unassigned
        # and assigned the next task's range. librdkafka prefetches past the
        # range up to the partition's end, where the broker holds its fetch
        # for this long; the next assignment waits for that fetch to come
        # back (measured: every read of a 500-record range took 500 ms at
        # librdkafka's default of 500, 12 ms at 10).
        "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
        # When a task's consumer has prefetched past its thresholds (the
        # last task's range and beyond), librdkafka holds the partition's
        # next fetch back this long: 1 s by default, which the next task on
        # the worker waited out (measured: one task in two of a 250,000-record
        # batch spent 1,050 ms in its fetch, the others 50 ms).
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        # Prefetch no more than this past the position: what lies past a
        # task's range is fetched, then dropped at the next assignment.
        "queued.min.messages": QUEUED_MIN_MESSAGES,
    }
    config.update(kafka_settings)
    if client_log is not None:
        config["logger"] = client_log
    return config


def admin_config(kafka_settings: Mapping[str, str]) -> dict[str, Any]:
    """Settings meaningful to an AdminClient: consumer-only keys are dropped."""
    consumer_only = ("group.", "isolation.level", "fetch.", "max.poll", "session.timeout",
                     "heartbeat.", "auto.", "enable.auto", "partition.assignment",
                     "max.partition.fetch", "queued.", "check.crcs", "client.rack")
    config: dict[str, Any] = {"client.id": DEFAULT_CLIENT_ID}
    config.update((k, v) for k, v in kafka_settings.items() if not k.startswith(consumer_only))
    return config


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
        self._log = ClientLog()
        self._admin = AdminClient({**admin_config(self._settings), "logger": self._log})

    def _drain_log(self) -> None:
        # The client's log lines wait in a queue until it is polled.
        self._admin.poll(0)

    def topics(self) -> dict[str, list[int]]:
        """Every topic the broker lists, with its partition numbers.

        Always the whole list: a metadata request naming a topic lets a broker
        with auto-creation create it, and a source must never create topics.
        """
        deadline = time.monotonic() + self._timeout_s
        while True:
            # In short steps, so that refused credentials fail at once, not
            # after the whole timeout.
            step = max(0.1, min(1.0, deadline - time.monotonic()))
            try:
                metadata = self._admin.list_topics(timeout=step)
                break
            except KafkaException as exc:
                self._drain_log()
                self._check_auth()
                if time.monotonic() >= deadline:
                    raise BrokerUnreachableError(
                        f"cannot reach Kafka at kafka.bootstrap.servers={self._bootstrap!r} "
                        f"within {self._timeout_s:g} s: {_reason(exc)}{self._log.reason()}"
                    ) from None
        self._drain_log()
        return {
            name: sorted(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }

    def _check_auth(self) -> None:
        """Raise :class:`KafkaAuthenticationError` if the client's log says the
        broker refused its credentials or the TLS handshake failed."""
        line = self._log.auth_error
        if line is None:
            return
        reason = line.rsplit("]: ", 1)[-1]
        if "SSL" in line and "SASL" not in line:
            raise KafkaAuthenticationError(
                f"the TLS handshake with Kafka at kafka.bootstrap.servers={self._bootstrap!r} "
                f"failed: {reason}; check kafka.ssl.truststore.location (the CA that signed the "
                "broker's certificate) and kafka.ssl.endpoint.identification.algorithm")
        user = self._settings.get("sasl.username")
        raise KafkaAuthenticationError(
            f"Kafka at kafka.bootstrap.servers={self._bootstrap!r} refused the SASL credentials "
            f"of kafka.sasl.jaas.config (user {user!r}, kafka.sasl.mechanism="
            f"{self._settings.get('sasl.mechanism')}): {reason}; check the username and password")

    def _list_offsets(
        self, request: Mapping[KafkaTopicPartition, OffsetSpec]
    ) -> dict[TopicPartition, Any]:
        if not request:
            return {}
        futures = self._admin.list_offsets(
            dict(request),
            isolation_level=_isolation(self._settings),
            request_timeout=self._timeout_s,
        )
        result: dict[TopicPartition, Any] = {}
        for tp, future in futures.items():
            try:
                result[(tp.topic, tp.partition)] = future.result()
            except KafkaException as exc:
                self._drain_log()
                error = exc.args[0] if exc.args else None
                if error is not None and error.code() in _NOT_FOUND:
                    raise PartitionNotFoundError(
                        f"partition {tp.topic}-{tp.partition} does not exist at "
                        f"kafka.bootstrap.servers={self._bootstrap!r} ({_reason(exc)})"
                    ) from None
                raise BrokerUnreachableError(
                    f"listing offsets of {tp.topic}-{tp.partition} at "
                    f"kafka.bootstrap.servers={self._bootstrap!r} failed: "
                    f"{_reason(exc)}{self._log.reason()}"
                ) from None
        self._drain_log()
        return result

    def _offsets(self, partitions: Iterable[TopicPartition], spec: OffsetSpec) -> PartitionOffsets:
        found = self._list_offsets({KafkaTopicPartition(t, p): spec for t, p in partitions})
        return {tp: info.offset for tp, info in found.items()}

    def earliest(self, partitions: Iterable[TopicPartition]) -> PartitionOffsets:
        return self._offsets(partitions, OffsetSpec.earliest())

    def latest(self, partitions: Iterable[TopicPartition]) -> PartitionOffsets:
        """The last stable offset under read_committed: nothing of an open
        transaction, nor anything after it, is below it."""
        return self._offsets(partitions, OffsetSpec.latest())

    def for_timestamps(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """Per partition, the first offset whose record timestamp is at or after
        the given one (ms since the epoch); None where no record is that late.

        The Kafka protocol answers "no such record" with offset and timestamp
        -1; a found offset always comes with the record's timestamp.
        """
        found = self._list_offsets({
            KafkaTopicPartition(t, p): OffsetSpec.for_timestamp(ts)
            for (t, p), ts in timestamps.items()
        })
        return {
            tp: (info.offset if info.offset >= 0 and info.timestamp >= 0 else None)
            for tp, info in found.items()
        }

    def close(self) -> None:
        # AdminClient has no close(); dropping the reference frees it.
        self._admin = None  # type: ignore[assignment]


_NOT_FOUND = (
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._NOENT,  # "No leaders found": the partition is not in the metadata
)


def _reason(exc: KafkaException) -> str:
    return exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
