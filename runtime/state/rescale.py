"""Rescaling a stopped job's keyed state to a new number of partitions
(Flink: restoring a savepoint with a new parallelism), on Spark's offline
state repartition.

Why: a checkpoint's state is split into ``spark.sql.shuffle.partitions``
partitions when it is created, and Spark keeps that number for the
checkpoint's life: it is the upper bound of the job's parallelism, as
Flink's max parallelism is. Spark 4.2 added an offline repartition of a
stopped query's state (``StreamingCheckpointManager.repartition``,
SPARK-54346 and the PRs after it; reached from PySpark as the session's
``_streamingCheckpointManager``). If the last batch was n, it writes batch
n+1: an offset-log entry with n's offsets and the new partition count, the
state of batch n re-hashed into the new partitions as state version n+2,
the operators' metadata, and commits/n+1. Batch n+1 reads no input and
runs no sink; the next run starts at n+2 with the new partitions, and the
sinks' protocol keyed by batch id carries on (a skipped id is never
decided, so never written).

One rescale, step by step:

1. Check, without Spark (``plan``): the checkpoint exists and is one; no
   job runs on it (eoskit's run record, ``control.py``); its newest planned
   batch committed (offsets/n has commits/n; Spark would otherwise refuse,
   or with ``enforceExactlyOnceSink=false`` skip the batch, which an
   exactly-once sink must never see); it has stateful operators; its state
   is on RocksDB (Spark 4.3 refuses the HDFS-backed store, and only after
   it has written the repartition batch's offsets); the target is a whole
   number >= 1 and not the current one.
2. Check Spark: 4.2 or later, and no query of this session on the
   checkpoint.
3. Claim the checkpoint as a running job does, so that ``eoskit run``
   started meanwhile is refused.
4. Write a journal (``eoskit/rescale.json``) listing every file and
   directory of the checkpoint outside ``eoskit/``, before Spark touches it.
5. Spark repartitions. Its steps are not atomic -- a failure after the
   first leaves an uncommitted batch n+1 that a restarted query would run
   with the new count over the old state -- but none of them changes or
   removes a file that was there before: each adds new ones (a new
   offset-log and commit-log entry, a new state version, new metadata).
6. On success, check commits/n+1 names the new count; remove the journal.
   On failure (Spark's error, Ctrl-C), roll back: remove every file and
   directory the journal did not list, check the listed ones are all still
   there at their sizes, remove the journal. The checkpoint is then what
   it was, file for file.
7. A rescale killed between steps 4 and 6 leaves the journal: ``eoskit
   run`` refuses the checkpoint while it is there (``refuse_unfinished``),
   and the next ``eoskit state rescale`` finishes the bookkeeping -- the
   journal is dropped if commits/n+1 shows the repartition completed, else
   the partial one is rolled back -- before it starts its own.

Why a journal and not a rewritten copy swapped in by renames: a
``transformWithState`` operator's metadata names its schema files by
absolute path, so state rewritten in a copy would point into the copy once
renamed back; directory renames are not atomic on object stores either;
and a copy doubles the state's size on disk for the length of the rewrite.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from eoskit.core.fs import write_atomic
from eoskit.runtime.spark.errors import root_cause
from eoskit.runtime.state.checkpoints import Checkpoint, CheckpointError, list_files
from eoskit.runtime.job.control import ControlDir
from eoskit.runtime.state.backend import PROVIDER_KEY, PROVIDERS, backend_of
from eoskit.runtime.state.inspection import PARTITIONS_KEY
from eoskit.twophase.verdicts import Verdict

#: The first Spark with an offline state repartition.
MIN_SPARK = (4, 2)
#: Where an unfinished rescale leaves its list of the checkpoint's files.
JOURNAL = "eoskit/rescale.json"
#: eoskit's own files (control, decision logs): outside what a rescale may touch.
_OWN = "eoskit/"


class RescaleError(ValueError):
    """A rescale refused before anything was written: names the checkpoint
    and what is wrong with it, or with the request."""


class CheckpointInUseError(RescaleError):
    """The checkpoint is in use by a running job: the operation cannot be
    done now, whatever was asked (exit 1, as ``eoskit run``'s refusal of a
    second job on one checkpoint), not bad input."""

    verdict: ClassVar[Verdict] = Verdict.PERMANENT


class RescaleFailed(RuntimeError):
    """Spark's repartition failed; the checkpoint was rolled back as it was."""


