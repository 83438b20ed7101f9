"""Savepoints: one committed batch of a checkpoint, copied whole, restorable anywhere.

Why: a job is identified by its checkpoint directory, and that directory
is bound to one place and one run of the job. A savepoint (Flink: a
savepoint) is a self-contained, portable copy of one committed batch --
its offsets, commits, query metadata, source and state files, eoskit's sink
metadata and a manifest -- that can be moved to another directory or file
system (local, S3, anything fsspec writes) and restored into a new
checkpoint directory, from which Spark resumes with the batch after it.

What a savepoint of batch b holds (the copy rule), paths as in the checkpoint:

- ``metadata`` (the query id);
- ``offsets/b`` and ``commits/b``, and ``offsets/b-1`` (with ``commits/b-1``
  where retained): on start Spark reads the newest offset-log entry, and
  the one before it for the start offsets, then sees the commit of b and
  plans b+1 from b's end offsets;
- ``sources/**``, except a source's log entries of batches after b;
- ``state/**``: store files of versions <= b+1 (batch b committed version
  b+1, which b+1 loads; older deltas and snapshots are kept since a
  version is rebuilt from the last snapshot below it), RocksDB's ``SSTs/``
  and every other file, except operator metadata and schema files of
  batches after b (``_metadata/v2/<n>``, ``_stateSchema/**/<n>_*``);
- ``offsets/b+1``, if Spark had planned batch b+1 without committing it
  (a stop interrupts the batch in flight, possibly after a sink committed
  it): the restored job replays b+1 with the same offsets, as a restart in
  place would, so each sink's record of b+1 still holds;
- ``eoskit/sinks/<id>/``: ``sink.json``, ``meta/``, and decisions of
  batches <= b, and of b+1 when ``offsets/b+1`` is copied (a decision of
  b+1 without its offsets would make the restored job skip a b+1 planned
  anew, with other offsets; without the decision, a b+1 a sink had
  committed would be written twice), and the operator state files
  (``opstate/<n>/<p>-<a>.arrow``) those copied decisions name, none other
  (a losing attempt's file is not state); ``aborted/`` belongs to a failed
  run and is left out;
- ``eoskit/broadcast/<name>/``: ``broadcast.json`` and the versions of the
  broadcast state that the copied offset entries pin (their snapshots, and
  pointers where published), none other;
- Hadoop's ``.crc`` file beside each copied file;
- ``_savepoint.json``, the manifest, written last: a copy without it is not
  a savepoint. Besides what ``eoskit savepoint inspect`` shows, it holds the
  query's fingerprint (``runtime/job/fingerprint.py``): the source, the eoskit
  sinks and the stateful operators a restored job must match. A local savepoint is built in a sibling directory and
  renamed into place, so it appears whole or not at all.

A restore given the new job's fingerprint (``expect``) first compares it
with the savepoint's and refuses, naming every difference, before a file
is copied; a savepoint without a fingerprint (an older eoskit's) is
restored unchecked, with a warning. A restore copies the files into an empty checkpoint directory and adds
``eoskit/restored.json`` (which savepoint, which original checkpoint, the
sink ids it carries), so that the runtime can keep the sinks' ids across
the move. Nothing here imports Spark.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from eoskit.runtime.job import fingerprint as fingerprints
from eoskit.core.fs import write_atomic
from eoskit.twophase.decision_log import DECISIONS, META, SINK_MARKER, SINKS, batch_of
from eoskit.twophase.identity import IDENTITY, RESTORED
from eoskit.runtime.state.checkpoints import (
    STATE_FILE,
    Checkpoint,
    CheckpointError,
    SinkInfo,
    StateOperator,
    StorageOptions,
    basename,
    list_files,
    location_url,
    logical_name,
    open_location,
)
from eoskit.runtime.state.savepoint_connectors import broadcast_files, operator_state_files
from eoskit.runtime.state.restored_paths import hadoop_url, repoint_schema_paths

log = logging.getLogger(__name__)

MANIFEST = "_savepoint.json"
#: The manifest's name while ``dispose_savepoint`` deletes the files.
DISPOSING = "_savepoint.disposing.json"
#: Written into a restored checkpoint.
RESTORE_RECORD = RESTORED
FORMAT = 1

_BATCH_NAMED = re.compile(r"^(\d+)(?:\.compact|_.*)?$")


class SavepointError(ValueError):
    """A savepoint cannot be made, read, restored or disposed of; names the path."""


class NotASavepointError(SavepointError):
    """The path exists but holds no savepoint manifest."""


class SavepointOfAnotherJobError(SavepointError):
    """A restore was asked for one job with a savepoint of another."""


class IncompatibleSavepointError(SavepointError):
    """The job restored from a savepoint runs another query than the savepoint's."""

    def __init__(self, location: str, differences: list[str]) -> None:
        self.differences = differences
        super().__init__(
            f"savepoint {location} does not fit this job's query: {'; '.join(differences)}. "
            "Nothing was restored: restore the savepoint into the job it was taken of, or "
            "start the changed job on a new checkpoint without --from-savepoint")


