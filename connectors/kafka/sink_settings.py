"""The Kafka sink's options, declared once and checked when the sink is created.

Names and meanings are those of Spark's built-in Kafka sink (``topic``,
``includeHeaders``, ``kafka.*`` passed to the producer), so that switching is
a change of format string; plus eoskit's ``commitMode``, ``sinkId`` and
``markerTopic``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eoskit.connectors.options import Option, OptionError, OptionSet, parse_bool, parse_str
from eoskit.connectors.sink_options import COMMON

TOPIC = Option("topic", parse_str, None,
               "Topic every row is written to; overrides a `topic` column, as in Spark.")
INCLUDE_HEADERS = Option("includeHeaders", parse_bool, False,
                         "Write the `headers` column (array of key/value structs) as record "
                         "headers.")
MARKER_TOPIC = Option(
    "markerTopic", parse_str, None,
    "An existing topic under whose partition 0 each task's progress marker is committed "
    "(a consumer-group offset of the sink's own groups; no record is written to it). "
    "Default: `topic`; needed when the rows carry their topic.")

OPTIONS = OptionSet(
    (TOPIC, INCLUDE_HEADERS, MARKER_TOPIC, *COMMON),
    passthrough_prefixes=("kafka.",),
    owner="the eoskit-kafka sink",
)

#: Producer settings the sink owns, refused as ``kafka.*`` options.
OWNED = {
    "transactional.id": "the sink makes one per (sinkId, task partition); set 'sinkId'",
    "enable.idempotence": "the sink always enables it",
    "key.serializer": "a cast of the key column to string or binary",
    "value.serializer": "a cast of the value column to string or binary",
    "interceptor.classes": "nothing (Java only)",
}

#: Producer defaults, overridable with ``kafka.*``: batches of a few ms, the
#: Java client's partitioner (so keys land where Spark's Kafka sink puts them),
#: and a transaction timeout that bounds one task's transaction.
DEFAULTS = {
    "linger.ms": "5",
    "partitioner": "murmur2_random",
    "transaction.timeout.ms": "300000",
    "compression.type": "none",
}


@dataclass(frozen=True)
class KafkaSinkSettings:
    """Every option of one Kafka sink, parsed; pickled to executors."""

    kafka: dict[str, str]
    topic: str | None
    include_headers: bool
    marker_topic: str | None

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]

    def producer_config(self) -> dict[str, str]:
        return {**DEFAULTS, **self.kafka}

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "KafkaSinkSettings":
        raw = OPTIONS.normalise(options)
        kafka = OPTIONS.passthrough(options, "kafka.")
        kafka = {k.lower() if k.lower() == "bootstrap.servers" else k: v for k, v in kafka.items()}
        if not kafka.get("bootstrap.servers"):
            raise OptionError(
                "option 'kafka.bootstrap.servers' is required (host:port[,host:port...])")
        for key in kafka:
            if key.lower() in OWNED:
                raise OptionError(f"option 'kafka.{key}' is not supported by the eoskit-kafka "
                                  f"sink: {OWNED[key.lower()]}")
        topic = TOPIC.read(raw)
        return cls(kafka=kafka, topic=topic, include_headers=INCLUDE_HEADERS.read(raw),
                   marker_topic=MARKER_TOPIC.read(raw) or topic)
