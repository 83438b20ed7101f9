"""The Kafka source's options, declared once and checked when the source is created.

Names, meanings and defaults are those of Spark's built-in Kafka source, so
that switching is a change of format string. ``kafka.*`` options go to
confluent-kafka (librdkafka) with the prefix removed, the Java client's
settings translated or refused by name (:mod:`.security`).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from eoskit.connectors.kafka import java_regex, security
from eoskit.connectors.kafka.value_options import (
    METADATA_COLUMNS,
    VALUE_FORMAT,
    VALUE_MODE,
    VALUE_TIME_ZONE,
    metadata_columns,
    value_options_are_whole,
)
from eoskit.connectors.kafka.broadcast_options import (
    BROADCAST_FOLD,
    BROADCAST_MAX_BYTES,
    BROADCAST_NAME,
    BROADCAST_STALE_AFTER,
    BROADCAST_TOPIC,
    DEFAULT_STALE_AFTER_S,
    broadcast_is_whole,
)
from eoskit.connectors.kafka.client import OWNED_SETTINGS, redact
from eoskit.connectors.kafka.offsets import (
    EARLIEST,
    LATEST,
    NO_MATCH_ERROR,
    NO_MATCH_LATEST,
    PartitionOffsets,
    Timestamps,
    TopicPartition,
    from_json_dict,
    parse_offsets_option,
)
from eoskit.core.options import (
    Option,
    OptionError,
    OptionSet,
    Reading,
    parse_bool,
    parse_choice,
    parse_duration_ms as parse_duration_s,
    parse_positive_int,
    parse_str,
    setting,
)

log = logging.getLogger(__name__)



def parse_timestamp(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError("expected milliseconds since the epoch (a whole number >= 0)")
    return value

SUBSCRIBE = Option("subscribe", parse_str, None, "Comma-separated topics to read.")
SUBSCRIBE_PATTERN = Option(
    "subscribePattern", parse_str, None,
    "Java regular expression (java.util.regex, as in Spark: POSIX classes such as "
    "\\p{Alpha} and \\Q...\\E too; class intersection && is refused); every topic whose "
    "whole name matches is read, including topics created while the query runs.",
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
STARTING_TIMESTAMP = Option(
    "startingTimestamp", parse_timestamp, None,
    "Start every partition at its first record with a timestamp at or after this "
    "one (ms since the epoch). Takes precedence over startingOffsetsByTimestamp "
    "and startingOffsets; only for a new query, as startingOffsets.",
)
STARTING_OFFSETS_BY_TIMESTAMP = Option(
    "startingOffsetsByTimestamp", parse_str, None,
    'Start by timestamp per partition, JSON such as {"orders":{"0":1700000000000}}; '
    "every partition read must be given. Takes precedence over startingOffsets.",
)
ENDING_OFFSETS = Option(
    "endingOffsets", parse_str, None,
    "Batch reads only: latest (the default) or JSON per partition (-1 latest).",
)
ENDING_TIMESTAMP = Option(
    "endingTimestamp", parse_timestamp, None,
    "Batch reads only: stop every partition before its first record with a "
    "timestamp at or after this one (ms since the epoch; no such record: read to "
    "the latest). Takes precedence over endingOffsetsByTimestamp and endingOffsets.",
)
ENDING_OFFSETS_BY_TIMESTAMP = Option(
    "endingOffsetsByTimestamp", parse_str, None,
    "Batch reads only: endingTimestamp per partition, JSON as "
    "startingOffsetsByTimestamp. Takes precedence over endingOffsets.",
)
STOP_AT_OFFSETS = Option(
    "stopAtOffsets", parse_str, None,
    "Streaming reads only (eoskit's, as Flink's bounded KafkaSource): JSON offsets "
    "per partition, {\"orders\":{\"0\":1200,\"1\":1180}}; the stream reads each "
    "partition up to that offset (not including it), no further, and no partition it "
    "does not name. A run with --until-caught-up ends there. eoskit chaos pins a job's "
    "input with it.",
)
MAX_OFFSETS_PER_TRIGGER = Option(
    "maxOffsetsPerTrigger", parse_positive_int, None,
    "About this many offsets per micro-batch, shared across partitions in "
    "proportion to their backlog, as Spark's: a share below one offset is "
    "rounded up to one, so a batch can exceed it by up to one offset per partition. "
    "Also respected by availableNow triggers.",
)
MIN_OFFSETS_PER_TRIGGER = Option(
    "minOffsetsPerTrigger", parse_positive_int, None,
    "Skip triggers until at least this many offsets are available, or until "
    "maxTriggerDelay has passed. availableNow triggers read everything without waiting.",
)
MAX_TRIGGER_DELAY = Option(
    "maxTriggerDelay", parse_duration_s, None,
    "With minOffsetsPerTrigger: the longest a trigger is skipped for lack of "
    "offsets (a duration: 30s, 15m; a bare number is ms; default 15m).",
)
DEFAULT_MAX_TRIGGER_DELAY_S = parse_duration_s("15m")
MIN_PAUSE_BETWEEN_BATCHES = Option(
    "minPauseBetweenBatches", parse_duration_s, None,
    "eoskit only (Flink's minimum pause between checkpoints): skip triggers until this "
    "long has passed since the last batch was committed, as read from the commit log "
    "under 'checkpointLocation' (a duration: 30s, 500ms; a bare number is ms). availableNow triggers do not "
    "wait.",
)
CHECKPOINT_LOCATION = Option(
    "checkpointLocation", parse_str, None,
    "With minPauseBetweenBatches or broadcastTopic: the query's checkpoint location, as given to "
    "writeStream (`eoskit run` sets both from --min-pause; a Pipeline sets it for a broadcast).",
)
COMMIT_GROUP = Option(
    "commitOffsetsToGroup", parse_str, None,
    "Consumer group to which each completed batch's end offsets are committed, so "
    "that lag tools see progress. Recovery never reads them: Spark's checkpoint "
    "is the only source of truth.",
)
GROUP_ID_PREFIX = Option(
    "groupIdPrefix", parse_str, None,
    "Prefix of the group.id of the source's consumers (a unique suffix is added "
    "per query), e.g. to match a Kafka ACL. Ignored when kafka.group.id is given.",
)

#: Options of Spark's built-in Kafka source that eoskit-kafka does not
#: implement, with what to do instead: refused by name, never mistaken for typos.
SPARK_ONLY = {
    "fetchOffset.numRetries": (
        "offsets are asked of the broker through librdkafka, which retries a failed "
        "request by itself until kafka.request.timeout.ms; remove the option"
    ),
    "fetchOffset.retryIntervalMs": (
        "librdkafka paces its own retries (kafka.retry.backoff.ms); remove the option"
    ),
    "topic": (
        "it is an option of Spark's Kafka sink (writes); to read a topic, use "
        "'subscribe', 'subscribePattern' or 'assign'"
    ),
}

#: Options that only a batch read (spark.read) accepts.
BATCH_ONLY = (ENDING_OFFSETS, ENDING_TIMESTAMP, ENDING_OFFSETS_BY_TIMESTAMP)
#: Options that only a streaming read (spark.readStream) uses.
STREAM_ONLY = (MAX_OFFSETS_PER_TRIGGER, MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY,
               MIN_PAUSE_BETWEEN_BATCHES, STOP_AT_OFFSETS)


class TopicNotFoundError(LookupError):
    """A topic or partition named by ``subscribe`` or ``assign`` does not exist."""


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions the source reads: exactly one of the three ways."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def select(self, broker_topics: Mapping[str, list[int]]) -> list[TopicPartition]:
        """The partitions to read now; topics and partitions that do not exist have none."""
        if self.assigned:
            return sorted(
                (t, p) for t, p in self.assigned if p in broker_topics.get(t, ())
            )
        if self.pattern is not None:
            regex = re.compile(java_regex.to_python(self.pattern))
            names = [
                t for t in broker_topics
                if regex.fullmatch(t) and not t.startswith("__")
            ]
        else:
            names = [t for t in self.topics if t in broker_topics]
        return sorted((t, p) for t in names for p in broker_topics[t])

    def require_present(self, broker_topics: Mapping[str, list[int]], bootstrap: str) -> None:
        """Fail, naming them, if named topics or partitions do not exist.

        Checked when a query starts or a batch read is planned, as Spark's
        source does; a topic deleted later is data loss (``failOnDataLoss``).
        A pattern that matches nothing is not an error: it reads nothing.
        """
        where = f"at kafka.bootstrap.servers={bootstrap!r}"
        hint = ("create it first (eoskit-kafka never creates topics), or use "
                "subscribePattern to read topics as they appear")
        if self.topics:
            missing = [t for t in self.topics if t not in broker_topics]
            if missing:
                raise TopicNotFoundError(
                    f"option 'subscribe' names {_topics(missing)} that {_do(missing)} "
                    f"not exist {where}; {hint}"
                )
        if self.assigned:
            missing = sorted({t for t, _ in self.assigned if t not in broker_topics})
            if missing:
                raise TopicNotFoundError(
                    f"option 'assign' names {_topics(missing)} that {_do(missing)} "
                    f"not exist {where}; {hint}"
                )
            absent = sorted(tp for tp in self.assigned if tp[1] not in broker_topics[tp[0]])
            if absent:
                have = "; ".join(
                    f"{t} has partitions {_span(broker_topics[t])}"
                    for t in sorted({t for t, _ in absent})
                )
                raise TopicNotFoundError(
                    "option 'assign' names partitions that do not exist "
                    f"{where}: {', '.join(f'{t}-{p}' for t, p in absent)} ({have})"
                )

    def describe(self) -> str:
        if self.assigned:
            return "assign=" + json.dumps(_assign_json(self.assigned))
        if self.pattern is not None:
            return f"subscribePattern={self.pattern}"
        return "subscribe=" + ",".join(self.topics)


def _topics(names: list[str]) -> str:
    quoted = ", ".join(repr(n) for n in names)
    return f"topic {quoted}" if len(names) == 1 else f"topics {quoted}"


def _do(names: list[str]) -> str:
    return "does" if len(names) == 1 else "do"


def _span(partitions: list[int]) -> str:
    if not partitions:
        return "none"
    if partitions == list(range(partitions[0], partitions[-1] + 1)):
        return f"{partitions[0]}-{partitions[-1]}" if len(partitions) > 1 else str(partitions[0])
    return ",".join(map(str, partitions))


def _parse_timestamps(
    raw: Mapping[str, str], single: Option[int], by_partition: Option[str]
) -> Timestamps | None:
    """Spark's precedence: the single timestamp, then the per-partition JSON."""
    everywhere = single.read(raw)
    if everywhere is not None:
        return Timestamps(option=single.name, everywhere=everywhere)
    text = by_partition.read(raw)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"option '{by_partition.name}' is not valid JSON ({exc.msg}): {text!r}"
        ) from None
    stamps = from_json_dict(data, what=f"option '{by_partition.name}'")
    negative = sorted(tp for tp, ts in stamps.items() if ts < 0)
    if negative:
        raise OptionError(
            f"option '{by_partition.name}': timestamps are milliseconds since the epoch "
            f"(>= 0); got {', '.join(f'{t}-{p}={stamps[(t, p)]}' for t, p in negative)}"
        )
    if not stamps:
        raise OptionError(f"option '{by_partition.name}' names no partition")
    return Timestamps(option=by_partition.name, per_partition=stamps)


