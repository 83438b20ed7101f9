"""Kafka offsets as Spark checkpoint state: pure functions, no client.

The source's state is what Spark writes to its offset log before any task of
a batch runs, in the same JSON shape as Spark's built-in Kafka source:
``{"topic": {"0": 42, "1": 17}}``. Offsets are positions, not counts:
transaction markers and aborted records leave gaps, so an end offset is
"read everything below this position", never "read this many records".

Keys are written in a fixed order (topics sorted, partitions numerically),
because Spark decides whether a trigger has new data by comparing offset
JSON, and a replayed batch must plan exactly the same ranges.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from eoskit.connectors.source_state import RESERVED_PREFIX, split_reserved
from eoskit.core.options import OptionError

#: Sentinels of Spark's ``startingOffsets`` / ``endingOffsets`` JSON.
LATEST = -1
EARLIEST = -2

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records of one topic-partition in ``[start, end)``, read by one task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True)
class DataLoss:
    """Offsets a query expected to read that the broker no longer has."""

    topic: str
    partition: int
    message: str


#: Keys of the offset JSON that are not topics (``RESERVED_PREFIX``,
#: ``split_reserved``: declared once for every source plug-in in
#: ``eoskit.connectors.source_state``). Kafka topic names are
#: ``[a-zA-Z0-9._-]``, so none starts with ``@``; an entry under such a key
#: is the source's own state for the batch (the broadcast pin), written
#: after the topics and never read as one.
BROADCAST_KEY = "@broadcast"


def to_json_dict(offsets: Mapping[TopicPartition, int],
                 reserved: Mapping[str, object] | None = None) -> dict[str, object]:
    """Spark's offset JSON shape, in a fixed order (topics sorted, partitions
    numerically), then the ``reserved`` entries in the order given: Spark
    compares the JSON's text, so the same state must give the same bytes."""
    result: dict[str, object] = {}
    for topic, partition in sorted(offsets):
        result.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])  # type: ignore[index]
    for key, value in (reserved or {}).items():
        if not key.startswith(RESERVED_PREFIX):
            raise ValueError(f"reserved offset entry {key!r} must start with {RESERVED_PREFIX!r}")
        result[key] = value
    return result


def to_json(offsets: Mapping[TopicPartition, int]) -> str:
    return json.dumps(to_json_dict(offsets), separators=(",", ":"))


def from_json_dict(data: object, what: str = "offsets") -> PartitionOffsets:
    """Read Spark's offset JSON shape back, refusing anything else by name.
    The ``@`` entries (``split_reserved``) are not offsets and are left out."""
    if not isinstance(data, Mapping):
        raise OptionError(f"{what}: expected a JSON object of topics, got {data!r}")
    offsets: PartitionOffsets = {}
    for topic, partitions in split_reserved(data)[0].items():
        if not isinstance(partitions, Mapping):
            raise OptionError(
                f"{what}: topic {topic!r} must map partition numbers to offsets, "
                f"got {partitions!r}"
            )
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError):
                raise OptionError(
                    f"{what}: partition {partition!r} of topic {topic!r} is not a number"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise OptionError(
                    f"{what}: offset of {topic}-{partition} must be a whole number, "
                    f"got {offset!r}"
                )
            offsets[(str(topic), number)] = offset
    return offsets


def parse_offsets_option(text: str, option: str) -> str | PartitionOffsets:
    """``earliest``, ``latest`` or a per-partition JSON object (-2 earliest, -1 latest)."""
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return stripped.lower()
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"option '{option}' is neither earliest, latest nor valid JSON "
            f"({exc.msg} at character {exc.pos}): {text!r}"
        ) from None
    offsets = from_json_dict(data, what=f"option '{option}'")
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(
                f"option '{option}': offset {offset} of {topic}-{partition} is invalid "
                f"(use -2 for earliest, -1 for latest, or a position >= 0)"
            )
    return offsets


