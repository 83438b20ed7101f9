"""A job's runtime settings, declared once: name, type, default, help, and the
error for a bad value, each in the ``Setting`` that declares its field of
``JobSettings`` (``SETTINGS`` is read off the fields).

``Pipeline`` takes them as keyword arguments, a job file sets them on its
``Pipeline``, and ``eoskit run`` derives one flag per setting from the same
declarations (a flag given on the command line wins over the job file).
``docs/operations.md`` lists them, generated from here, beside the Flink
names they mirror.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from eoskit.runtime.job.restart import RestartStrategy, parse_strategy
from eoskit.core.options import Option, declarations, parse_bool, parse_duration, setting


class SettingError(ValueError):
    """A runtime setting has a bad value; the message names the setting."""


def _duration(text: Any) -> float:
    return parse_duration(text)


def _positive_duration(text: Any) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError("expected a duration greater than zero")
    return seconds


def _whole(text: Any) -> int:
    """A whole number from text or a number; 1.5, True or "2.0" are refused,
    not rounded."""
    if isinstance(text, bool) or (isinstance(text, float) and not text.is_integer()):
        raise ValueError("expected a whole number")
    try:
        return int(text if not isinstance(text, str) else text.strip())
    except ValueError:
        raise ValueError("expected a whole number") from None


def _non_negative_int(text: Any) -> int:
    value = _whole(text)
    if value < 0:
        raise ValueError("expected a whole number, 0 or more")
    return value


def _retained(text: Any) -> int:
    value = _whole(text)
    if value < MIN_RETAINED:
        raise ValueError(
            f"the smallest value that works is {MIN_RETAINED}: a restart replays the last "
            "planned batch from Spark's offset log, and a savepoint of batch b copies batch "
            "b-1's entries too")
    return value


#: Spark's logs must keep the batch being planned and the one before it.
MIN_RETAINED = 2


def _positive_int(text: Any) -> int:
    value = _whole(text)
    if value < 1:
        raise ValueError("expected a whole number, 1 or more")
    return value


def _mode(text: Any) -> str:
    value = str(text).strip().lower().replace("-", "_")
    if value not in ("exactly_once", "at_least_once"):
        raise ValueError("expected exactly_once or at_least_once")
    return value


def _strategy(text: Any) -> RestartStrategy:
    return text if isinstance(text, RestartStrategy) else parse_strategy(str(text))


#: The state backends, by the names Flink gives them (``state.backend.type``).
STATE_BACKENDS = ("hashmap", "rocksdb")


def _backend(text: Any) -> str:
    value = str(text).strip().lower()
    if value not in STATE_BACKENDS:
        raise ValueError(f"expected {' or '.join(STATE_BACKENDS)}")
    return value


@dataclass(frozen=True)
class Setting(Option[Any]):
    """One runtime setting: an ``Option`` (name: the Pipeline keyword and
    JobSettings field; parse: text or value -> value, a ValueError saying
    what is wrong) that also takes Python values, with its flag and the
    Flink option it mirrors."""

    flink: str = ""  # the Flink option it mirrors, for the docs

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> Any:
        if value is None:
            return None
        try:
            return self.parse(value)
        except (ValueError, TypeError) as exc:
            raise SettingError(f"setting {self.name} ({self.flag}) = {value!r}: {exc}") from None


@dataclass(frozen=True)
class JobSettings:
    """The checked settings of one job, each field declared by its
    ``Setting`` (``setting``): ``SETTINGS``, the flags and the docs are
    derived from them. Build with ``JobSettings.of(...)``."""

    checkpoint_interval: float = setting(
        Setting("checkpoint_interval", _positive_duration, 5.0,
                "How often a micro-batch (a checkpoint) starts: Spark's processing-time trigger.",
                flink="execution.checkpointing.interval"))
    checkpoint_timeout: float | None = setting(
        Setting("checkpoint_timeout", _positive_duration, None,
                "A batch running longer than this is failed and handled by the restart strategy. "
                "Default: no timeout.", flink="execution.checkpointing.timeout"))
    min_pause: float = setting(
        Setting("min_pause", _duration, 0.0,
                "Least time between the end of one batch (its commit) and the start of the next, "
                "however short the interval: the eoskit-kafka source reports no new data until it "
                "has passed. 0: none. Not applied to --until-caught-up runs.",
                flink="execution.checkpointing.min-pause"))
    tolerable_failures: int = setting(
        Setting("tolerable_failures", _non_negative_int, 0,
                "Consecutive failed batches tolerated before the job fails; each is retried "
                "by a restart from the checkpoint, without counting against the restart strategy.",
                flink="execution.checkpointing.tolerable-failed-checkpoints"))
    retained_checkpoints: int = setting(
        Setting("retained_checkpoints", _retained, 100,
                "Batches kept in the checkpoint's logs (Spark's minBatchesToRetain): how far back "
                "`eoskit checkpoint list` and savepoints can reach.",
                flink="state.checkpoints.num-retained"))
    mode: str = setting(
        Setting("mode", _mode, "exactly_once",
                "exactly_once or at_least_once: sets the commitMode of every eoskit sink.",
                flink="execution.checkpointing.mode"))
    operator_chaining: bool = setting(
        Setting("operator_chaining", parse_bool, True,
                "Run a transform given as an ArrowTransform in the source's tasks, which then write "
                "to the sink themselves, when the source and the sink can chain (eoskit-kafka into "
                "an eoskit sink, append): the rows never enter the JVM (docs/design/chaining.md). "
                "false: Spark's mapInArrow between them, as for any transform.",
                flink="pipeline.operator-chaining.enabled"))
    restart_strategy: RestartStrategy | None = setting(
        Setting("restart_strategy", _strategy, None,
                "none, fixed_delay(attempts, delay), failure_rate(max_failures, interval, delay) or "
                "exponential_delay(initial, max, multiplier, reset_after, jitter). Default: "
                "exponential_delay with Flink's defaults.", flink="restart-strategy.type"))
    state_backend: str = setting(
        Setting("state_backend", _backend, "hashmap",
                "Where keyed state lives: hashmap (Spark's HDFS-backed state store: state in "
                "executor memory, a delta file per batch) or rocksdb (RocksDB state store: state on "
                "local disk, needed by transformWithState). Fixed for the life of a checkpoint.",
                flink="state.backend.type"))
    incremental_checkpoints: bool = setting(
        Setting("incremental_checkpoints", parse_bool, False,
                "rocksdb only: a batch's commit uploads a changelog of the keys it changed, and "
                "RocksDB snapshots are uploaded in the background (Spark's RocksDB changelog "
                "checkpointing). May be switched on or off between runs.",
                flink="execution.checkpointing.incremental"))
    state_snapshot_interval: int = setting(
        Setting("state_snapshot_interval", _positive_int, 10,
                "Batches between full snapshots of the state (Spark's minDeltasForSnapshot): "
                "hashmap, and rocksdb with incremental_checkpoints, write a delta or changelog per "
                "batch and consolidate them into a snapshot every this many; expired and deleted "
                "entries' bytes leave the checkpoint with the next snapshot, once the versions "
                "before it leave retention (Flink's full-snapshot TTL cleanup). rocksdb without "
                "incremental_checkpoints snapshots every batch. May change between runs.",
                flink="StateTtlConfig.cleanupFullSnapshot"))
    state_compact_on_commit: bool = setting(
        Setting("state_compact_on_commit", parse_bool, False,
                "rocksdb only: compact RocksDB at every batch's commit, so that the deletes of "
                "expired and removed entries drop their keys from the files at once (Flink's "
                "RocksDB compaction-filter TTL cleanup), at the cost of a longer commit. May "
                "change between runs.",
                flink="StateTtlConfig.cleanupInRocksdbCompactFilter"))

    def __post_init__(self) -> None:
        # The checks that span two settings, here so that flags merged over
        # a job file's settings are checked too.
        for name, value, why in (
                ("incremental_checkpoints", self.incremental_checkpoints,
                 "the hashmap backend writes each batch's changes as a delta file already"),
                ("state_compact_on_commit", self.state_compact_on_commit,
                 "the hashmap backend keeps its state in memory, with nothing to compact")):
            if value and self.state_backend != "rocksdb":
                raise SettingError(
                    f"setting {name} ({BY_NAME[name].flag}) = True needs state_backend = "
                    f"'rocksdb' (it is {self.state_backend!r}): {why}")

    @classmethod
    def of(cls, **values: Any) -> "JobSettings":
        unknown = sorted(set(values) - set(BY_NAME))
        if unknown:
            raise SettingError(f"unknown setting(s) {', '.join(unknown)}; known: "
                               f"{', '.join(BY_NAME)}")
        checked = {}
        for name, value in values.items():
            value = BY_NAME[name].check(value)
            if value is not None:
                checked[_FIELD[name]] = value
        return cls(**checked)

    def override(self, values: Mapping[str, Any]) -> "JobSettings":
        """These settings with ``values`` (e.g. command-line flags) on top."""
        given = {k: v for k, v in values.items() if v is not None}
        return replace(self, **{_FIELD[k]: BY_NAME[k].check(v) for k, v in given.items()})

    def strategy(self) -> RestartStrategy:
        return self.restart_strategy or parse_strategy("exponential_delay")


#: The settings, in the order of their fields (and of flags and docs).
SETTINGS: tuple[Setting, ...] = tuple(d.option for _, d in declarations(JobSettings))
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
#: Setting name (the Pipeline keyword) -> JobSettings field.
_FIELD = {d.option.name: f.name for f, d in declarations(JobSettings)}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One ``eoskit run`` flag per setting, derived from the declarations."""
    group = parser.add_argument_group("job settings (override the job file's)")
    for declared in SETTINGS:
        default = "" if declared.default is None else f" (default {declared.default})"
        group.add_argument(declared.flag, dest=f"setting_{declared.name}", metavar="VALUE",
                           help=declared.help + default)


def from_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The setting flags given, as text, each checked by its declaration
    alone (a ``SettingError`` naming the setting and its flag): what can be
    refused before the job file runs. What needs the job file's settings
    or parts too is checked where the flags are merged over them
    (``JobSettings.override``, ``Pipeline.check_settings``)."""
    given = {s.name: getattr(args, f"setting_{s.name}", None) for s in SETTINGS
             if getattr(args, f"setting_{s.name}", None) is not None}
    for name, value in given.items():
        BY_NAME[name].check(value)
    return given


def docs() -> Iterable[str]:
    """Markdown rows for docs/operations.md."""
    yield "| setting | `eoskit run` flag | default | Flink | meaning |"
    yield "| --- | --- | --- | --- | --- |"
    for s in SETTINGS:
        default = "" if s.default is None else f"`{s.default}`"
        yield f"| `{s.name}` | `{s.flag}` | {default} | `{s.flink}` | {s.help} |"

