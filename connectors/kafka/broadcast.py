"""Broadcast state for the eoskit-kafka source (Flink's ``BroadcastState``).

A small topic, usually compacted (rules, thresholds, feature flags, a
currency table), is folded into one state that every task of a batch sees
the same; the events are judged by the rules in force when their batch was
planned, and a replay after a crash uses exactly those rules again.
docs/design/broadcast-and-operator-state.md is the design; this is the
protocol, step by step. Each step says where it runs and why it is safe.

The pin lives in the events' own offset JSON, under the reserved key
``@broadcast`` (``offsets.BROADCAST_KEY``)::

    {"payments":{"0":1200,"1":1187},
     "@broadcast":{"name":"rules","version":7,"offsets":{"fraud-rules":{"0":415}},"digest":"sha256:9f2c..."}}

so Spark writes it to its offset log with the batch (the barrier), hands it
back on a replay, and no new checkpoint layout is needed. The state itself
is persisted beside the checkpoint (``broadcast_store``): compaction
rewrites a topic's history, so re-reading the topic on a replay could give
other rules than the first attempt had.

1. **Fold, then write** (driver, the source's ``latestOffset``, only when
   the events have a new batch to plan). If the rules topic's last stable
   offsets (LSO) equal the start's pin, the pin is carried over unchanged.
   Otherwise ``S(v)`` (from memory if its version and digest match, else
   from its snapshot) is folded with the records of ``[pin_v, LSO)`` into
   ``S(v+1)``, its snapshot is written, and only then is the new pin
   returned. If the rules changed and the start's pin is older than
   ``broadcastStaleAfter`` (the topic's ``delete.retention.ms``: compaction
   may have dropped a tombstone past the pin), ``latest`` folds from the
   topic's earliest offsets instead (a compacted topic read whole is its
   current state) and a custom fold fails the batch (PERMANENT).
   *Safe:* nothing names that file yet; a kill leaves an orphan
   that is never named, because the restart plans this batch again from the
   logged ``offsets/n-1`` (and folds it again, perhaps further).
   Crash point ``driver_after_broadcast_snapshot``.
2. **Barrier.** Spark writes ``offsets/n``: the version, the pinned offsets
   and the snapshot's digest are logged, and the file already exists.
3. **Publish** (driver, the source's ``partitions``, before any task).
   ``versions/<v>.json`` is written from the logged pin: the same bytes
   every time, so a replay's second publish is harmless. A missing snapshot
   fails the batch (``BroadcastSnapshotMissing``, PERMANENT): the log names
   a state nobody can rebuild the same. Crash point
   ``driver_after_broadcast_publish``.
4. **Tasks** (executors). Each input partition carries a ``BroadcastRef``
   made from the logged pin; ``read()`` adds the version to every row
   (``broadcastVersion``), and ``KafkaBroadcast.state(v)`` loads ``S(v)`` by
   its pointer and checks its digest. A retried or speculative task loads
   the same file.
5. **Sink** (unchanged protocol). Batch n's output is a function of its
   offset ranges and ``S(v_n)``, both fixed by ``offsets/n``, so every
   attempt and replay computes the same rows and the decision (or the
   markers) makes one of them visible.
6. **Next batch.** After ``commits/n`` folding goes on from ``S(v_n)``, from
   memory or, after a restart, from its file: the logged state either way.
7. **Pruning** (driver, the source's ``commit``, every ``PRUNE_EVERY``
   batches). Versions below the one the oldest retained ``offsets/`` entry
   names are removed, and orphans of step 1; nothing above the newest
   logged version is touched (it may be a batch being planned).

A rules change alone plans no batch: the events' offsets decide whether
there is a batch, as without a broadcast.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from eoskit.connectors.kafka.broadcast_fold import (
    BroadcastRecord,
    fold,
    normalise_spec,
    resolve_fold,
)
from eoskit.connectors.kafka.broadcast_store import BroadcastState, BroadcastStore
from eoskit.connectors.kafka.offsets import (
    BROADCAST_KEY,
    OffsetRange,
    PartitionOffsets,
    from_json_dict,
    split_reserved,
    to_json_dict,
)
from eoskit.connectors.kafka.schema import arrow_schema
from eoskit.core import crash
from eoskit.core.fs import open_location
from eoskit.core.options import OptionError
from eoskit.twophase.verdicts import Verdict

log = logging.getLogger(__name__)

#: The column every row of a source with a broadcast gains: the version of
#: the broadcast state its batch was planned with.
VERSION_COLUMN = "broadcastVersion"
#: Step 7 runs at every this many committed batches.
PRUNE_EVERY = 10


@dataclass(frozen=True)
class BroadcastPin:
    """The broadcast entry of one batch's offset JSON."""

    name: str
    version: int
    #: the rules topic's offsets folded into this version (every record below)
    offsets: PartitionOffsets
    #: the snapshot's sha256; None for version 0, the empty state
    digest: str | None

    def to_json(self) -> dict[str, Any]:
        # A fixed key order: Spark compares offset JSON as text.
        return {"name": self.name, "version": self.version,
                "offsets": to_json_dict(self.offsets), "digest": self.digest}

    @classmethod
    def of(cls, offsets_json: Mapping[str, Any], name: str) -> "BroadcastPin | None":
        """The pin of ``offsets_json`` (a batch's source offsets) if it has one for ``name``."""
        entry = split_reserved(offsets_json)[1].get(BROADCAST_KEY)
        if not isinstance(entry, Mapping) or entry.get("name") != name:
            return None
        try:
            return cls(name, int(entry["version"]),
                       from_json_dict(entry.get("offsets") or {}, "the broadcast pin's offsets"),
                       entry.get("digest"))
        except (KeyError, TypeError, ValueError) as exc:
            raise OptionError(f"checkpointed offsets: the {BROADCAST_KEY} entry {dict(entry)!r} "
                              f"is not a broadcast pin ({exc})") from None