@dataclass(frozen=True)
class SavepointManifest:
    """What ``_savepoint.json`` says about a savepoint."""

    job_name: str
    batch: int
    query_id: str | None
    #: The checkpoint the savepoint was taken from.
    checkpoint: str
    created_at: float
    spark_version: str | None
    eoskit_version: str | None
    batch_timestamp_ms: int | None
    #: The batch's end offsets, one per source (eoskit-kafka: {"topic": {"0": 42}}).
    offsets: tuple[Any, ...]
    state_operators: tuple[StateOperator, ...]
    #: The sinks (their ids travel with the savepoint) and their decision of ``batch``.
    sinks: tuple[SinkInfo, ...]
    sink_decisions: dict[str, str]
    #: (relative path, bytes) of every file but the manifest.
    files: tuple[tuple[str, int], ...]
    extra: dict[str, Any] = field(default_factory=dict)
    #: What a restored job must match (``runtime/job/fingerprint.py``); None in
    #: savepoints of an eoskit that wrote none.
    fingerprint: dict[str, Any] | None = None
    format: int = FORMAT
    #: Where it was read from or written to (not stored).
    location: str = ""

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format, "jobName": self.job_name, "batch": self.batch,
            "queryId": self.query_id, "checkpoint": self.checkpoint, "createdAt": self.created_at,
            "sparkVersion": self.spark_version, "eoskitVersion": self.eoskit_version,
            "batchTimestampMs": self.batch_timestamp_ms, "offsets": list(self.offsets),
            "stateOperators": [op.to_json() for op in self.state_operators],
            "sinks": [dict(s.to_json(), decision=self.sink_decisions.get(s.sink_id, "none"))
                      for s in self.sinks],
            "files": [{"path": path, "size": size} for path, size in self.files],
            "extra": self.extra,
            **({"fingerprint": self.fingerprint} if self.fingerprint is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], location: str) -> SavepointManifest:
        fmt = data.get("format")
        if not isinstance(fmt, int) or fmt > FORMAT:
            raise SavepointError(f"savepoint {location} has manifest format {fmt!r}; this eoskit "
                                 f"reads format {FORMAT} and older: use the eoskit that wrote it")
        try:
            return cls(
                job_name=data["jobName"], batch=int(data["batch"]), query_id=data.get("queryId"),
                checkpoint=data["checkpoint"], created_at=float(data["createdAt"]),
                spark_version=data.get("sparkVersion"), eoskit_version=data.get("eoskitVersion"),
                batch_timestamp_ms=data.get("batchTimestampMs"), offsets=tuple(data.get("offsets", ())),
                state_operators=tuple(StateOperator.from_json(o) for o in data.get("stateOperators", ())),
                sinks=tuple(SinkInfo.from_json(s) for s in data.get("sinks", ())),
                sink_decisions={s["sinkId"]: s.get("decision", "none") for s in data.get("sinks", ())},
                files=tuple((f["path"], int(f["size"])) for f in data["files"]),
                extra=dict(data.get("extra") or {}), format=fmt, location=location,
                fingerprint=dict(data["fingerprint"]) if data.get("fingerprint") is not None else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise SavepointError(f"savepoint {location}: its {MANIFEST} is incomplete or malformed "
                                 f"({type(exc).__name__}: {exc})") from None


# -- which files a savepoint of batch b holds ---------------------------------------

def savepoint_files(checkpoint: Checkpoint, batch: int) -> list[tuple[str, int]]:
    """(relative path, bytes) of what a savepoint of ``batch`` copies (see the module doc)."""
    offsets, commits = set(checkpoint.batch_ids()), set(checkpoint.committed_ids())
    if batch not in offsets or batch not in commits:
        raise SavepointError(
            f"batch {batch} of {checkpoint.location} is not a committed batch "
            f"(committed and retained: {_ranges(sorted(offsets & commits)) or 'none'})")
    if batch > 0 and batch - 1 not in offsets:
        raise SavepointError(
            f"offsets/{batch - 1} is gone from {checkpoint.location}: Spark needs the offset-log "
            f"entry before batch {batch} to resume from it; take a savepoint of a newer batch")
    wanted_logs = {f"offsets/{batch}", f"commits/{batch}", f"offsets/{batch - 1}", f"commits/{batch - 1}"}
    last = batch
    if batch + 1 in offsets and batch + 1 not in commits:
        wanted_logs.add(f"offsets/{batch + 1}")  # planned, maybe committed by a sink
        last = batch + 1
    files = checkpoint.files()
    kept = [rel for rel in sorted(files) if _keep(rel, batch, last, wanted_logs)]
    try:
        kept += operator_state_files(checkpoint, kept, files)
        logged = [n for n in range(max(0, batch - 1), last + 1) if f"offsets/{n}" in wanted_logs]
        kept += broadcast_files(checkpoint, logged, files)
    except FileNotFoundError as exc:
        raise SavepointError(str(exc)) from None
    return [(rel, int(files[rel].get("size") or 0)) for rel in sorted(set(kept))]


def _keep(rel: str, batch: int, last: int, wanted_logs: set[str]) -> bool:
    """Is ``rel`` part of a savepoint of ``batch`` whose offset log goes up
    to ``last`` (``batch``, or the planned ``batch + 1``)?"""
    parts = rel.split("/")
    name = logical_name(parts[-1])
    top = parts[0]
    if len(parts) == 1:
        return name == "metadata"
    if top in ("offsets", "commits"):
        return f"{top}/{name}" in wanted_logs
    if top == "sources":
        match = _BATCH_NAMED.match(name)
        return match is None or int(match[1]) <= last
    if top == "state":
        return _keep_state(parts, name, batch)
    if rel == IDENTITY:
        return True  # the default sink id travels with the job (twophase/identity.py)
    if parts[:2] == SINKS.split("/") and len(parts) >= 4:
        kind = parts[3]
        if len(parts) == 4:
            return name == SINK_MARKER
        if kind == META:
            return not name.endswith(".tmp")
        if kind == DECISIONS and len(parts) == 5 and (decided := batch_of(name)) is not None:
            return decided <= last
    return False


def _keep_state(parts: list[str], name: str, batch: int) -> bool:
    # state/<op>/<partition>/[<store>/]<version>.<kind>: versions up to b+1.
    match = STATE_FILE.match(name)
    if match is not None and len(parts) >= 4 and parts[2].isdigit():
        return int(match[1]) <= batch + 1
    # Operator metadata and schema files named by the batch that wrote them.
    if "_metadata" in parts[2:-1] or "_stateSchema" in parts[2:-1]:
        named = _BATCH_NAMED.match(name)
        if named is not None and name != "metadata":
            return int(named[1]) <= batch
    return True


def _ranges(ids: list[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if ids else ""


# -- copying between file systems -------------------------------------------------------

def _copy_files(src_fs: AbstractFileSystem, src_root: str, dst_fs: AbstractFileSystem, dst_root: str,
                files: Iterable[tuple[str, int]], what: str) -> None:
    made: set[str] = set()
    for rel, size in files:
        src, dst = f"{src_root}/{rel}", f"{dst_root}/{rel}"
        parent = dst.rsplit("/", 1)[0]
        if parent not in made:
            dst_fs.makedirs(parent, exist_ok=True)
            made.add(parent)
        try:
            with src_fs.open(src, "rb") as fin, dst_fs.open(dst, "wb") as fout:
                copied = 0
                while chunk := fin.read(1 << 20):
                    fout.write(chunk)
                    copied += len(chunk)
        except FileNotFoundError:
            raise SavepointError(f"{what}: {rel} vanished while it was copied (Spark purges old "
                                 "batches as the job runs): copy a newer batch") from None
        if copied != size:
            raise SavepointError(f"{what}: {rel} has {copied} bytes, {size} were listed")


def _write_json(fs: AbstractFileSystem, path: str, payload: Mapping[str, Any]) -> None:
    write_atomic(fs, path, json.dumps(payload, indent=1, sort_keys=True).encode())


def _require_empty(fs: AbstractFileSystem, root: str, location: str, what: str) -> None:
    if not fs.exists(root):
        return
    if not fs.isdir(root):
        raise SavepointError(f"{what} {location} is a file; give a new or empty directory")
    leftovers = list_files(fs, root)
    if leftovers:
        raise SavepointError(f"{what} {location} is not empty ({len(leftovers)} file(s), e.g. "
                             f"{sorted(leftovers)[0]}); give a new or empty directory")


def _populate(dst_fs: AbstractFileSystem, dst_root: str,
              fill: Callable[[AbstractFileSystem, str], None]) -> None:
    """Run ``fill(fs, root)``; a local target is filled in a sibling directory
    and renamed into place, so that it appears whole or not at all."""
    if not isinstance(dst_fs, LocalFileSystem):
        fill(dst_fs, dst_root)
        return
    parent = os.path.dirname(dst_root) or "."
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".{os.path.basename(dst_root)}.{uuid.uuid4().hex[:8]}.partial")
    try:
        fill(dst_fs, staging)
        try:
            os.replace(staging, dst_root)  # onto a missing or empty directory
        except OSError as exc:
            raise SavepointError(f"cannot move the copy into {dst_root}: {exc.strerror}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _version(package: str) -> str | None:
    try:
        return importlib_metadata.version(package)
    except importlib_metadata.PackageNotFoundError:
        return None


# -- the operations ------------------------------------------------------------------------

def create_savepoint(
    checkpoint: str | Checkpoint,
    target: str,
    batch: int | None = None,
    *,
    job_name: str,
    extra: Mapping[str, Any] | None = None,
    spark_version: str | None = None,
    storage_options: StorageOptions | None = None,
    job: Mapping[str, Any] | None = None,
) -> SavepointManifest:
    """Copy committed ``batch`` (default: the latest) of ``checkpoint`` into
    ``target``, a new or empty directory (any fsspec URL), manifest last.

    ``spark_version`` defaults to the installed PySpark's; ``extra`` is kept
    in the manifest as given (e.g. what the running job knew). ``job`` is
    the job's source and sinks (``fingerprint.of_pipeline(pipeline)``); the
    fingerprint adds the checkpoint's stateful operators and default sink id.
    """
    if not job_name:
        raise SavepointError("a savepoint needs the job's name (job_name)")
    ck = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint(checkpoint, storage_options)
    if batch is None:
        batch = ck.latest_committed()
        if batch is None:
            raise SavepointError(f"checkpoint {ck.location} has no committed batch to take a savepoint of")
    files = savepoint_files(ck, batch)
    info = ck.batch(batch)
    dst_fs, dst_root = open_location(str(target), storage_options)
    _require_empty(dst_fs, dst_root, str(target), "savepoint target")
    last = batch + 1 if any(rel == f"offsets/{batch + 1}" for rel, _ in files) else batch
    sinks = tuple(SinkInfo(s.sink_id, s.created_at, s.checkpoint_location,
                           tuple(n for n in s.decided_batches if n <= last), s.meta) for s in ck.sinks())
    operators = tuple(ck.state_operators(batch + 1, only={rel for rel, _ in files}))
    fingerprint = {key: value for key, value in (job or {}).items()
                   if key in ("source", "sinks")}
    fingerprint["stateOperators"] = fingerprints.checkpoint_operators(operators)
    fingerprint["defaultSinkId"] = (ck.read_json(IDENTITY) or {}).get("defaultSinkId")
    manifest = SavepointManifest(
        job_name=job_name, batch=batch, query_id=ck.query_id(), checkpoint=ck.url,
        created_at=time.time(), spark_version=spark_version or _version("pyspark"),
        eoskit_version=_version("eoskit"), batch_timestamp_ms=info.timestamp_ms,
        offsets=info.offsets, sinks=sinks,
        state_operators=operators, fingerprint=fingerprint,
        sink_decisions={s.sink_id: ck.sink_decision(s.sink_id, batch) for s in sinks},
        files=tuple(files), extra=dict(extra or {}), location=location_url(dst_fs, dst_root, str(target)),
    )

    def fill(fs: AbstractFileSystem, root: str) -> None:
        _copy_files(ck.fs, ck.root, fs, root, files, f"savepoint of {ck.location}")
        _write_json(fs, f"{root}/{MANIFEST}", manifest.to_json())  # last: now it is a savepoint

    _populate(dst_fs, dst_root, fill)
    return manifest


def _open_savepoint(path: str, storage_options: StorageOptions | None
                    ) -> tuple[AbstractFileSystem, str, str]:
    location = str(path)
    fs, root = open_location(location, storage_options)
    if basename(root) in (MANIFEST, DISPOSING):
        root = root.rsplit("/", 1)[0]
        location = location.rstrip("/").rsplit("/", 1)[0]
    if not fs.exists(root):
        raise SavepointError(f"savepoint {location}: no such file or directory")
    return fs, root, location


def _read_manifest(fs: AbstractFileSystem, root: str, location: str, name: str) -> SavepointManifest | None:
    try:
        with fs.open(f"{root}/{name}", "rb") as handle:
            data = json.loads(handle.read())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SavepointError(f"savepoint {location}: {name} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SavepointError(f"savepoint {location}: {name} is not a savepoint manifest")
    return SavepointManifest.from_json(data, location_url(fs, root, location))


def inspect_savepoint(path: str, *, verify: bool = True,
                      storage_options: StorageOptions | None = None) -> SavepointManifest:
    """The manifest of the savepoint at ``path``; with ``verify``, also check
    that every file it lists is there with its size."""
    fs, root, location = _open_savepoint(path, storage_options)
    manifest = _read_manifest(fs, root, location, MANIFEST)
    if manifest is None:
        raise NotASavepointError(_not_a_savepoint(fs, root, location))
    if verify:
        present = {rel: int(info.get("size") or 0) for rel, info in list_files(fs, root).items()}
        bad = [rel for rel, size in manifest.files if present.get(rel) != size]
        if bad:
            raise SavepointError(f"savepoint {location} is damaged: {len(bad)} file(s) missing or of "
                                 f"another size, e.g. {bad[0]}")
    return manifest


def _not_a_savepoint(fs: AbstractFileSystem, root: str, location: str) -> str:
    if fs.exists(f"{root}/{DISPOSING}"):
        return (f"{location} is a savepoint being disposed of: `eoskit savepoint dispose "
                f"{location}` finishes it")
    if not fs.isdir(root):
        return f"{location} is not a savepoint: it is a file (a savepoint is a directory with {MANIFEST})"
    names = {basename(p) for p in fs.ls(root, detail=False)}
    hint = (" (it looks like a checkpoint directory: `eoskit checkpoint inspect` reads those)"
            if {"offsets", "metadata"} & names else "")
    return f"{location} is not a savepoint: it has no {MANIFEST}{hint}"


@dataclass(frozen=True)
class Disposed:
    """What ``dispose_savepoint`` deleted, and what it left."""

    manifest: SavepointManifest
    #: Files under the savepoint that its manifest does not list (not deleted).
    leftovers: list[str]


def dispose_savepoint(path: str, *, storage_options: StorageOptions | None = None) -> Disposed:
    """Delete the savepoint at ``path``: the files its manifest lists, then the
    manifest. Refuses a path without a manifest, so it never deletes a random
    directory; files the manifest does not list are left (and named)."""
    fs, root, location = _open_savepoint(path, storage_options)
    manifest = _read_manifest(fs, root, location, MANIFEST)
    disposing = f"{root}/{DISPOSING}"
    if manifest is not None:
        # Step 1: from here on the directory is no savepoint, but dispose finishes it.
        _write_json(fs, disposing, manifest.to_json())
        fs.rm(f"{root}/{MANIFEST}")
    else:
        manifest = _read_manifest(fs, root, location, DISPOSING)
        if manifest is None:
            raise NotASavepointError(_not_a_savepoint(fs, root, location) + "; nothing was deleted")
    # Step 2: the listed files (some may be gone already: an interrupted dispose).
    for rel, _ in manifest.files:
        try:
            fs.rm(f"{root}/{rel}")
        except FileNotFoundError:
            pass
    fs.rm(disposing)
    leftovers = sorted(list_files(fs, root))
    if not leftovers:
        _remove_empty_dirs(fs, root)
    return Disposed(manifest, leftovers)


def _remove_empty_dirs(fs: AbstractFileSystem, root: str) -> None:
    if isinstance(fs, LocalFileSystem):
        for directory, _, _ in sorted(os.walk(root), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(directory)
            except OSError:
                pass
        return
    try:
        fs.rm(root, recursive=True)
    except FileNotFoundError:
        pass


def restore_savepoint(
    path: str,
    new_checkpoint: str,
    job_name: str | None = None,
    *,
    storage_options: StorageOptions | None = None,
    expect: Mapping[str, Any] | None = None,
    allow_non_restored_state: bool = False,
) -> SavepointManifest:
    """Copy the savepoint at ``path`` into ``new_checkpoint``, a new or empty
    directory, from which Spark resumes with the batch after the savepoint's.

    With ``job_name``, a savepoint of another job is refused; with
    ``expect``, the new job's fingerprint (``fingerprint.of_pipeline(pipeline,
    spark)``), a savepoint of another query (``IncompatibleSavepointError``).
    ``allow_non_restored_state`` lets a sink of the savepoint go unrestored
    (the job names a new sink id). The restored checkpoint gets
    ``eoskit/restored.json`` naming the savepoint, the checkpoint it came
    from and the sink ids it carries.
    """
    manifest = inspect_savepoint(path, storage_options=storage_options)
    if job_name is not None and manifest.job_name != job_name:
        raise SavepointOfAnotherJobError(
            f"savepoint {manifest.location} is of job {manifest.job_name!r}, not {job_name!r}: "
            "restore a savepoint of this job, or give the job its name")
    if expect is not None:
        check_compatible(manifest, expect, allow_non_restored_state)
    src_fs, src_root, _ = _open_savepoint(path, storage_options)
    dst_fs, dst_root = open_location(str(new_checkpoint), storage_options)
    _require_empty(dst_fs, dst_root, str(new_checkpoint), "checkpoint directory")
    record = {
        "savepoint": manifest.location, "jobName": manifest.job_name, "batch": manifest.batch,
        "queryId": manifest.query_id, "fromCheckpoint": manifest.checkpoint,
        "sinkIds": [s.sink_id for s in manifest.sinks], "restoredAt": time.time(),
    }

    def fill(fs: AbstractFileSystem, root: str) -> None:
        _copy_files(src_fs, src_root, fs, root, manifest.files, f"restore of {manifest.location}")
        repoint_schema_paths(fs, root, manifest.files, hadoop_url(str(new_checkpoint)))
        _write_json(fs, f"{root}/{RESTORE_RECORD}", record)

    _populate(dst_fs, dst_root, fill)
    restored = Checkpoint(str(new_checkpoint), storage_options)
    if restored.latest_committed() != manifest.batch:
        raise CheckpointError(f"restored checkpoint {new_checkpoint} resumes after batch "
                              f"{restored.latest_committed()}, not {manifest.batch}")
    return manifest


def check_compatible(manifest: SavepointManifest, expect: Mapping[str, Any],
                     allow_non_restored_state: bool = False) -> None:
    """Refuse a job whose query differs from the savepoint's
    (``IncompatibleSavepointError``, every difference named); say what could not
    be checked."""
    if manifest.fingerprint is None:
        log.warning("savepoint %s has no fingerprint of its query (written by eoskit %s): the "
                    "job restored from it is not checked for compatibility", manifest.location,
                    manifest.eoskit_version or "of an older version")
        return
    found = fingerprints.differences(manifest.fingerprint, expect, allow_non_restored_state)
    if found:
        raise IncompatibleSavepointError(manifest.location, found)
    skipped = fingerprints.unchecked(manifest.fingerprint, expect)
    if skipped:
        log.warning("savepoint %s: not checked against the restored job, for want of a record "
                    "on both sides: %s", manifest.location, ", ".join(skipped))


def restored_from(checkpoint: str, storage_options: StorageOptions | None = None) -> dict[str, Any] | None:
    """The restore record of a checkpoint made by ``restore_savepoint``, or None."""
    return Checkpoint(checkpoint, storage_options).read_json(RESTORE_RECORD)