def _assign_json(tps: tuple[TopicPartition, ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return out


# -- fields derived from more than their own option (each runs on the driver, where
# -- the source is made; an OptionError names the option at fault) -------------------


def _subscription(_: None, reading: Reading) -> Subscription:
    """Exactly one of ``subscribe``, ``subscribePattern`` and ``assign``, read."""
    raw = reading.raw
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
            re.compile(java_regex.to_python(pattern))
        except (re.error, java_regex.JavaRegexError) as exc:
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


def _position(
    raw: Mapping[str, str], offsets: Option[str], single: Option[int], by_partition: Option[str]
) -> str | PartitionOffsets | Timestamps | None:
    """Where reading starts or ends, by Spark's precedence: the single
    timestamp, the per-partition timestamps, then the offsets option."""
    stamps = _parse_timestamps(raw, single, by_partition)
    if stamps is not None:
        return stamps
    text = offsets.read(raw)
    return None if text is None else parse_offsets_option(text, offsets.name)


def _starting(_: None, reading: Reading) -> str | PartitionOffsets | Timestamps | None:
    return _position(reading.raw, STARTING_OFFSETS, STARTING_TIMESTAMP,
                     STARTING_OFFSETS_BY_TIMESTAMP)


def _ending(_: None, reading: Reading) -> str | PartitionOffsets | Timestamps | None:
    ending = _position(reading.raw, ENDING_OFFSETS, ENDING_TIMESTAMP, ENDING_OFFSETS_BY_TIMESTAMP)
    if ending == "earliest" or (isinstance(ending, dict) and EARLIEST in ending.values()):
        raise OptionError("option 'endingOffsets' cannot be earliest (-2)")
    return ending


def _stop_at(text: str, _: Reading) -> PartitionOffsets:
    stop_at = parse_offsets_option(text, STOP_AT_OFFSETS.name)
    if not isinstance(stop_at, dict) or any(o < 0 for o in stop_at.values()):
        raise OptionError("option 'stopAtOffsets': give an offset (>= 0) for every "
                          "partition to read, as JSON: {\"topic\":{\"0\":1200}}")
    return stop_at


def _consumer(_: None, reading: Reading) -> dict[str, str]:
    """The ``kafka.*`` options as librdkafka's configuration: the Java
    client's settings translated (:mod:`.security`), those the source owns
    refused by name, and ``group.id`` made from ``groupIdPrefix``."""
    kafka = OPTIONS.passthrough(reading.given, "kafka.")
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
    kafka = security.translate(kafka, "source")
    level = kafka.get("isolation.level", "read_committed")
    if level not in ("read_committed", "read_uncommitted"):
        raise OptionError(
            f"option 'kafka.isolation.level' = {level!r}: expected read_committed "
            "or read_uncommitted"
        )
    prefix = GROUP_ID_PREFIX.read(reading.raw)
    if prefix is not None:
        if any(k.lower() == "group.id" for k in kafka):
            log.warning("option groupIdPrefix is ignored: kafka.group.id is given")
        else:
            # One group per query, as Spark: readers of two queries never share one.
            kafka["group.id"] = f"{prefix}-{uuid.uuid4()}"
    return kafka


# -- rules that span options (after every field is read) ------------------------------


def min_offsets_within_max(settings: "KafkaSourceSettings", _: Reading) -> None:
    low, high = settings.min_offsets_per_trigger, settings.max_offsets_per_trigger
    if low is not None and high is not None and low > high:
        raise OptionError(f"option '{MIN_OFFSETS_PER_TRIGGER.name}' = {low} is higher than "
                          f"'{MAX_OFFSETS_PER_TRIGGER.name}' = {high}")


def pause_needs_a_checkpoint(settings: "KafkaSourceSettings", _: Reading) -> None:
    if settings.min_pause_s and not settings.checkpoint_location:
        raise OptionError(
            f"option '{MIN_PAUSE_BETWEEN_BATCHES.name}' needs the option "
            f"'{CHECKPOINT_LOCATION.name}' (the query's, as given to writeStream): the pause "
            "is measured from the last batch's entry in its commit log"
        )


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class KafkaSourceSettings:
    """Every option of one source, parsed; pickled to executors with the
    source. Each field is declared by the option it is read from
    (``setting``): ``OPTIONS`` and ``parse`` are derived from them.

    ``kafka`` is librdkafka's configuration, the Java client's settings
    already translated (:mod:`.security`); its repr never shows a secret.
    """

    subscription: Subscription = setting(derive=_subscription,
                                         reads=(SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN))
    #: earliest / latest / JSON offsets / timestamps; None: the read's default
    #: (latest for streaming, earliest for batch)
    starting_offsets: str | PartitionOffsets | Timestamps | None = setting(
        derive=_starting, reads=(STARTING_OFFSETS, STARTING_TIMESTAMP, STARTING_OFFSETS_BY_TIMESTAMP))
    starting_no_match: str = setting(
        Option("startingOffsetsByTimestampStrategy", parse_choice(NO_MATCH_ERROR, NO_MATCH_LATEST),
               NO_MATCH_ERROR,
               "When a starting timestamp is later than every record of a partition: error "
               "fails the query naming the partition; latest starts that partition at its "
               "latest offset."))
    #: None: latest
    ending_offsets: str | PartitionOffsets | Timestamps | None = setting(
        derive=_ending, reads=(ENDING_OFFSETS, ENDING_TIMESTAMP, ENDING_OFFSETS_BY_TIMESTAMP))
    #: stopAtOffsets: where a stream ends, per partition; None: it does not
    stop_at: PartitionOffsets | None = setting(STOP_AT_OFFSETS, derive=_stop_at, default=None)
    max_offsets_per_trigger: int | None = setting(MAX_OFFSETS_PER_TRIGGER)
    min_offsets_per_trigger: int | None = setting(MIN_OFFSETS_PER_TRIGGER)
    max_trigger_delay_s: float = setting(MAX_TRIGGER_DELAY, default=DEFAULT_MAX_TRIGGER_DELAY_S)
    #: minPauseBetweenBatches (None: no pause), and the checkpoint whose
    #: commit log it is measured from
    min_pause_s: float | None = setting(MIN_PAUSE_BETWEEN_BATCHES,
                                        derive=lambda pause, _: pause or None, default=None)
    checkpoint_location: str | None = setting(CHECKPOINT_LOCATION)
    min_partitions: int | None = setting(
        Option("minPartitions", parse_positive_int, None,
               "Split large offset ranges so that a batch has at least this many tasks."))
    max_records_per_partition: int | None = setting(
        Option("maxRecordsPerPartition", parse_positive_int, None,
               "Split offset ranges so that no task reads more than this many offsets."))
    fail_on_data_loss: bool = setting(
        Option("failOnDataLoss", parse_bool, True,
               "Fail the query when offsets it should read are gone (retention, a deleted or "
               "recreated topic). false logs what was skipped and goes on."))
    include_headers: bool = setting(
        Option("includeHeaders", parse_bool, False, "Add the headers column."))
    poll_timeout_ms: int = setting(
        Option("kafkaConsumer.pollTimeoutMs", parse_positive_int, 120_000,
               "How long a task waits for records it knows exist before failing."))
    #: broadcastTopic (None: no broadcast state), its name, fold and size limit
    broadcast_topic: str | None = setting(BROADCAST_TOPIC)
    broadcast_name: str = setting(BROADCAST_NAME, derive=lambda name, reading: name or (
        reading.fields["broadcast_topic"] or ""))
    broadcast_fold: str = setting(BROADCAST_FOLD)
    broadcast_max_bytes: int = setting(BROADCAST_MAX_BYTES)
    broadcast_stale_after_s: float = setting(BROADCAST_STALE_AFTER, default=DEFAULT_STALE_AFTER_S)
    #: value.format (None: the value stays bytes, Spark's Kafka columns)
    value_format: str | None = setting(VALUE_FORMAT)
    value_mode: str = setting(VALUE_MODE)
    value_time_zone: str = setting(VALUE_TIME_ZONE)
    metadata_columns: tuple[str, ...] = setting(METADATA_COLUMNS, derive=lambda text, _: metadata_columns(text),
                                                default=())
    commit_group: str | None = setting(COMMIT_GROUP)
    #: eoskit.chain: set by a Pipeline whose transform is chained (connectors/spark/chain.py)
    chain: str | None = setting(Option(
        "eoskit.chain", parse_str, None,
        "Set by a Pipeline, not by hand: the chained transform and sink the source's tasks "
        "write to (the setting operator_chaining; docs/design/chaining.md)."))
    #: eoskit.stopGate: set by ``eoskit run`` (core/stop_gate.py)
    stop_gate: str | None = setting(Option(
        "eoskit.stopGate", parse_str, None,
        "Set by eoskit run, not by hand: the directory of the gate that holds the next batch's "
        "planning while a stop waits for a batch boundary (core/stop_gate.py)."))
    kafka: dict[str, str] = setting(derive=_consumer, reads=(GROUP_ID_PREFIX, *security.OPTIONS))
    #: names of the options given, as the user spelled them in Spark's casing
    given: frozenset[str] = setting(
        derive=lambda _, reading: frozenset(o.name for o in OPTIONS.options
                                            if o.name.lower() in reading.raw),
        default=frozenset())

    CHECKS: ClassVar = (min_offsets_within_max, pause_needs_a_checkpoint, broadcast_is_whole,
                        value_options_are_whole)

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka["bootstrap.servers"]

    def __repr__(self) -> str:
        return (f"KafkaSourceSettings({self.subscription.describe()}, "
                f"kafka={redact(self.kafka)!r})")

    def check_batch(self) -> None:
        """Refuse what a batch read (spark.read) cannot do, naming the option."""
        start = self.starting_offsets
        if start == "latest" or (isinstance(start, dict) and LATEST in start.values()):
            raise OptionError(
                "option 'startingOffsets' cannot be latest (or -1) for a batch read "
                "(spark.read): it would read nothing. Use earliest, offsets, or "
                "startingTimestamp; latest is for streaming queries."
            )
        if self.broadcast_topic is not None:
            raise OptionError(
                f"option '{BROADCAST_TOPIC.name}' applies to streaming reads (spark.readStream) "
                "only: a batch read has no checkpoint to pin the broadcast state in")
        ignored = [o.name for o in STREAM_ONLY if o.name in self.given]
        if ignored:
            log.warning("option(s) %s apply to streaming reads only; ignored by this batch read",
                        ", ".join(ignored))

    def check_stream(self) -> None:
        """Refuse what a streaming read (spark.readStream) cannot do, naming the option."""
        if self.broadcast_topic is not None and not self.checkpoint_location:
            # Here, not in CHECKS: a Pipeline's source is made before its checkpoint is known.
            raise OptionError(
                f"option '{BROADCAST_TOPIC.name}' needs the option '{CHECKPOINT_LOCATION.name}' (the "
                "query's, as given to writeStream): the broadcast state is kept beside the checkpoint")
        given = [o.name for o in BATCH_ONLY if o.name in self.given]
        if given:
            raise OptionError(
                f"option '{given[0]}' applies to batch reads (spark.read) only: a "
                "streaming query has no end. Remove it, or use trigger(availableNow=True) "
                "to stop at the data present when the query starts."
            )

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "KafkaSourceSettings":
        """The options as settings (``OPTIONS.read``), on the driver, where the
        source is made: Spark's options eoskit lacks are refused by name
        (``SPARK_ONLY``), and an ``OptionError`` naming the option fails the
        query before it starts."""
        return OPTIONS.read(options, "the eoskit-kafka source")


OPTIONS = OptionSet.of(
    KafkaSourceSettings,
    passthrough_prefixes=("kafka.",),
    owner="the eoskit-kafka source",
    refused=SPARK_ONLY,
    refused_from="Spark Kafka source",
)