@dataclass(frozen=True)
class BroadcastRef:
    """What a task needs to find its batch's state: travels in its input partition."""

    location: str
    name: str
    version: int
    digest: str | None


class _OffsetLog:
    """The query's checkpoint as the source reads it: Spark's ``metadata``
    and offset log, written by Spark's JVM (the runtime's ``Checkpoint`` is
    out of a connector's reach)."""

    def __init__(self, location: str) -> None:
        self.fs, self.root = open_location(location)

    def _lines(self, relative: str) -> list[str] | None:
        try:
            return self.fs.cat_file(f"{self.root}/{relative}").decode("utf-8").splitlines()
        except FileNotFoundError:
            return None

    def query_id(self) -> str | None:
        """The id in ``<checkpoint>/metadata``, written when the query starts."""
        lines = self._lines("metadata")
        return json.loads(lines[0]).get("id") if lines else None

    def batches(self) -> list[int]:
        """The retained batches of the offset log, oldest first."""
        path = f"{self.root}/offsets"
        self.fs.invalidate_cache(path)
        try:
            names = [e.rstrip("/").rsplit("/", 1)[-1] for e in self.fs.ls(path, detail=False)]
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def newest(self) -> int | None:
        batches = self.batches()
        return batches[-1] if batches else None

    def entry(self, batch: int) -> tuple[dict[str, Any], list[Any]]:
        """Batch ``batch``'s metadata (``batchTimestampMs``...) and its sources' offsets."""
        lines = self._lines(f"offsets/{batch}") or []
        meta = json.loads(lines[1]) if len(lines) > 1 and lines[1] else {}
        return meta, [json.loads(line) for line in lines[2:] if line.lstrip().startswith("{")]

    def planned_at(self) -> float | None:
        """When the newest logged batch was planned (``batchTimestampMs``), in seconds."""
        newest = self.newest()
        stamp = None if newest is None else self.entry(newest)[0].get("batchTimestampMs")
        return None if stamp is None else stamp / 1000

    def pinned_versions(self, name: str) -> tuple[int, int] | None:
        """(oldest, newest) versions of broadcast ``name`` the retained entries pin."""
        batches = self.batches()
        versions = []
        for batch in (batches[0], batches[-1]) if batches else ():
            pins = [BroadcastPin.of(source, name) for source in self.entry(batch)[1] if isinstance(source, dict)]
            versions += [pin.version for pin in pins if pin is not None][:1]
        return (versions[0], versions[-1]) if len(versions) == 2 else None


class BroadcastTooStale(RuntimeError):
    """A custom fold's pin is older than ``broadcastStaleAfter``: not rebuildable."""

    #: eoskit.twophase.verdicts: a restart finds the same stale pin.
    verdict: ClassVar[Verdict] = Verdict.PERMANENT