@dataclass(frozen=True)
class RescalePlan:
    """What a rescale of a checkpoint will do."""

    checkpoint: str
    #: The newest committed batch: the state that is repartitioned.
    batch: int
    partitions: int
    target: int
    #: Stateful operators, as ``id (name)``.
    operators: tuple[str, ...]
    #: What was done first about an interrupted earlier rescale, if there was one.
    earlier: str | None = None

    @property
    def repartition_batch(self) -> int:
        return self.batch + 1

    def to_json(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "batch": self.batch, "repartitionBatch": self.repartition_batch,
                "partitions": self.partitions, "target": self.target, "operators": list(self.operators),
                "earlier": self.earlier}


def spark_version(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise RescaleError(f"cannot read Spark's version {version!r}")
    return int(match[1]), int(match[2])


def require_spark(version: str) -> None:
    """Refuse a Spark without the offline state repartition, naming both versions."""
    if spark_version(version) < MIN_SPARK:
        raise RescaleError(
            f"eoskit state rescale needs Spark {MIN_SPARK[0]}.{MIN_SPARK[1]} or later (its offline "
            f"state repartition, StreamingCheckpointManager.repartition); this is Spark {version}. "
            "On this Spark, a new partition count means a new checkpoint (docs/state.md#rescaling)")


def check_target(partitions: Any) -> int:
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise RescaleError(f"--partitions must be a whole number of at least 1; it is {partitions!r}")
    return partitions


def partitions_of(ck: Checkpoint, batch: int) -> int:
    """The state partitions Spark recorded with ``batch`` in its offset log."""
    _, conf = ck.batch_conf(batch) or (batch, {})
    value = conf.get(PARTITIONS_KEY)
    if value is None or not value.isdigit():
        raise RescaleError(f"checkpoint {ck.location}: offsets/{batch} records no {PARTITIONS_KEY} "
                           "(a checkpoint written before Spark 4.0 cannot be rescaled)")
    return int(value)


def refuse_backend(checkpoint: str, batch: int, conf: Mapping[str, str]) -> None:
    """Spark 4.2 and 4.3 repartition RocksDB state only (their state source
    refuses the HDFS-backed store: ``UNSUPPORTED_PROVIDER``, after the
    repartition batch's offset-log entry is written)."""
    provider = conf.get(PROVIDER_KEY, PROVIDERS["hashmap"])  # Spark's default
    if provider != PROVIDERS["rocksdb"]:
        raise RescaleError(
            f"checkpoint {checkpoint} keeps its state in {backend_of(provider) or provider!r} "
            f"({provider.rsplit('.', 1)[-1]}, recorded in offsets/{batch}); Spark's state repartition "
            "supports the rocksdb backend only (Spark 4.3: UNSUPPORTED_PROVIDER), and a checkpoint's "
            "backend is fixed for its life: a new partition count means a new checkpoint "
            "(docs/state.md#rescaling)")


def refuse_running(checkpoint: str) -> None:
    running = ControlDir(checkpoint).live_run()
    if running is not None:
        raise CheckpointInUseError(
            f"checkpoint {checkpoint} is in use by job {running.get('job')!r} (pid {running.get('pid')} "
            f"on {running.get('host')}): rescale a stopped job only; stop it first "
            f"(eoskit stop --checkpoint-dir {checkpoint})")


def check_arguments(checkpoint: str, partitions: Any) -> tuple[Checkpoint, int]:
    """The checkpoint is one, the partition count a valid one (what the CLI
    checks before it starts Spark); raises ``RescaleError``."""
    target = check_target(partitions)
    try:
        return Checkpoint(checkpoint), target
    except CheckpointError as exc:
        raise RescaleError(str(exc)) from None


def plan(checkpoint: str, partitions: Any) -> RescalePlan:
    """Step 1: every check that needs no Spark; raises ``RescaleError``."""
    ck, target = check_arguments(checkpoint, partitions)
    refuse_running(checkpoint)
    if ck.read_json(JOURNAL) is not None:
        refuse_unfinished(checkpoint)
    planned, committed = ck.batch_ids(), set(ck.committed_ids())
    if not planned:
        raise RescaleError(f"checkpoint {checkpoint} has no batch yet: there is no state to rescale; "
                           f"start the job with {PARTITIONS_KEY} set to the partitions wanted")
    last = planned[-1]
    if last not in committed:
        raise RescaleError(
            f"checkpoint {checkpoint}: its last batch {last} did not commit (offsets/{last} has no "
            f"commits/{last}): the job stopped in the middle of a batch. Run it again until that batch "
            "commits (eoskit run ... --until-caught-up), then rescale; rescaling now would make the "
            "exactly-once sinks skip or repeat it")
    operators = ck.state_operators(count_rows=False)
    if not operators:
        raise RescaleError(f"checkpoint {checkpoint} has no keyed state (no stateful operator): "
                           "there is nothing to rescale")
    _, conf = ck.batch_conf(last) or (last, {})
    refuse_backend(checkpoint, last, conf)
    current = partitions_of(ck, last)
    if current == target:
        raise RescaleError(f"checkpoint {checkpoint} already has {target} state partitions "
                           f"(batch {last}): nothing to do")
    return RescalePlan(ck.url, last, current, target,
                       tuple(f"{op.operator_id} ({op.name or '?'})" for op in operators))


# -- the journal -------------------------------------------------------------------

def _listing(ck: Checkpoint) -> tuple[dict[str, int], list[str]]:
    """(files with their sizes, directories) of the checkpoint outside ``eoskit/``."""
    files = {rel: int(info.get("size") or 0) for rel, info in list_files(ck.fs, ck.root).items()
             if not rel.startswith(_OWN)}
    prefix = ck.root.rstrip("/") + "/"
    try:
        found = ck.fs.find(ck.root, withdirs=True, detail=True)
    except FileNotFoundError:
        found = {}
    dirs = sorted(path[len(prefix):] for path, info in found.items()
                  if info.get("type") == "directory" and path.startswith(prefix)
                  and not (path[len(prefix):] + "/").startswith(_OWN))
    return files, dirs


def _write_journal(ck: Checkpoint, payload: Mapping[str, Any]) -> None:
    ck.fs.makedirs(ck.path("eoskit"), exist_ok=True)
    write_atomic(ck.fs, ck.path(JOURNAL), json.dumps(payload, sort_keys=True).encode())


def read_journal(checkpoint: str) -> dict[str, Any] | None:
    """The journal of an unfinished rescale of ``checkpoint``, or None."""
    try:
        ck = Checkpoint(checkpoint)
    except CheckpointError:
        return None
    return ck.read_json(JOURNAL)


def refuse_unfinished(checkpoint: str) -> None:
    """For ``eoskit run``: refuse a checkpoint whose rescale was interrupted."""
    journal = read_journal(checkpoint)
    if journal is not None:
        raise RescaleError(
            f"checkpoint {checkpoint} holds an unfinished rescale ({JOURNAL}: from "
            f"{journal.get('from')} to {journal.get('to')} state partitions, begun "
            f"{time.time() - journal.get('at', time.time()):.0f} s ago): run `eoskit state rescale "
            f"--checkpoint-dir {checkpoint} --partitions {journal.get('to')}` again, which "
            "finishes or rolls back the interrupted one first")


def _completed(ck: Checkpoint, journal: Mapping[str, Any]) -> bool:
    batch = int(journal["batch"]) + 1
    if batch not in ck.committed_ids() or batch not in ck.batch_ids():
        return False
    try:
        return partitions_of(ck, batch) == int(journal["to"])
    except RescaleError:
        return False


def roll_back(ck: Checkpoint, journal: Mapping[str, Any]) -> list[str]:
    """Remove what the rescale added; returns the files removed. Raises
    ``RescaleFailed`` if a file the journal lists is gone or changed size."""
    before: dict[str, int] = dict(journal["files"])
    now, dirs = _listing(ck)
    added = sorted(set(now) - set(before))
    for rel in added:
        ck.fs.rm_file(ck.path(rel))
    for rel in sorted(set(dirs) - set(journal.get("dirs", ())), key=lambda d: d.count("/"), reverse=True):
        try:
            ck.fs.rmdir(ck.path(rel))
        except (OSError, NotImplementedError):
            pass  # not empty (should not be), or an object store's virtual directory
    now, _ = _listing(ck)
    damaged = sorted(rel for rel, size in before.items() if now.get(rel) != size)
    if damaged:
        raise RescaleFailed(
            f"checkpoint {ck.location}: rolled back the rescale's new files, but {len(damaged)} files "
            f"it found are gone or changed ({', '.join(damaged[:5])}{', ...' if len(damaged) > 5 else ''}); "
            f"{JOURNAL} is kept: restore the checkpoint from a savepoint")
    ck.fs.rm_file(ck.path(JOURNAL))
    return added


def finish_unfinished(checkpoint: str) -> str | None:
    """Step 7: settle a rescale that was interrupted; what was done, or None."""
    ck = Checkpoint(checkpoint)
    journal = ck.read_json(JOURNAL)
    if journal is None:
        return None
    refuse_running(checkpoint)  # the rescale itself, still at work
    if _completed(ck, journal):
        ck.fs.rm_file(ck.path(JOURNAL))
        return (f"the interrupted rescale to {journal['to']} partitions had completed "
                f"(batch {int(journal['batch']) + 1} committed); kept it")
    removed = roll_back(ck, journal)
    return (f"rolled back an interrupted rescale to {journal['to']} partitions "
            f"({len(removed)} partial files removed)")


# -- the rescale -------------------------------------------------------------------

def _active_on(spark: Any, url: str) -> str | None:
    for query in spark.streams.active:
        try:
            root = str(query._jsq.resolvedCheckpointRoot())  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - Spark Connect: the run record is the check
            continue
        if root.removeprefix("file:").rstrip("/") == url.removeprefix("file:").rstrip("/"):
            return query.name or str(query.id)
    return None


def rescale(spark: Any, checkpoint: str, partitions: Any) -> RescalePlan:
    """Repartition the state of the stopped job on ``checkpoint`` into
    ``partitions`` partitions (module docstring, steps 1-6)."""
    check_target(partitions)
    try:
        earlier = finish_unfinished(checkpoint)  # Step 7, for the one before
    except CheckpointError as exc:
        raise RescaleError(str(exc)) from None
    planned = replace(plan(checkpoint, partitions), earlier=earlier)  # Step 1
    require_spark(spark.version)  # Step 2
    manager = getattr(spark, "_streamingCheckpointManager", None)
    if manager is None:
        raise RescaleError(f"this PySpark ({spark.version}) has no StreamingCheckpointManager "
                           "(Spark Connect, or a build without it): rescale needs classic PySpark 4.2+")
    query = _active_on(spark, planned.checkpoint)
    if query is not None:
        raise CheckpointInUseError(f"checkpoint {checkpoint} is in use by query {query} of this Spark session: "
                           "stop it first")
    record = ControlDir(checkpoint).claim("eoskit state rescale")  # Step 3
    ck = Checkpoint(checkpoint)
    try:
        files, dirs = _listing(ck)  # Step 4
        journal = {"from": planned.partitions, "to": planned.target, "batch": planned.batch,
                   "at": time.time(), "files": files, "dirs": dirs}
        _write_journal(ck, journal)
        try:
            manager.repartition(planned.checkpoint, planned.target, True)  # Step 5
            if not _completed(ck, journal):
                raise RescaleFailed(f"Spark's repartition of {checkpoint} returned, but commits/"
                                    f"{planned.repartition_batch} does not record {planned.target} partitions")
        except BaseException as exc:  # Step 6, failure: Spark's error, Ctrl-C
            removed = roll_back(ck, journal)
            if isinstance(exc, (RescaleFailed, KeyboardInterrupt)):
                raise
            raise RescaleFailed(f"Spark could not repartition the state of {checkpoint} into "
                                f"{planned.target} partitions: {root_cause(exc)}; the checkpoint is "
                                f"unchanged (rolled back {len(removed)} files it had written)") from exc
        ck.fs.rm_file(ck.path(JOURNAL))  # Step 6, success
    finally:
        record.release()
    return planned


__all__ = ["JOURNAL", "MIN_SPARK", "RescaleError", "RescaleFailed", "RescalePlan", "finish_unfinished",
           "plan", "read_journal", "refuse_running", "refuse_unfinished", "require_spark", "rescale", "roll_back"]
