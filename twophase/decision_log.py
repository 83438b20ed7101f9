"""The coordinator's durable memory: which transaction ids each batch commits.

Kept beside the query's checkpoint (``<checkpoint>/eoskit/sinks/<sink-id>/``)
through fsspec, so it lives and dies with the checkpoint it belongs to:

- ``sink.json``: written before the first transaction of the sink is
  opened. A prepared transaction of this sink id with no ``sink.json``
  means the checkpoint was deleted: nothing can tell commit from roll back.
- ``decisions/<batch>.json``: ``{"batch", "commit": [ids], "status",
  "evidence": {id: token}}``, written whole (atomic rename locally, a
  single PUT on object stores) before any transaction of the batch is
  committed; ``status`` becomes ``done`` once every id is committed and
  every other id rolled back. ``evidence`` (sinks that prove outcomes):
  what tells, once an id is gone, whether it committed. ``operatorState``
  (writers that keep operator state): ``{"parallelism": k, "files": {p:
  file}}``, the snapshot of each instance's acked attempt, decided with the
  rows (``KeepsOperatorState``).
- ``opstate/<batch>/<p>-<attempt>.arrow``: a task attempt's operator state
  snapshot (``twophase/operator_state.py``), written before it prepares.
  Only the files a decision names are state; the others (losing attempts,
  batches never decided) are removed by ``prune``, which also keeps the
  newest decision with operator state, and its files, past retention: the
  next batch restores from it.
- ``aborted/<batch>.json``: written by ``abort`` before it lists what to roll
  back, and read by each task right after it prepares. Spark does not wait
  for a cancelled task before it calls ``abort``, so a task may prepare after
  the abort listed the batch; the marker makes such a task roll itself back
  (either it sees the marker, or it prepared before the marker was written
  and the abort's listing finds it). Markers belong to the run that failed:
  the next run's planning removes them before it re-runs the batch.
- ``settled/<time>-<n>.json``: ``{"at", "committed": [ids], "rolledBack":
  [ids]}``, one per start-up sweep that settled in-doubt transactions. The
  sweep runs in Spark's planning process, not in the driver's own Python
  process; this is how the runtime's metrics learn of it (``settlements``).
  Not copied into savepoints: it is the history of runs, not state.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import fsspec

from eoskit.core.fs import file_mtime, fs_path, write_atomic

#: Decisions of batches this far behind the newest are removed when Spark's
#: offset log cannot be read; otherwise a decision is kept exactly as long as
#: Spark keeps its batch (``minBatchesToRetain``, eoskit's
#: ``retained_checkpoints``), so the checkpoint stays flat.
RETAIN_BATCHES = 1000
#: Decisions and progress markers are pruned at every this many batches.
PRUNE_EVERY = 10
#: Notes of settled in-doubt transactions kept (one per sweep that settled any).
SETTLED_KEPT = 100


# -- the layout, written here once (runtime/state/checkpoints.py and identity.py read it) --

#: Every sink's folder is ``<checkpoint>/SINKS/<sink-id>/``.
SINKS = "eoskit/sinks"
#: In a sink's folder: its marker, its own records, and one folder per kind
#: of batch file (``<kind>/<batch>.json``).
SINK_MARKER = "sink.json"
META = "meta"
DECISIONS = "decisions"
ABORTED = "aborted"
SETTLED = "settled"
OPSTATE = "opstate"


def sink_folder(sink_id: str) -> str:
    """A sink's folder, relative to the checkpoint."""
    return f"{SINKS}/{sink_id}"


def batch_file(kind: str, batch: int) -> str:
    """A batch's file of ``kind`` (``DECISIONS``, ``ABORTED``), relative to the sink's folder."""
    return f"{kind}/{batch}.json"


def opstate_file(batch: int, partition: int, attempt: int) -> str:
    """A task attempt's operator state snapshot, relative to the sink's folder."""
    return f"{OPSTATE}/{batch}/{partition}-{attempt}.arrow"