class BroadcastPlanner:
    """Steps 1, 3 and 7, in the driver's long-lived source process."""

    def __init__(self, settings: Any, metadata: Callable[[], Any]) -> None:
        self.settings = settings
        self.topic: str = settings.broadcast_topic
        self.name: str = settings.broadcast_name
        self.location: str = settings.checkpoint_location
        self.spec = normalise_spec(settings.broadcast_fold)
        self.fold = resolve_fold(self.spec)
        self.store = BroadcastStore(self.location, self.name)
        self.log = _OffsetLog(self.location)
        self._metadata = metadata
        self._claimed = False
        #: S(v) of the last pin returned: (version, digest, state)
        self._memory: tuple[int, str | None, Any] | None = None
        self._commits = 0

    def ref(self, pin: BroadcastPin | None) -> BroadcastRef:
        if pin is None:  # a batch logged before the broadcast was declared
            return BroadcastRef(self.location, self.name, 0, None)
        return BroadcastRef(self.location, self.name, pin.version, pin.digest)

    # -- step 1 --------------------------------------------------------------------

    def pin(self, start: BroadcastPin | None) -> BroadcastPin:
        """The pin of the batch being planned from ``start``'s (None: none yet)."""
        self._claim()
        if crash.armed():
            crash.crash_point(crash.BROADCAST_BEFORE_PIN, self._batch(planning=True))
        metadata = self._metadata()
        partitions = sorted((self.topic, p) for p in metadata.topics().get(self.topic, ()))
        if not partitions:
            raise OptionError(f"option 'broadcastTopic' = {self.topic!r}: the topic does not exist "
                              f"on {self.settings.bootstrap_servers}; create it (eoskit-kafka never "
                              "creates topics)")
        stable = metadata.latest(partitions)
        if start is not None and start.offsets == stable:
            return start
        earliest = metadata.earliest(partitions)
        if start is not None and self._stale(start):  # latest only: a custom fold raised
            state, base = self.fold.initial(), dict(earliest)
        else:
            state = self._state(start)
            base = {tp: max(start.offsets.get(tp, 0) if start else 0, earliest[tp]) for tp in partitions}
        self._memory = None  # until the new state is written
        records = list(self._records(base, stable))
        state = fold(state, records, self.fold, self.spec)
        version = (start.version if start else 0) + 1
        digest = self.store.write_snapshot(version, stable, state, self.spec,
                                           max_bytes=self.settings.broadcast_max_bytes)
        crash.crash_point(crash.DRIVER_AFTER_BROADCAST_SNAPSHOT, self._batch(planning=True))
        self._memory = (version, digest, state)
        log.info("broadcast %s: version %d folds %d record(s) of %s up to %s", self.name, version,
                 len(records), self.topic, to_json_dict(stable))
        return BroadcastPin(self.name, version, stable, digest)

    def _stale(self, start: BroadcastPin) -> bool:
        """Step 1's guard: the last pin is older than ``broadcastStaleAfter``,
        so compaction may have dropped tombstones the fold never saw."""
        planned = self.log.planned_at()
        age = None if planned is None else time.time() - planned
        if age is None or age <= self.settings.broadcast_stale_after_s:
            return False
        if self.spec != "latest":
            raise BroadcastTooStale(
                f"broadcast {self.name!r}: its last pin is {age:.0f} s old, more than "
                f"broadcastStaleAfter ({self.settings.broadcast_stale_after_s:g} s), and the custom fold "
                f"{self.spec} cannot be rebuilt from the compacted topic {self.topic!r}: raise "
                "broadcastStaleAfter to go on with what compaction left, or start a new broadcastName")
        log.warning("broadcast %s: the last pin is %.0f s old, more than broadcastStaleAfter (%g s): "
                    "rebuilding it from the earliest offsets of %s, as tombstones may be gone",
                    self.name, age, self.settings.broadcast_stale_after_s, self.topic)
        return True

    def _claim(self) -> None:
        if not self._claimed:
            self.store.claim(self.topic, self.spec, self.log.query_id())
            self._claimed = True

    def _batch(self, planning: bool) -> int:
        """The batch a crash point is in: the one being planned (the newest
        logged plus one) or the newest logged (being published)."""
        if not crash.armed():
            return 0
        newest = self.log.newest()
        if newest is None:
            return 0
        return newest + 1 if planning else newest

    def _state(self, start: BroadcastPin | None) -> Any:
        if start is None or start.version == 0:
            return self.fold.initial()
        if self._memory is not None and self._memory[:2] == (start.version, start.digest):
            return self._memory[2]
        return self.store.load(start.version, start.digest)[0]

    def _records(self, base: PartitionOffsets, end: PartitionOffsets) -> Iterator[BroadcastRecord]:
        from eoskit.connectors.kafka.reader import read_range

        schema = arrow_schema(include_headers=True)
        for (topic, partition), stop in sorted(end.items()):
            if base[(topic, partition)] >= stop:
                continue
            span = OffsetRange(topic, partition, base[(topic, partition)], stop)
            for batch in read_range(span, self.settings.kafka, schema,
                                    self.settings.poll_timeout_ms, self.settings.fail_on_data_loss):
                stamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
                for key, value, offset, stamp, headers in zip(
                        batch.column("key").to_pylist(), batch.column("value").to_pylist(),
                        batch.column("offset").to_pylist(), stamps,
                        batch.column("headers").to_pylist()):
                    yield BroadcastRecord(
                        key, value, partition, offset, None if stamp is None else stamp // 1000,
                        tuple((h["key"], h["value"]) for h in headers or ()), topic)

    # -- step 3 --------------------------------------------------------------------

    def publish(self, pin: BroadcastPin | None) -> None:
        """Point version ``pin.version`` at its logged snapshot, before any task reads it."""
        if pin is None or pin.version == 0:
            return
        self.store.publish(pin.version, pin.digest, pin.offsets)
        crash.crash_point(crash.DRIVER_AFTER_BROADCAST_PUBLISH, self._batch(planning=False))

    # -- step 7 --------------------------------------------------------------------

    def committed(self) -> None:
        """After a batch commits: prune every ``PRUNE_EVERY`` batches. Never fails the query."""
        self._commits += 1
        if self._commits % PRUNE_EVERY:
            return
        try:
            span = self.log.pinned_versions(self.name)
            if span is not None:
                self.store.gc(*span)
        except Exception as exc:  # noqa: BLE001 - pruning is housekeeping
            log.warning("broadcast %s: pruning old versions failed (%s); the next try is in "
                        "%d batches", self.name, exc, PRUNE_EVERY)


