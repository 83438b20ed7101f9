"""Carrying on from a Spark query's own checkpoint (``eoskit checkpoint import-spark``).

A team moving a running ``kafka`` + ``foreachBatch(write.jdbc)`` query to
eoskit cannot point the eoskit query at the old checkpoint: Spark refuses a
changed source type there, and the old one has no decision log. This module
writes a *new* checkpoint from the old one's logs, from which the eoskit
query starts exactly where Spark's last committed batch ended. Nothing here
imports Spark; it reads and writes files through fsspec.

What is read (Spark 3.x and 4.x keep both logs in this shape, "v1"):

- ``offsets/<n>``: a version line, the batch's metadata (trigger time,
  watermark, the SQL settings Spark pins for the query) and one line of end
  offsets per source; Spark's ``kafka`` source writes
  ``{"topic":{"0":42,"1":17}}``, the shape eoskit-kafka's offsets take;
- ``commits/<n>``: present once batch n's sink finished (for ``foreachBatch``:
  the function returned).

What is written, for c the newest batch in both logs:

1. ``metadata``: a new query id (this is a new query, with a new sink);
2. ``offsets/c-1`` (when c > 0) and ``offsets/c`` with ``commits/c-1`` and
   ``commits/c``: on start Spark reads the newest offset entry and the one
   before it, sees c committed, and plans c+1 from c's end offsets. The
   metadata line is Spark's own, so the settings it pinned (shuffle
   partitions and the like) carry over;
3. ``offsets/c+1`` when Spark had planned c+1 without committing it: its
   sink may have written part of it (``write.jdbc`` commits per task). The
   eoskit query's first batch is then exactly that range again, no more: the
   re-read is bounded by the one batch Spark left open, and an upsert
   (``mode=upsert`` with ``key``) or the idempotent mode absorbs the rows it
   had written. A plain ``append`` would write them twice.

Refused, naming the cause: a checkpoint with no committed batch (give the
query ``startingOffsets`` instead), a query with more than one source or a
source that is not per topic-partition, a query that kept state (``state/``:
Spark's state is not eoskit's to convert), and a target that is not empty.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from fsspec import AbstractFileSystem

from eoskit.core.fs import write_atomic
from eoskit.runtime.state.checkpoints import (
    Checkpoint,
    CheckpointError,
    StorageOptions,
    list_files,
    open_location,
)

#: The commit-log entry Spark writes for a batch of a query without a watermark.
COMMIT_ENTRY = 'v1\n{"nextBatchWatermarkMs":0}'

Offsets = dict[str, dict[str, int]]


class SparkImportError(CheckpointError):
    """The Spark checkpoint cannot be carried on from (bad input: exit 2)."""


@dataclass(frozen=True)
class Imported:
    """What ``import_spark_checkpoint`` wrote."""

    source: str
    target: str
    #: The newest batch Spark committed; the eoskit query's logs end with it.
    batch: int
    #: Its end offsets: where the eoskit query starts reading.
    offsets: Offsets
    #: The end offsets of batch+1, when Spark had planned it without
    #: committing it: the eoskit query's first batch re-reads exactly that.
    replayed: Offsets | None
    #: Records in that range, per ``topic:partition``.
    replayed_records: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "batch": self.batch,
                "startOffsets": self.offsets, "replayedEndOffsets": self.replayed,
                "replayedRecords": self.replayed_records,
                "replayedTotal": sum(self.replayed_records.values())}


def _kafka_offsets(old: Checkpoint, batch: int) -> tuple[list[str], Offsets]:
    """Batch ``batch``'s entry lines and its one Kafka source's end offsets."""
    info = old.batch(batch)
    where = f"{old.location}/offsets/{batch}"
    if len(info.offsets) != 1:
        raise SparkImportError(
            f"{where} holds {len(info.offsets)} sources' offsets: only a query with one Kafka "
            "source can be carried on from")
    source = info.offsets[0]
    if not (isinstance(source, dict) and source and all(
            isinstance(parts, dict) and all(str(p).isdigit() and isinstance(o, int) and o >= 0
                                            for p, o in parts.items())
            for parts in source.values())):
        raise SparkImportError(
            f"{where}: the source's offsets are not Kafka's per-partition offsets "
            f"({json.dumps(source)[:120]}): only Spark's kafka source can be carried on from")
    _, lines = old._offset_entry(batch)
    return lines, {t: {p: int(o) for p, o in parts.items()} for t, parts in source.items()}


def _difference(end: Offsets, start: Offsets) -> dict[str, int]:
    """Records between two offset maps, per ``topic:partition`` (a partition
    new in ``end`` counted from 0, as a new partition starts)."""
    return {f"{topic}:{p}": end[topic][p] - start.get(topic, {}).get(p, 0)
            for topic in sorted(end) for p in sorted(end[topic], key=int)
            if end[topic][p] - start.get(topic, {}).get(p, 0) > 0}


def _refuse_state(old: Checkpoint) -> None:
    kept = [name for name in old.files() if name.startswith("state/")]
    if kept:
        raise SparkImportError(
            f"the Spark query of {old.location} kept state ({old.location}/state, {len(kept)} "
            "file(s)): only a stateless Kafka query can be carried on from; Spark's state is not "
            "converted. Start the eoskit query with startingOffsets instead and rebuild its state")


def _require_empty(fs: AbstractFileSystem, root: str, target: str) -> None:
    if fs.exists(root) and (not fs.isdir(root) or list_files(fs, root)):
        raise SparkImportError(f"the new checkpoint {target} must be a new or empty directory")


def import_spark_checkpoint(source: str, target: str,
                            storage_options: StorageOptions | None = None) -> Imported:
    """Write at ``target`` (new or empty) a checkpoint from which an eoskit
    query continues after the last batch the Spark query at ``source``
    committed (see the module's docstring for the files and why)."""
    old = Checkpoint(source, storage_options)
    committed = old.latest_committed()
    if committed is None:
        raise SparkImportError(
            f"{source} has no committed batch (commits/ holds none with its offsets/ entry): "
            "nothing to carry on from; start the eoskit query with startingOffsets")
    _refuse_state(old)
    lines, offsets = _kafka_offsets(old, committed)
    entries = {committed: lines}
    if committed > 0:
        if committed - 1 not in old.batch_ids():
            raise SparkImportError(f"{source}/offsets/{committed - 1} is missing: Spark itself "
                                   "could not restart this checkpoint")
        entries[committed - 1] = _kafka_offsets(old, committed - 1)[0]
    replayed = None
    if committed + 1 in old.batch_ids():
        entries[committed + 1], replayed = _kafka_offsets(old, committed + 1)
    fs, root = open_location(target, storage_options)
    _require_empty(fs, root, target)
    fs.makedirs(f"{root}/offsets", exist_ok=True)
    fs.makedirs(f"{root}/commits", exist_ok=True)
    for batch in sorted(entries):
        write_atomic(fs, f"{root}/offsets/{batch}", "\n".join(entries[batch]).encode())
        if batch <= committed:
            write_atomic(fs, f"{root}/commits/{batch}", COMMIT_ENTRY.encode())
    write_atomic(fs, f"{root}/metadata", json.dumps({"id": str(uuid.uuid4())}).encode())
    return Imported(old.url, target, committed, offsets, replayed,
                    _difference(replayed, offsets) if replayed else {})
