"""The Kafka source's options, declared once and checked when the source is created.

Names, meanings and defaults are those of Spark's built-in Kafka source, so
that switching is a change of format string. ``kafka.*`` options go to
confluent-kafka (librdkafka) with the prefix removed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from eoskit.connectors.kafka.client import OWNED_SETTINGS
from eoskit.connectors.kafka.offsets import (
    PartitionOffsets,
    TopicPartition,
    parse_offsets_option,
)
from eoskit.connectors.options import (
    Option,
    OptionError,
    OptionSet,
    parse_bool,
    parse_positive_int,
    parse_str,
)

SUBSCRIBE = Option("subscribe", parse_str, None, "Comma-separated topics to read.")
SUBSCRIBE_PATTERN = Option(
    "subscribePattern", parse_str, None,
    "Java-style regular expression; every topic whose whole name matches is read, "
    "including topics created while the query runs.",
)
ASSIGN = Option(
    "assign", parse_str, None,
    'JSON of the exact partitions to read, e.g. {"orders":[0,1]}.',
)
STARTING_OFFSETS = Option(
    "startingOffsets", parse_str, None,
    "Where a new query starts: earliest, latest, or JSON per partition (-2 earliest, "
    "-1 latest). Default latest for streaming, earliest for batch. A restarted query "
    "always continues from its checkpoint.",
)
ENDING_OFFSETS = Option(
    "endingOffsets", parse_str, "latest",
    "Batch reads only: latest or JSON per partition (-1 latest).",
)
MAX_OFFSETS_PER_TRIGGER = Option(
    "maxOffsetsPerTrigger", parse_positive_int, None,
    "At most this many offsets per micro-batch, shared across partitions in "
    "proportion to their backlog. Also respected by availableNow triggers.",
)
MIN_PARTITIONS = Option(
    "minPartitions", parse_positive_int, None,
    "Split large offset ranges so that a batch has at least this many tasks.",
)
FAIL_ON_DATA_LOSS = Option(
    "failOnDataLoss", parse_bool, True,
    "Fail the query when offsets it should read are gone (retention, a deleted or "
    "recreated topic). false logs what was skipped and goes on.",
)
INCLUDE_HEADERS = Option("includeHeaders", parse_bool, False, "Add the headers column.")
POLL_TIMEOUT_MS = Option(
    "kafkaConsumer.pollTimeoutMs", parse_positive_int, 120_000,
    "How long a task waits for records it knows exist before failing.",
)
COMMIT_GROUP = Option(
    "commitOffsetsToGroup", parse_str, None,
    "Consumer group to which each completed batch's end offsets are committed, so "
    "that lag tools see progress. Recovery never reads them: Spark's checkpoint "
    "is the only source of truth.",
)

OPTIONS = OptionSet(
    (
        SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN, STARTING_OFFSETS, ENDING_OFFSETS,
        MAX_OFFSETS_PER_TRIGGER, MIN_PARTITIONS, FAIL_ON_DATA_LOSS, INCLUDE_HEADERS,
        POLL_TIMEOUT_MS, COMMIT_GROUP,
    ),
    passthrough_prefixes=("kafka.",),
    owner="the eoskit-kafka source",
)


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions the source reads: exactly one of the three ways."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def select(self, broker_topics: Mapping[str, list[int]]) -> list[TopicPartition]:
        """The partitions to read now; topics that do not exist yet have none."""
        if self.assigned:
            return sorted(self.assigned)
        if self.pattern is not None:
            regex = re.compile(self.pattern)
            names = [
                t for t in broker_topics
                if regex.fullmatch(t) and not t.startswith("__")
            ]
        else:
            names = [t for t in self.topics if t in broker_topics]
        return sorted((t, p) for t in names for p in broker_topics[t])

    def describe(self) -> str:
        if self.assigned:
            return "assign=" + json.dumps(_assign_json(self.assigned))
        if self.pattern is not None:
            return f"subscribePattern={self.pattern}"
        return "subscribe=" + ",".join(self.topics)


def _assign_json(tps: tuple[TopicPartition, ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return out


def _parse_subscription(raw: Mapping[str, str]) -> Subscription:
    given = [o.name for o in (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN) if o.name.lower() in raw]
    if len(given) != 1:
        what = "none was" if not given else f"{', '.join(given)} were"
        raise OptionError(
            "the eoskit-kafka source needs exactly one of the options 'subscribe', "
            f"'subscribePattern' or 'assign'; {what} given"
        )
    if SUBSCRIBE.name.lower() in raw:
        topics = tuple(t.strip() for t in SUBSCRIBE.read(raw).split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
        return Subscription(topics=topics)
    if SUBSCRIBE_PATTERN.name.lower() in raw:
        pattern = SUBSCRIBE_PATTERN.read(raw)
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' = {pattern!r}: {exc}") from None
        return Subscription(pattern=pattern)
    text = ASSIGN.read(raw)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option 'assign' is not valid JSON ({exc.msg}): {text!r}") from None
    if not isinstance(data, dict) or not data or not all(
        isinstance(v, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in v)
        for v in data.values()
    ):
        raise OptionError(
            f'option \'assign\' must look like {{"topic":[0,1]}}, got {text!r}'
        )
    return Subscription(assigned=tuple((t, p) for t, ps in data.items() for p in ps))


@dataclass(frozen=True, eq=False)
class KafkaSourceSettings:
    """Every option of one source, parsed; pickled to executors with the source."""

    subscription: Subscription
    kafka: dict[str, str]
    starting_offsets: str | PartitionOffsets | None
    ending_offsets: str | PartitionOffsets
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    commit_group: str | None

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "KafkaSourceSettings":
        raw = OPTIONS.normalise(options)
        kafka = OPTIONS.passthrough(options, "kafka.")
        kafka = {k.lower() if k.lower() == "bootstrap.servers" else k: v for k, v in kafka.items()}
        if not kafka.get("bootstrap.servers"):
            raise OptionError(
                "option 'kafka.bootstrap.servers' is required (host:port[,host:port...])"
            )
        for key in kafka:
            if key.lower() in OWNED_SETTINGS:
                raise OptionError(
                    f"option 'kafka.{key}' is not supported by the eoskit-kafka source; "
                    f"use {OWNED_SETTINGS[key.lower()]} instead"
                )
        level = kafka.get("isolation.level", "read_committed")
        if level not in ("read_committed", "read_uncommitted"):
            raise OptionError(
                f"option 'kafka.isolation.level' = {level!r}: expected read_committed "
                "or read_uncommitted"
            )
        starting = STARTING_OFFSETS.read(raw)
        ending = ENDING_OFFSETS.read(raw)
        parsed_ending = parse_offsets_option(ending, ENDING_OFFSETS.name)
        if parsed_ending == "earliest" or (
            isinstance(parsed_ending, dict) and -2 in parsed_ending.values()
        ):
            raise OptionError("option 'endingOffsets' cannot be earliest (-2)")
        return cls(
            subscription=_parse_subscription(raw),
            kafka=kafka,
            starting_offsets=(
                None if starting is None else parse_offsets_option(starting, STARTING_OFFSETS.name)
            ),
            ending_offsets=parsed_ending,
            max_offsets_per_trigger=MAX_OFFSETS_PER_TRIGGER.read(raw),
            min_partitions=MIN_PARTITIONS.read(raw),
            fail_on_data_loss=FAIL_ON_DATA_LOSS.read(raw),
            include_headers=INCLUDE_HEADERS.read(raw),
            poll_timeout_ms=POLL_TIMEOUT_MS.read(raw),
            commit_group=COMMIT_GROUP.read(raw),
        )