def with_version(batches: Iterable[pa.RecordBatch], version: int) -> Iterator[pa.RecordBatch]:
    """Step 4: each batch with its ``broadcastVersion`` column."""
    for batch in batches:
        yield batch.append_column(VERSION_COLUMN, pa.repeat(pa.scalar(version, pa.int64()), batch.num_rows))


# -- the user's side ---------------------------------------------------------------


@dataclass
class KafkaBroadcast:
    """A broadcast input: the state folded from ``topic``, the same in every task.

    Give it to ``KafkaSource(..., broadcast=rules)`` in a Pipeline (which
    binds it to the query's checkpoint), or, in a plain ``readStream`` job,
    make it with ``checkpoint=`` the query's checkpoint location and pass
    ``.options(**rules.options())`` to the eoskit-kafka reader. Rows then
    carry ``broadcastVersion``; ``rules.map(fn)`` is a ``mapInArrow``
    function calling ``fn(batch, state)`` with the state of the rows'
    version, and ``rules.state(version)`` gives it to any other code on
    executors (a ``transformWithState`` processor, a pandas UDF).

    ``decode`` turns each stored value into what ``state`` maps keys to
    (``json.loads`` for JSON rules; default: the bytes as they are); it is
    applied once per value per version loaded, not per row.
    """

    name: str
    topic: str
    decode: Callable[[bytes], Any] | None = None
    fold: str = "latest"
    max_bytes: str | None = None
    checkpoint: str | None = None

    def options(self) -> dict[str, str]:
        """The eoskit-kafka options that declare this broadcast."""
        options = {"broadcastTopic": self.topic, "broadcastName": self.name, "broadcastFold": self.fold}
        if self.max_bytes is not None:
            options["broadcastMaxBytes"] = str(self.max_bytes)
        if self.checkpoint is not None:
            options["checkpointLocation"] = self.checkpoint
        return options

    def bind(self, checkpoint: str) -> None:
        """Set the query's checkpoint (a Pipeline does it before the transform is built)."""
        if self.checkpoint is not None and self.checkpoint.rstrip("/") != checkpoint.rstrip("/"):
            raise OptionError(f"broadcast {self.name!r} is bound to the checkpoint {self.checkpoint}, "
                              f"and this query's is {checkpoint}: one broadcast per query")
        self.checkpoint = checkpoint

    def state(self, version: int) -> BroadcastState:
        """Version ``version`` of the state, loaded once per Python worker (executors)."""
        if self.checkpoint is None:
            raise OptionError(f"broadcast {self.name!r} has no checkpoint: give checkpoint= (a "
                              "plain readStream job) or run it in a Pipeline, which sets it")
        # Cached per worker by the store (an LRU of two versions per folder).
        return BroadcastStore(self.checkpoint, self.name).state(int(version), decode=self.decode)

    def map(self, fn: Callable[[pa.RecordBatch, BroadcastState], pa.RecordBatch | pa.Table]
            ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        """A ``mapInArrow`` function: ``fn(batch, state)`` for the rows of each version."""
        def judge(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                column = batch.column(VERSION_COLUMN)
                for version in pc.unique(column).to_pylist():
                    rows = batch if pc.all(pc.equal(column, version)).as_py() else \
                        batch.filter(pc.equal(column, version))
                    out = fn(rows, self.state(version))
                    yield from (out.to_batches() if isinstance(out, pa.Table) else (out,))
        return judge