@dataclass(frozen=True)
class Timestamps:
    """A position given by record timestamps (ms since the epoch), as Spark's
    ``startingTimestamp`` / ``startingOffsetsByTimestamp`` (and ``ending*``).

    Either one timestamp for every partition read (``everywhere``) or one per
    partition (``per_partition``); ``option`` names the option it came from.
    """

    option: str
    everywhere: int | None = None
    per_partition: Mapping[TopicPartition, int] = field(default_factory=dict)

    def request(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The timestamp to look up for each partition read.

        Per-partition timestamps must name every partition read and nothing
        else, as in Spark: a partition left out would have no defined start.
        """
        partitions = sorted(partitions)
        if self.everywhere is not None:
            return {tp: self.everywhere for tp in partitions}
        unknown = sorted(set(self.per_partition) - set(partitions))
        if unknown:
            raise OptionError(
                f"option '{self.option}' names partitions that do not exist: {_names(unknown)}"
            )
        missing = [tp for tp in partitions if tp not in self.per_partition]
        if missing:
            raise OptionError(
                f"option '{self.option}' gives no timestamp for {_names(missing)}; "
                "give one for every partition read (or use the single-timestamp option)"
            )
        return {tp: self.per_partition[tp] for tp in partitions}


#: What a start position by timestamp does where no record is that late
#: (Spark's ``startingOffsetsByTimestampStrategy``).
NO_MATCH_ERROR = "error"
NO_MATCH_LATEST = "latest"


def resolve_timestamps(
    spec: Timestamps,
    requested: Mapping[TopicPartition, int],
    found: Mapping[TopicPartition, int | None],
    latest: Mapping[TopicPartition, int],
    is_start: bool,
    no_match: str = NO_MATCH_ERROR,
) -> PartitionOffsets:
    """Offsets for a timestamp position, given what the broker answered.

    ``found`` holds, per partition, the first offset whose timestamp is at or
    after the requested one, or None when every record is older. An end
    without a match is the latest offset (read everything); a start without
    one fails unless ``no_match`` is ``latest`` (Spark's default is to fail).
    """
    resolved: PartitionOffsets = {}
    unmatched: list[TopicPartition] = []
    for tp in sorted(requested):
        offset = found.get(tp)
        if offset is None:
            if is_start and no_match == NO_MATCH_ERROR:
                unmatched.append(tp)
                continue
            offset = latest[tp]
        resolved[tp] = offset
    if unmatched:
        shown = ", ".join(f"{t}-{p} (timestamp {requested[(t, p)]})" for t, p in unmatched)
        raise OptionError(
            f"option '{spec.option}': no record at or after the given timestamp in "
            f"{shown}. Set startingOffsetsByTimestampStrategy=latest to start those "
            "partitions at their latest offset instead."
        )
    return resolved


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def resolve_spec(
    spec: str | PartitionOffsets,
    partitions: Iterable[TopicPartition],
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    option: str,
    default_for_unlisted: str,
) -> PartitionOffsets:
    """Turn ``earliest``/``latest``/JSON into concrete positions for ``partitions``.

    A JSON spec that names a partition the topic does not have is refused:
    it is almost always a typo, and silently ignoring it would read nothing.
    """
    partitions = sorted(partitions)
    if isinstance(spec, str):
        chosen = earliest if spec == "earliest" else latest
        return {tp: chosen[tp] for tp in partitions}
    unknown = sorted(set(spec) - set(partitions))
    if unknown:
        raise OptionError(
            f"option '{option}' names partitions that do not exist: {_names(unknown)}"
        )
    resolved: PartitionOffsets = {}
    for tp in partitions:
        offset = spec.get(tp)
        if offset is None:
            offset = EARLIEST if default_for_unlisted == "earliest" else LATEST
        if offset == EARLIEST:
            resolved[tp] = earliest[tp]
        elif offset == LATEST:
            resolved[tp] = latest[tp]
        else:
            resolved[tp] = offset
    return resolved


def rate_limit(
    start: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    max_offsets: int | None,
) -> PartitionOffsets:
    """End offsets that advance at most ``max_offsets`` positions in all, shared in
    proportion to each partition's backlog (as Spark's built-in source does).

    Partitions missing from ``start`` are new and start at 0 for the
    proportion; the caller resolves their real start.
    """
    end = dict(latest)
    if max_offsets is None:
        return end
    backlog = {tp: max(0, latest[tp] - start.get(tp, 0)) for tp in latest}
    total = sum(backlog.values())
    if total <= max_offsets:
        return end
    for tp, size in backlog.items():
        if size == 0:
            continue
        begin = start.get(tp, 0)
        share = max_offsets * (size / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        end[tp] = min(latest[tp], begin + step)
    return end


def available(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> int:
    """Offsets between ``start`` and ``latest``, summed over partitions."""
    return sum(max(0, end - start.get(tp, 0)) for tp, end in latest.items())


class MinOffsetsGate:
    """``minOffsetsPerTrigger`` with ``maxTriggerDelay``, as Spark's Kafka source.

    A trigger plans a batch when at least ``min_offsets`` offsets are
    available, or when ``max_delay_s`` has passed since the gate last let a
    trigger through; otherwise the source reports no new data and Spark skips
    the trigger. The first trigger of a query always passes. As in Spark, a
    trigger that passes because the delay ran out restarts the delay even if
    it found no data.
    """

    def __init__(
        self, min_offsets: int, max_delay_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_offsets = min_offsets
        self.max_delay_s = max_delay_s
        self._clock = clock
        self._last: float | None = None

    def admit(self, offsets_available: int) -> bool:
        now = self._clock()
        if (
            self._last is None
            or now - self._last >= self.max_delay_s
            or offsets_available >= self.min_offsets
        ):
            self._last = now
            return True
        return False


class MinPauseGate:
    """``minPauseBetweenBatches`` (Flink's minimum pause between checkpoints).

    Spark's processing-time trigger starts the next batch at once when one
    ran longer than the interval; this gate holds a trigger back (the
    source reports no new data, so Spark plans no batch) until ``pause_s``
    has passed since the last batch was committed. ``last_commit`` answers
    that time (Spark's commit log), or None before the first commit; a time
    ahead of this clock (another host's) counts as now.
    """

    def __init__(
        self, pause_s: float, last_commit: Callable[[], float | None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pause_s = pause_s
        self._last_commit = last_commit
        self._clock = clock

    def left(self) -> float:
        """Seconds of the pause still to go; 0 once a batch may start."""
        ended = self._last_commit()
        if ended is None:
            return 0.0
        now = self._clock()
        return max(0.0, min(ended, now) + self.pause_s - now)


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    earliest: Mapping[TopicPartition, int],
) -> tuple[list[OffsetRange], list[DataLoss]]:
    """The ranges one batch reads, and any data loss found while planning.

    - a partition present at the end but not the start is new: read it from
      its earliest offset (a new partition whose earliest is not 0 lost data);
    - a partition present at the start but gone at the end was deleted;
    - a start below the earliest offset lost records to retention or deletion;
    - an end below the start means the partition was recreated or truncated.
    What to do with a loss (fail or skip) is the caller's choice.
    """
    ranges: list[OffsetRange] = []
    losses: list[DataLoss] = []
    for tp in sorted(set(start) - set(end)):
        losses.append(
            DataLoss(tp[0], tp[1], f"partition {tp[0]}-{tp[1]} was deleted; "
                     f"records from offset {start[tp]} on may have been missed")
        )
    for tp in sorted(end):
        topic, partition = tp
        low = earliest.get(tp, 0)
        if tp in start:
            begin = start[tp]
        else:
            begin = low
            if low != 0:
                losses.append(
                    DataLoss(topic, partition, f"new partition {topic}-{partition} starts at "
                             f"offset {low}; records 0 to {low - 1} were deleted before "
                             f"the query saw them")
                )
        stop = end[tp]
        if stop < begin:
            losses.append(
                DataLoss(topic, partition, f"partition {topic}-{partition} offset went back "
                         f"from {begin} to {stop} (topic recreated or truncated); "
                         f"some data may have been missed")
            )
            begin = min(low, stop)
        elif begin < low:
            losses.append(
                DataLoss(topic, partition, f"offsets {begin} to {low - 1} of "
                         f"{topic}-{partition} are no longer on the broker "
                         f"(retention or deletion); they were not read")
            )
            begin = low
        if stop > begin:
            ranges.append(OffsetRange(topic, partition, begin, stop))
    return ranges, losses


def split_ranges(
    ranges: list[OffsetRange],
    min_partitions: int | None,
    max_records: int | None = None,
) -> list[OffsetRange]:
    """Split large ranges: none longer than ``max_records`` offsets, and at
    least ``min_partitions`` tasks in all (Spark's ``maxRecordsPerPartition``
    and ``minPartitions``, applied in that order).

    ``minPartitions`` splits in proportion to range size; without either
    option every topic-partition range is one task.
    """
    if max_records:
        ranges = [
            piece for r in ranges
            for piece in _split(r, max(1, math.ceil(r.size / max_records)))
        ]
    if not min_partitions or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    if total == 0:
        return list(ranges)
    result: list[OffsetRange] = []
    for r in ranges:
        # Half up, as Spark's Math.round: Python's round(2.5) is 2, which made
        # minPartitions=5 over two equal ranges 4 tasks where Spark makes 6.
        parts = max(1, math.floor(min_partitions * r.size / total + 0.5))
        result.extend(_split(r, min(parts, r.size)))
    return result


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` in ``parts`` pieces of (nearly) equal size, in offset order."""
    if parts <= 1:
        return [r]
    step = r.size / parts
    bounds = [r.start + math.floor(i * step) for i in range(parts)] + [r.end]
    return [
        OffsetRange(r.topic, r.partition, lo, hi)
        for lo, hi in zip(bounds, bounds[1:]) if hi > lo
    ]
