"""The Kafka sink's options, declared once and checked when the sink is created.

Names and meanings are those of Spark's built-in Kafka sink (``topic``,
``includeHeaders``, ``kafka.*`` passed to the producer, the Java client's
settings translated or refused by name: :mod:`.security`), so that
switching is a change of format string; plus eoskit's ``commitMode``,
``sinkId``, ``markerTopic`` and the dead-letter options.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from eoskit.connectors.kafka import security
from eoskit.connectors.kafka.client import redact
from eoskit.core.options import (
    Option,
    OptionError,
    OptionSet,
    Reading,
    parse_bool,
    parse_positive_int,
    parse_str,
    setting,
)
from eoskit.connectors.sink_options import DEAD_LETTER_SOURCE_COLUMNS, DEAD_LETTER_TOPIC
from eoskit.twophase.sink_options import COMMON

#: Producer settings the sink owns, refused as ``kafka.*`` options.
OWNED = {
    "transactional.id": "the sink makes one per (sinkId, task partition); set 'sinkId'",
    "enable.idempotence": "the sink always enables it",
    "key.serializer": "a cast of the key column to string or binary",
    "value.serializer": "a cast of the value column to string or binary",
    "interceptor.classes": "nothing (Java only)",
}

#: librdkafka's default ``message.max.bytes``.
PRODUCER_MAX_MESSAGE_BYTES = 1_000_000
#: librdkafka's default ``batch.size``: the most bytes of one record batch.
PRODUCER_BATCH_SIZE = 1_000_000
#: A record batch's own header, which the broker counts against the topic's
#: ``max.message.bytes`` with the records.
BATCH_HEADER_BYTES = 61

#: Producer defaults, overridable with ``kafka.*``: batches of a few ms, the
#: Java client's partitioner (so keys land where Spark's Kafka sink puts them),
#: and a transaction timeout that bounds one task's transaction.
DEFAULTS = {
    # A broker gone behind a partition is noticed by the connection, not only
    # by the calls' timeouts.
    "socket.keepalive.enable": "true",
    "linger.ms": "5",
    "partitioner": "murmur2_random",
    "transaction.timeout.ms": "300000",
    "compression.type": "none",
}


def _producer(_: None, reading: Reading) -> dict[str, str]:
    """The ``kafka.*`` options as librdkafka's configuration: the Java
    client's settings translated (:mod:`.security`), those the sink owns
    and those its idempotent producer cannot take refused by name."""
    kafka = OPTIONS.passthrough(reading.given, "kafka.")
    kafka = {k.lower() if k.lower() == "bootstrap.servers" else k: v for k, v in kafka.items()}
    if not kafka.get("bootstrap.servers"):
        raise OptionError(
            "option 'kafka.bootstrap.servers' is required (host:port[,host:port...])")
    for key in kafka:
        if key.lower() in OWNED:
            raise OptionError(f"option 'kafka.{key}' is not supported by the eoskit-kafka "
                              f"sink: {OWNED[key.lower()]}")
    kafka = security.translate(kafka, "sink")
    check_idempotent_producer(kafka)
    size = kafka.get("message.max.bytes")
    if size is not None and not size.strip().isdigit():
        raise OptionError(f"option 'kafka.message.max.bytes' = {size!r}: expected a "
                          "number of bytes")
    return kafka


# -- rules that span options (after every field is read) ------------------------------


def dead_letter_columns_need_a_topic(settings: "KafkaSinkSettings", _: Reading) -> None:
    if settings.dead_letter_source_columns is not None and settings.dead_letter_topic is None:
        raise OptionError(f"option '{DEAD_LETTER_SOURCE_COLUMNS.name}' needs the option "
                          f"'{DEAD_LETTER_TOPIC.name}'")


def dead_letters_need_their_own_topic(settings: "KafkaSinkSettings", _: Reading) -> None:
    if settings.dead_letter_topic is not None and settings.dead_letter_topic == settings.topic:
        raise OptionError(f"option '{DEAD_LETTER_TOPIC.name}' names the output topic "
                          f"{settings.topic!r}: dead letters need a topic of their own")


@dataclass(frozen=True, repr=False, kw_only=True)
class KafkaSinkSettings:
    """Every option of one Kafka sink, parsed; pickled to executors. Each
    field is declared by the option it is read from (``setting``):
    ``OPTIONS`` and ``parse`` are derived from them.

    ``kafka`` is librdkafka's configuration, the Java client's settings
    already translated (:mod:`.security`); its repr never shows a secret.
    """

    kafka: dict[str, str] = setting(derive=_producer, reads=security.OPTIONS)
    topic: str | None = setting(
        Option("topic", parse_str, None,
               "Topic every row is written to; overrides a `topic` column, as in Spark."))
    include_headers: bool = setting(
        Option("includeHeaders", parse_bool, False,
               "Write the `headers` column (array of key/value structs) as record headers."))
    #: ``markerTopic``, else ``topic``.
    marker_topic: str | None = setting(
        Option("markerTopic", parse_str, None,
               "An existing topic under whose partition 0 each task's progress marker is "
               "committed (a consumer-group offset of the sink's own groups; no record is "
               "written to it). Default: `topic`; needed when the rows carry their topic."),
        derive=lambda topic, reading: topic or reading.fields["topic"])
    #: ``callTimeout``: seconds each call to the brokers may take.
    call_timeout: float = setting(
        Option("callTimeout", parse_positive_int, 60,
               "Seconds each of a task's calls to the brokers may take: starting its "
               "transactions (which fences older producers of its id), reading its marker, "
               "looking up a topic, flushing, sending the marker and committing or aborting. "
               "A call past it fails the task, whose retry's new producer fences the stuck "
               "one and reads the marker to learn whether the transaction committed. Keep "
               "it below `kafka.transaction.timeout.ms`."),
        derive=lambda seconds, _: float(seconds), default=60.0)
    #: Where records the sink cannot write go; None: such a record fails the batch.
    dead_letter_topic: str | None = setting(DEAD_LETTER_TOPIC)
    #: ``deadLetterSourceColumns`` as given (None: no source columns).
    dead_letter_source_columns: tuple[str, ...] | None = setting(DEAD_LETTER_SOURCE_COLUMNS)

    CHECKS: ClassVar = (dead_letter_columns_need_a_topic, dead_letters_need_their_own_topic)

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]

    def __repr__(self) -> str:
        return f"KafkaSinkSettings(topic={self.topic!r}, kafka={redact(self.kafka)!r})"

    def producer_config(self) -> dict[str, str]:
        return {**DEFAULTS, **self.kafka}

    def with_batches_under(self, topic_limits: Sequence[int]) -> "KafkaSinkSettings":
        """These settings with the producer's ``batch.size`` under the
        smallest of the topics' ``max.message.bytes``: the broker compares a
        whole record batch with it, and librdkafka does not split a batch the
        broker refuses (the transaction would fail). A smaller ``batch.size``
        given as an option is kept."""
        if not topic_limits:
            return self
        room = min(topic_limits) - BATCH_HEADER_BYTES
        given = int(self.kafka.get("batch.size", PRODUCER_BATCH_SIZE))
        if given <= room:
            return self
        return dataclasses.replace(self, kafka={**self.kafka, "batch.size": str(max(1, room))})

    @property
    def max_message_bytes(self) -> int:
        """The producer's record size limit (librdkafka's ``message.max.bytes``)."""
        return int(self.kafka.get("message.max.bytes", PRODUCER_MAX_MESSAGE_BYTES))

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "KafkaSinkSettings":
        """The options as settings (``OPTIONS.read``), on the driver."""
        return OPTIONS.read(options, "the eoskit-kafka sink")


OPTIONS = OptionSet.of(
    KafkaSinkSettings,
    also=COMMON,  # sinkId, ...: read by the protocol's adapter
    passthrough_prefixes=("kafka.",),
    owner="the eoskit-kafka sink",
)


#: What librdkafka's idempotent producer (every transactional one) demands,
#: and which it would otherwise refuse only when a task makes the producer.
_IDEMPOTENT = "the sink's transactional producer is idempotent, which needs"


def check_idempotent_producer(kafka: Mapping[str, str]) -> None:
    """Refuse, when the options are parsed, producer values librdkafka's
    idempotent producer does not take (``acks`` other than all, more than
    5 requests in flight, no retries), naming the option."""
    lowered = {k.lower(): str(v).strip() for k, v in kafka.items()}
    for name in ("acks", "request.required.acks"):
        if name in lowered and lowered[name].lower() not in ("all", "-1"):
            raise OptionError(f"option 'kafka.{name}': {_IDEMPOTENT} acks=all; remove the option")
    for name in ("max.in.flight.requests.per.connection", "max.in.flight"):
        if name in lowered and (not lowered[name].isdigit() or int(lowered[name]) > 5):
            raise OptionError(f"option 'kafka.{name}': {_IDEMPOTENT} at most 5 requests in "
                              "flight per connection")
    for name in ("retries", "message.send.max.retries"):
        if name in lowered and lowered[name] in ("0",):
            raise OptionError(f"option 'kafka.{name}': {_IDEMPOTENT} retries; remove the option")