def batch_of(name: str) -> int | None:
    """The batch a batch file's name or path is for; None for any other file."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return int(base[:-5]) if base.endswith(".json") and base[:-5].isdigit() else None


class DecisionLogError(RuntimeError):
    """The decision log is unreadable or contradicts itself."""


@dataclass(frozen=True)
class DecidedState:
    """The operator state a batch's decision checkpointed: the parallelism
    its writers ran with, and each instance's snapshot file (relative to the
    sink's folder)."""

    batch: int
    parallelism: int
    files: Mapping[int, str]

    def to_json(self) -> dict:
        return {"parallelism": self.parallelism, "files": {str(p): f for p, f in sorted(self.files.items())}}

    @classmethod
    def from_json(cls, batch: int, data: Mapping) -> "DecidedState":
        try:
            return cls(batch, int(data["parallelism"]),
                       {int(p): str(f) for p, f in dict(data["files"]).items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise DecisionLogError(f"decision of batch {batch}: bad operatorState {data!r}: {exc}") from None


@dataclass(frozen=True)
class Decision:
    batch: int
    commit: tuple[str, ...]
    done: bool
    #: id -> what its task's prepare left to prove its outcome (``ProvesOutcomes``).
    evidence: Mapping[str, str] = field(default_factory=dict)
    #: The writers' operator state, decided with the rows (``KeepsOperatorState``).
    operator_state: DecidedState | None = None


#: ``DecisionLog.state_before``'s answers in this process, by (log, its
#: sink.json's creation, batch): a batch's tasks in one Python worker ask once.
#: Decisions below a batch never change once it runs, so an answer never goes
#: stale; the creation time tells a checkpoint deleted and made anew apart.
_STATE_BEFORE: dict[tuple[str, object, int], DecidedState | None] = {}
_STATE_BEFORE_KEPT = 64


class DecisionLog:
    """Decisions of one sink of one query. Picklable (holds only paths)."""

    def __init__(self, checkpoint_location: str, sink_id: str) -> None:
        self.checkpoint_location = checkpoint_location
        self.sink_id = sink_id
        self.root = fs_path(checkpoint_location).rstrip("/") + "/" + sink_folder(sink_id)

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        fs, _ = fsspec.core.url_to_fs(self.root)
        return fs

    def _path(self, name: str) -> str:
        _, path = fsspec.core.url_to_fs(f"{self.root}/{name}")
        return path

    def _write_atomic(self, name: str, payload: dict) -> None:
        write_atomic(self.fs, self._path(name), json.dumps(payload, sort_keys=True).encode())

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write a file of the sink's folder (``name`` relative to it) whole or not at all."""
        write_atomic(self.fs, self._path(name), data)

    def read_bytes(self, name: str) -> bytes:
        """A file of the sink's folder; FileNotFoundError if it is missing."""
        with self.fs.open(self._path(name), "rb") as handle:
            return handle.read()

    def _read(self, name: str) -> dict | None:
        fs, path = self.fs, self._path(name)
        try:
            with fs.open(path, "rb") as handle:
                return json.loads(handle.read())
        except FileNotFoundError:
            return None
        except json.JSONDecodeError as exc:
            raise DecisionLogError(f"decision log file {path} is corrupt: {exc}") from None

    # -- the sink marker -------------------------------------------------

    def exists(self) -> bool:
        return self._read(SINK_MARKER) is not None

    def create(self) -> None:
        if not self.exists():
            self._write_atomic(SINK_MARKER, {
                "sinkId": self.sink_id,
                "checkpointLocation": self.checkpoint_location,
                "createdAt": time.time(),
            })

    # -- a sink's own metadata --------------------------------------------

    def read_meta(self, name: str) -> dict | None:
        """A sink's small JSON record under ``meta/`` (None if never written)."""
        return self._read(f"{META}/{name}.json")

    def write_meta(self, name: str, payload: dict) -> None:
        """Atomically replace a sink's JSON record ``name`` (driver side)."""
        self._write_atomic(f"{META}/{name}.json", payload)

    # -- decisions -------------------------------------------------------

    def get(self, batch: int) -> Decision | None:
        data = self._read(batch_file(DECISIONS, batch))
        if data is None:
            return None
        if data.get("batch") != batch:
            raise DecisionLogError(f"decision file of batch {batch} names batch {data.get('batch')}")
        state = data.get("operatorState")
        return Decision(batch, tuple(data["commit"]), data.get("status") == "done",
                        dict(data.get("evidence") or {}),
                        None if state is None else DecidedState.from_json(batch, state))

    def decide(self, batch: int, commit_ids: list[str], rows: int,
               evidence: Mapping[str, str] | None = None,
               operator_state: DecidedState | None = None) -> Decision:
        """Write "batch commits these ids" (with what proves each one's
        outcome, where the sink left anything, and the writers' operator
        state), durably, before any commit."""
        proof = {txn: token for txn, token in (evidence or {}).items() if txn in commit_ids}
        self._write_atomic(batch_file(DECISIONS, batch), {
            "batch": batch, "commit": sorted(commit_ids), "rows": rows,
            "status": "decided", "decidedAt": time.time(), **({"evidence": proof} if proof else {}),
            **({"operatorState": operator_state.to_json()} if operator_state is not None else {}),
        })
        return Decision(batch, tuple(sorted(commit_ids)), False, proof, operator_state)

    def state_before(self, batch: int) -> DecidedState | None:
        """The operator state batch ``batch``'s writers restore: that of the
        newest decision below ``batch`` that has any; None before the first.
        Cached in this process (``_STATE_BEFORE``)."""
        marker = self._read(SINK_MARKER)
        if marker is None:
            return None  # no decision log yet: nothing was ever decided
        key = (self.root, marker.get("createdAt"), batch)
        if key in _STATE_BEFORE:
            return _STATE_BEFORE[key]
        found = None
        for earlier in reversed(self.batches()):
            if earlier < batch:
                decision = self.get(earlier)
                if decision is not None and decision.operator_state is not None:
                    found = decision.operator_state
                    break
        if len(_STATE_BEFORE) >= _STATE_BEFORE_KEPT:
            _STATE_BEFORE.pop(next(iter(_STATE_BEFORE)))
        _STATE_BEFORE[key] = found
        return found

    def mark_done(self, decision: Decision) -> None:
        data = self._read(batch_file(DECISIONS, decision.batch)) or {}
        data.update({"batch": decision.batch, "commit": list(decision.commit),
                     "status": "done", "doneAt": time.time()})
        self._write_atomic(batch_file(DECISIONS, decision.batch), data)

    # -- aborts of the current run --------------------------------------

    def mark_aborted(self, batch: int) -> None:
        self._write_atomic(batch_file(ABORTED, batch), {"batch": batch, "abortedAt": time.time()})

    def is_aborted(self, batch: int) -> bool:
        return self._read(batch_file(ABORTED, batch)) is not None

    def clear_aborted(self) -> None:
        """Forget a failed run's aborts, before a new run re-plans its batches."""
        fs, path = self.fs, self._path(ABORTED)
        try:
            fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass

    # -- in-doubt transactions settled by a sweep ---------------------------

    def record_settled(self, committed: list[str], rolled_back: list[str]) -> None:
        """Note what a start-up sweep settled, for the runtime's metrics; only
        the newest ``SETTLED_KEPT`` notes are kept (the runtime reads each
        one within a batch of its writing)."""
        now = time.time()
        self._write_atomic(f"{SETTLED}/{time.time_ns()}-{uuid.uuid4().hex[:8]}.json", {
            "at": now, "committed": sorted(committed), "rolledBack": sorted(rolled_back)})
        fs = self.fs
        notes = sorted(fs.ls(self._path(SETTLED), detail=False))
        for old in notes[:-SETTLED_KEPT]:
            fs.rm(old)

    def batches(self) -> list[int]:
        fs, path = self.fs, self._path(DECISIONS)
        try:
            names = fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
        return sorted(b for b in map(batch_of, names) if b is not None)

    def prune(self, newest: int) -> int:
        """Forget done decisions of batches Spark no longer keeps in its
        offset log: it can never replay them, list them or restore them.
        The newest decision with operator state stays, whatever its age:
        the next batch restores from it. Then the operator state files no
        decision names go (``_prune_operator_state``). The oldest batch whose
        decision is kept for its transactions (the decision kept only for
        its state is done: no commit asks for it)."""
        fs = self.fs
        keep_from = kept = oldest_replayable(self.checkpoint_location, newest)
        batches = self.batches()
        state_batch = self._newest_with_state(batches)
        for batch in batches:
            if batch < keep_from and batch != state_batch:
                decision = self.get(batch)
                if decision is not None and decision.done:
                    fs.rm(self._path(batch_file(DECISIONS, batch)))
                else:
                    kept = min(kept, batch)
        self._prune_operator_state(keep_from, newest)
        return kept

    def _newest_with_state(self, batches: list[int]) -> int | None:
        if not self.fs.exists(self._path(OPSTATE)):
            return None  # this sink's writers keep no operator state: read no decision
        for batch in reversed(batches):
            decision = self.get(batch)
            if decision is not None and decision.operator_state is not None:
                return batch
        return None

    def _prune_operator_state(self, keep_from: int, newest: int) -> None:
        """Remove the snapshot files no decision names, up to ``newest``:
        a batch's whole folder once its decision is forgotten, or when it
        was never decided and Spark can no longer replay it (below
        ``keep_from``); in a decided batch, the files of attempts it did not
        decide (losing, speculative, crashed ones). An undecided batch that
        may still be replayed keeps its files."""
        fs = self.fs
        try:
            folders = fs.ls(self._path(OPSTATE), detail=False)
        except FileNotFoundError:
            return
        for folder in folders:
            name = folder.rstrip("/").rsplit("/", 1)[-1]
            if not name.isdigit() or int(name) > newest:
                continue
            batch = int(name)
            decision = self.get(batch)
            if decision is None:
                if batch < keep_from:
                    fs.rm(folder, recursive=True)
                continue
            named = set(decision.operator_state.files.values()) if decision.operator_state else set()
            for path in fs.ls(folder, detail=False):
                if f"{OPSTATE}/{batch}/{path.rstrip('/').rsplit('/', 1)[-1]}" not in named:
                    fs.rm(path, recursive=True)


def prune_due(batch: int) -> bool:
    """Whether the commit of ``batch`` also forgets what Spark can no longer
    replay (decisions, progress markers): every ``PRUNE_EVERY`` batches."""
    return batch % PRUNE_EVERY == 0


def oldest_replayable(checkpoint_location: str, newest: int) -> int:
    """The oldest batch Spark may still replay or restore: the first one of
    its offset log (Spark deletes older entries, keeping
    ``minBatchesToRetain``), never above ``newest``. Without a readable
    offset log, ``newest - RETAIN_BATCHES``."""
    oldest = spark_batches(checkpoint_location, "offsets")
    return min(oldest[0], newest) if oldest else newest - RETAIN_BATCHES


def spark_batches(checkpoint_location: str, log: str) -> list[int]:
    """The batch ids in one of Spark's logs (``offsets``, ``commits``), sorted."""
    fs, path = fsspec.core.url_to_fs(fs_path(checkpoint_location).rstrip("/") + "/" + log)
    fs.invalidate_cache(path)  # Spark's JVM writes these logs: a cached listing would be stale
    try:
        names = fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    bases = (n.rstrip("/").rsplit("/", 1)[-1] for n in names)
    return sorted(int(b) for b in bases if b.isdigit())


def latest_planned_batch(checkpoint_location: str) -> int | None:
    """The newest batch id in Spark's offset log: the batch being planned."""
    ids = spark_batches(checkpoint_location, "offsets")
    return ids[-1] if ids else None


@dataclass(frozen=True)
class Settlement:
    """One sweep's settled in-doubt transactions (``DecisionLog.record_settled``)."""

    #: ``<sink-id>/<file>``: unique, so that a reader counts each once.
    key: str
    at: float
    committed: int
    rolled_back: int


def settlements(checkpoint_location: str, since: float = 0.0) -> list[Settlement]:
    """The sweeps of every sink of a checkpoint that settled something at or
    after ``since`` (seconds since the epoch), oldest first."""
    fs, root = fsspec.core.url_to_fs(fs_path(checkpoint_location).rstrip("/") + "/" + SINKS)
    try:
        paths = fs.glob(f"{root}/*/{SETTLED}/*.json")
    except FileNotFoundError:
        return []
    found = []
    for path in paths:
        sink_id, _, name = path[len(root) + 1:].split("/", 2)
        try:
            with fs.open(path, "rb") as handle:
                data = json.loads(handle.read())
        except (FileNotFoundError, json.JSONDecodeError):
            continue  # an unfinished write is a temporary file, not matched
        at = float(data.get("at", 0))
        if at >= since:
            found.append(Settlement(f"{sink_id}/{name}", at, len(data.get("committed", ())),
                                    len(data.get("rolledBack", ()))))
    return sorted(found, key=lambda s: (s.at, s.key))


def last_commit_time(checkpoint_location: str) -> float | None:
    """When the newest batch of Spark's commit log was committed: the
    modification time of ``commits/<n>``, which Spark writes whole at the
    end of batch n. None for a query with no committed batch."""
    fs, path = fsspec.core.url_to_fs(fs_path(checkpoint_location).rstrip("/") + "/commits")
    fs.invalidate_cache(path)  # written by Spark's JVM, not through this file system object
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return None
    committed = [e for e in entries if e["name"].rstrip("/").rsplit("/", 1)[-1].isdigit()]
    if not committed:
        return None
    newest = max(committed, key=lambda e: int(e["name"].rstrip("/").rsplit("/", 1)[-1]))
    return file_mtime(newest)
