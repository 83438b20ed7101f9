"""A Structured Streaming checkpoint directory, read without Spark.

Why: a job is identified by its checkpoint directory (Flink: the retained
checkpoints of a job), and an operator needs to see what it holds -- which
batches are retained, their end offsets, whether each is committed, what
each eoskit sink decided, how big the state is -- without starting a
query. ``eoskit checkpoint list|inspect`` and the savepoint storage
(``eoskit.runtime.state.savepoints``) are built on this module.

The layout, as Spark 4 writes it (every file is written whole, by an atomic
rename on HDFS-like file systems or a single PUT on object stores; Hadoop's
local file system adds a ``.<name>.crc`` checksum beside each file)::

    metadata              {"id": "<query id>"}, written when the query first starts
    offsets/<n>           batch n's end offsets, written before batch n runs (the
                          barrier): "v1", Spark's batch metadata JSON
                          (batchWatermarkMs, batchTimestampMs, conf), then one line
                          per source (eoskit-kafka: {"topic": {"0": 42}}; "-" for none)
    commits/<n>           batch n completed: "v1", {"nextBatchWatermarkMs": ...}
    sources/<i>/...       a source's own metadata log (file sources), by batch id
    state/<op>/<part>/    a state store partition: HDFS-backed <v>.delta,
                          <v>.snapshot; RocksDB <v>.zip, <v>.changelog, SSTs/;
                          join operators have one such directory per store
    state/<op>/_metadata/ operator metadata (v1: metadata; v2: v2/<batch>) and,
                          per partition, _metadata/schema; _stateSchema/ (v3)
    eoskit/sinks/<id>/    eoskit's decision log (``eoskit.twophase.decision_log``)

State version v is the state after batch v-1: batch n loads version n and
commits version n+1. Spark keeps the last ``minBatchesToRetain`` (100)
batches of every log and the state files they need.

Locations are local paths or fsspec URLs; Hadoop's ``s3a://`` and ``file:``
are mapped as the decision log maps them. ``storage_options`` gives fsspec
options per protocol, e.g. ``{"s3": {"endpoint_url": ...}}``.
"""

from __future__ import annotations

import json
import re
import struct
import zipfile
from collections.abc import Collection, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from eoskit.core.fs import StorageOptions, open_location
from eoskit.twophase.decision_log import (
    ABORTED,
    DECISIONS,
    META,
    SINK_MARKER,
    SINKS,
    batch_file,
    batch_of,
    file_mtime,
    sink_folder,
)


#: A state store file of version v: ``<v>.delta``, ``<v>_<uuid>.zip``, ...
STATE_FILE = re.compile(r"^(\d+)(?:_[0-9A-Za-z-]+)?\.(delta|snapshot|zip|changelog)$")


class CheckpointError(ValueError):
    """A checkpoint path is missing, is not a checkpoint, or lacks a batch."""


def require_directory(location: str, storage_options: StorageOptions | None = None
                      ) -> tuple[AbstractFileSystem, str]:
    """``open_location``, refusing (``CheckpointError``: bad input, exit 2) a
    location that does not exist or is a file, before anything is started."""
    fs, root = open_location(location, storage_options)
    if not fs.exists(root):
        raise CheckpointError(f"checkpoint {location}: no such directory")
    if not fs.isdir(root):
        raise CheckpointError(f"checkpoint {location} is a file, not a checkpoint directory")
    return fs, root


def location_url(fs: AbstractFileSystem, path: str, given: str) -> str:
    """An absolute path for a local location; any other as given (a URL)."""
    return path if isinstance(fs, LocalFileSystem) else given.rstrip("/")


def list_files(fs: AbstractFileSystem, root: str) -> dict[str, dict[str, Any]]:
    """Every file under ``root`` (hidden ones too), by path relative to it."""
    try:
        found = fs.find(root, withdirs=False, detail=True)
    except FileNotFoundError:
        return {}
    prefix = root.rstrip("/") + "/"
    return {path[len(prefix):]: info for path, info in found.items()
            if path.startswith(prefix) and info.get("type", "file") == "file"}


#: A file's modification time (seconds since the epoch), where the fs reports one.
mtime = file_mtime


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def logical_name(name: str) -> str:
    """A file's name without Hadoop's checksum wrapping (``.3.delta.crc`` -> ``3.delta``)."""
    if name.startswith(".") and name.endswith(".crc"):
        return name[1:-4]
    return name


def parse_offset_line(line: str) -> Any:
    """One source's offset: parsed JSON where it is JSON, None for "-", else the text."""
    if line == "-":
        return None
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return line


@dataclass(frozen=True)
class BatchInfo:
    """One retained batch of the offset log."""

    batch: int
    #: Spark's batchTimestampMs (the trigger time), from the offset file.
    timestamp_ms: int | None
    #: The offset file's modification time (seconds), where the fs reports one.
    written_at: float | None
    watermark_ms: int | None
    #: End offsets, one per source, in the order of the query's sources.
    offsets: tuple[Any, ...]
    committed: bool
    #: Each eoskit sink's decision for this batch: done, decided, aborted or none.
    sinks: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "timestampMs": self.timestamp_ms,
                "writtenAt": self.written_at, "watermarkMs": self.watermark_ms,
                "offsets": list(self.offsets), "committed": self.committed, "sinks": self.sinks}


@dataclass(frozen=True)
class SinkInfo:
    """An eoskit sink's metadata under ``eoskit/sinks/<sink-id>/``."""

    sink_id: str
    created_at: float | None
    #: The checkpoint location the sink was created under (from sink.json).
    checkpoint_location: str | None
    #: Batches with a decision (two-phase sinks; empty for task-commit sinks).
    decided_batches: tuple[int, ...]
    meta: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"sinkId": self.sink_id, "createdAt": self.created_at,
                "checkpointLocation": self.checkpoint_location,
                "decidedBatches": list(self.decided_batches), "meta": list(self.meta)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SinkInfo:
        return cls(data["sinkId"], data.get("createdAt"), data.get("checkpointLocation"),
                   tuple(data.get("decidedBatches", ())), tuple(data.get("meta", ())))


@dataclass(frozen=True)
class StateOperator:
    """One stateful operator's state files, summed over its partitions."""

    operator_id: int
    name: str | None
    stores: tuple[str, ...]
    #: hdfs (HDFSBackedStateStoreProvider), rocksdb, or unknown.
    provider: str
    partitions: int
    #: Oldest and newest state version on disk.
    versions: tuple[int, int] | None
    files: int
    bytes: int
    #: Keys in the operator's stores at ``version``, or None where the files
    #: cannot tell (another compression codec, a RocksDB changelog on top of
    #: a snapshot).
    rows: int | None
    version: int | None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["stores"], data["versions"] = list(self.stores), list(self.versions or []) or None
        return {_camel(key): value for key, value in data.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StateOperator:
        versions = data.get("versions")
        return cls(data["operatorId"], data.get("name"), tuple(data.get("stores", ())),
                   data.get("provider", "unknown"), data["partitions"],
                   tuple(versions) if versions else None,  # type: ignore[arg-type]
                   data["files"], data["bytes"], data.get("rows"), data.get("version"))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


class Checkpoint:
    """A checkpoint directory: its batches, sinks and state, read through fsspec."""

    def __init__(self, location: str, storage_options: StorageOptions | None = None) -> None:
        self.location = str(location)
        self.storage_options = storage_options
        self.fs, self.root = require_directory(self.location, storage_options)
        #: The location as an absolute path (local) or a URL with its protocol.
        self.url = location_url(self.fs, self.root, self.location)
        names = {basename(p) for p in self.fs.ls(self.root, detail=False)}
        if "offsets" not in names and "metadata" not in names:
            raise CheckpointError(
                f"{self.location} is not a Spark checkpoint directory: it has neither "
                "offsets/ nor metadata (the checkpointLocation of a query that has started)")

    # -- files -----------------------------------------------------------

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def read_text(self, relative: str) -> str | None:
        try:
            with self.fs.open(self.path(relative), "rb") as handle:
                return handle.read().decode("utf-8")
        except FileNotFoundError:
            return None

    def read_json(self, relative: str) -> dict[str, Any] | None:
        text = self.read_text(relative)
        if text is None:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"{self.location}/{relative} is not valid JSON: {exc}") from None

    def files(self) -> dict[str, dict[str, Any]]:
        """Every file of the checkpoint, by relative path, with fsspec's info."""
        return list_files(self.fs, self.root)

    def _ids(self, directory: str) -> dict[int, dict[str, Any]]:
        try:
            entries = self.fs.ls(self.path(directory), detail=True)
        except FileNotFoundError:
            return {}
        return {int(basename(e["name"])): e for e in entries
                if basename(e["name"]).isdigit() and e.get("type", "file") == "file"}

    # -- the logs ----------------------------------------------------------

    def query_id(self) -> str | None:
        data = self.read_json("metadata")
        return None if data is None else data.get("id")

    def batch_ids(self) -> list[int]:
        """Batches retained in the offset log (planned, committed or not)."""
        return sorted(self._ids("offsets"))

    def committed_ids(self) -> list[int]:
        return sorted(self._ids("commits"))

    def latest_committed(self) -> int | None:
        """The newest batch with both an offset-log and a commit-log entry."""
        both = set(self.batch_ids()) & set(self.committed_ids())
        return max(both) if both else None

    def batches(self) -> list[BatchInfo]:
        offsets, commits = self._ids("offsets"), set(self._ids("commits"))
        decisions = self._sink_decisions()
        return [self._batch(n, offsets[n], n in commits, decisions) for n in sorted(offsets)]

    def batch(self, batch: int) -> BatchInfo:
        offsets = self._ids("offsets")
        if batch not in offsets:
            retained = sorted(offsets)
            where = f"retained: {retained[0]}..{retained[-1]}" if retained else "the log is empty"
            raise CheckpointError(f"batch {batch} is not in the offset log of {self.location} ({where})")
        return self._batch(batch, offsets[batch], batch in self._ids("commits"), self._sink_decisions())

    def _offset_entry(self, batch: int) -> tuple[dict[str, Any], list[str]]:
        """An offset-log entry: Spark's batch metadata, and one line per source."""
        relative = f"offsets/{batch}"
        text = self.read_text(relative) or ""
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if not lines or not re.fullmatch(r"v\d+", lines[0]):
            raise CheckpointError(f"{self.location}/{relative} is not a Spark offset log entry")
        try:
            metadata = json.loads(lines[1]) if len(lines) > 1 and lines[1] else {}
        except json.JSONDecodeError as exc:
            raise CheckpointError(f"{self.location}/{relative}: bad batch metadata: {exc}") from None
        return metadata, lines

    def batch_conf(self, batch: int | None = None) -> tuple[int, dict[str, str]] | None:
        """(batch, SQL settings) that Spark recorded with a batch (default: the
        newest planned one) in its offset-log entry, and sets over the
        session's own whenever the query restarts (the state store provider,
        shuffle partitions, state format versions); None before the first batch."""
        if batch is None:
            planned = self.batch_ids()
            if not planned:
                return None
            batch = planned[-1]
        metadata, _ = self._offset_entry(batch)
        conf = metadata.get("conf") or {}
        return batch, {str(k): str(v) for k, v in conf.items()}

    def _batch(self, batch: int, info: Mapping[str, Any], committed: bool,
               decisions: Mapping[str, Mapping[int, str]]) -> BatchInfo:
        metadata, lines = self._offset_entry(batch)
        return BatchInfo(
            batch=batch,
            timestamp_ms=metadata.get("batchTimestampMs"),
            written_at=mtime(info),
            watermark_ms=metadata.get("batchWatermarkMs"),
            offsets=tuple(parse_offset_line(line) for line in lines[2:]),
            committed=committed,
            sinks={sink: by_batch.get(batch, "none") for sink, by_batch in decisions.items()},
        )

    # -- eoskit's sinks ------------------------------------------------------

    def sink_ids(self) -> list[str]:
        try:
            entries = self.fs.ls(self.path(SINKS), detail=True)
        except FileNotFoundError:
            return []
        return sorted(basename(e["name"]) for e in entries if e.get("type") == "directory")

    def sinks(self) -> list[SinkInfo]:
        out = []
        for sink_id in self.sink_ids():
            base = sink_folder(sink_id)
            marker = self.read_json(f"{base}/{SINK_MARKER}") or {}
            meta = sorted(p[:-5] for p in list_files(self.fs, self.path(f"{base}/{META}"))
                          if p.endswith(".json") and "/" not in p)
            out.append(SinkInfo(sink_id, marker.get("createdAt"), marker.get("checkpointLocation"),
                                tuple(sorted(self._decision_files(sink_id, DECISIONS))), tuple(meta)))
        return out

    def _decision_files(self, sink_id: str, kind: str) -> dict[int, str]:
        found = list_files(self.fs, self.path(f"{sink_folder(sink_id)}/{kind}"))
        return {batch: name for name in found if (batch := batch_of(name)) is not None and "/" not in name}

    def sink_decision(self, sink_id: str, batch: int) -> str:
        """done, decided, aborted (this run aborted it) or none."""
        data = self.read_json(f"{sink_folder(sink_id)}/{batch_file(DECISIONS, batch)}")
        if data is not None:
            return "done" if data.get("status") == "done" else "decided"
        if self.fs.exists(self.path(f"{sink_folder(sink_id)}/{batch_file(ABORTED, batch)}")):
            return "aborted"
        return "none"

    def _sink_decisions(self) -> dict[str, dict[int, str]]:
        out: dict[str, dict[int, str]] = {}
        for sink_id in self.sink_ids():
            decided = self._decision_files(sink_id, DECISIONS)
            aborted = self._decision_files(sink_id, ABORTED)
            out[sink_id] = {n: self.sink_decision(sink_id, n) for n in sorted(set(decided) | set(aborted))}
        return out

    # -- state -------------------------------------------------------------------

    def state_operators(self, version: int | None = None, count_rows: bool = True,
                        only: Collection[str] | None = None) -> list[StateOperator]:
        """A summary of ``state/``, rows counted at ``version`` (default: the
        version the next batch loads, latest committed + 1); ``only`` limits it
        to these checkpoint-relative paths (what a savepoint copies)."""
        files = list_files(self.fs, self.path("state"))
        if only is not None:
            keep = set(only)
            files = {rel: info for rel, info in files.items() if f"state/{rel}" in keep}
        if not files:
            return []
        if version is None:
            latest = self.latest_committed()
            version = None if latest is None else latest + 1
        by_operator: dict[str, dict[str, dict[str, Any]]] = {}
        for rel, info in files.items():
            operator, _, rest = rel.partition("/")
            by_operator.setdefault(operator, {})[rest] = info
        return [self._operator(int(op), by_operator[op], version, count_rows)
                for op in sorted((o for o in by_operator if o.isdigit()), key=int)]

    def _operator(self, operator: int, files: dict[str, dict[str, Any]], version: int | None,
                  count_rows: bool) -> StateOperator:
        name, stores = self._operator_metadata(operator, files)
        partitions = {rel.split("/", 1)[0] for rel in files if rel.split("/", 1)[0].isdigit()}
        store_dirs: dict[str, dict[int, list[str]]] = {}
        kinds: set[str] = set()
        for rel in files:
            directory, _, name_ = rel.rpartition("/")
            match = STATE_FILE.match(name_)
            if match is None or not directory.split("/", 1)[0].isdigit():
                continue
            kinds.add(match[2])
            store_dirs.setdefault(directory, {}).setdefault(int(match[1]), []).append(name_)
        provider = ("rocksdb" if kinds & {"zip", "changelog"} else "hdfs" if kinds else "unknown")
        versions = sorted({v for by_version in store_dirs.values() for v in by_version})
        rows: int | None = None
        if count_rows and version is not None and store_dirs:
            counts = [_store_rows(self.fs, self.path(f"state/{operator}/{d}"), v, version)
                      for d, v in store_dirs.items()]
            rows = None if any(c is None for c in counts) else sum(counts)  # type: ignore[misc]
        return StateOperator(
            operator_id=operator, name=name, stores=stores, provider=provider,
            partitions=len(partitions), versions=(versions[0], versions[-1]) if versions else None,
            files=sum(1 for rel in files if not basename(rel).endswith(".crc")),
            bytes=sum(int(info.get("size") or 0) for info in files.values()),
            rows=rows, version=version if count_rows else None,
        )

    def _operator_metadata(self, operator: int, files: Mapping[str, Any]) -> tuple[str | None, tuple[str, ...]]:
        candidates = ["_metadata/metadata"] + sorted(
            (rel for rel in files if rel.startswith("_metadata/v2/") and basename(rel).isdigit()),
            key=lambda rel: int(basename(rel)), reverse=True)
        for rel in candidates:
            if rel not in files:
                continue
            text = self.read_text(f"state/{operator}/{rel}") or ""
            _, _, body = text.partition("\n")
            try:
                data = json.loads(body)
            except json.JSONDecodeError:
                continue
            stores = tuple(s.get("storeName", "?") for s in data.get("stateStoreInfo", ()))
            return data.get("operatorInfo", {}).get("operatorName"), stores
        return None, ()


# -- counting the keys of a state store from its files ---------------------------

_LZ4_MAGIC = b"LZ4Block"


class _LZ4BlockStream:
    """Reads lz4-java's ``LZ4BlockOutputStream`` framing, Spark's default state
    store codec: per block, magic, a token, compressed and original lengths
    (little-endian) and a checksum, then a raw LZ4 block (or stored bytes)."""

    def __init__(self, handle: BinaryIO) -> None:
        import pyarrow as pa

        self.handle, self.buffer, self.codec = handle, bytearray(), pa.Codec("lz4_raw")
        self.ended = False

    def _fill(self) -> bool:
        header = self.handle.read(21)
        if len(header) < 21 or header[:8] != _LZ4_MAGIC:
            raise ValueError("not an LZ4Block stream")
        token = header[8]
        compressed, original, _ = struct.unpack("<iii", header[9:21])
        data = self.handle.read(compressed)
        if original == 0:
            self.ended = True
            return False
        if token & 0xF0 == 0x10:
            self.buffer += data
        else:
            self.buffer += self.codec.decompress(data, decompressed_size=original).to_pybytes()
        return True

    def read(self, size: int) -> bytes:
        while len(self.buffer) < size and not self.ended and self._fill():
            pass
        if len(self.buffer) < size:
            raise ValueError("truncated state file")
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        return out


def _records(handle: BinaryIO) -> Iterator[tuple[bytes, bool]]:
    """(key, removed) per record of a delta, snapshot or v1 changelog file:
    key size, key, value size (-1: removed), value; a key size of -1 ends it."""
    stream = _LZ4BlockStream(handle)
    while True:
        (key_size,) = struct.unpack(">i", stream.read(4))
        if key_size == -1:
            return
        if key_size < 0:
            raise ValueError("bad key size")
        key = stream.read(key_size)
        (value_size,) = struct.unpack(">i", stream.read(4))
        if value_size >= 0:
            stream.read(value_size)
        yield key, value_size < 0


def _store_rows(fs: AbstractFileSystem, directory: str, by_version: Mapping[int, list[str]],
                version: int) -> int | None:
    """Keys in one store directory at ``version``, or None where the files cannot tell."""
    if version == 0:
        return 0
    names = {name for names in by_version.values() for name in names}
    zip_names = [n for n in by_version.get(version, []) if n.endswith(".zip")]
    if len(zip_names) == 1:
        return _rocksdb_keys(fs, f"{directory}/{zip_names[0]}")
    snapshots = [v for v in by_version if v <= version and f"{v}.snapshot" in names]
    base = max(snapshots, default=0)
    if any(n.endswith(".zip") for v, ns in by_version.items() if v <= version for n in ns):
        return None  # a RocksDB snapshot below: its keys are in SST files
    keys: set[int] = set()
    try:
        if base:
            keys.update(hash(key) for key, _ in _read_records(fs, f"{directory}/{base}.snapshot"))
        for v in range(base + 1, version + 1):
            delta = f"{v}.delta" if f"{v}.delta" in names else f"{v}.changelog"
            if delta not in names:
                return None
            for key, removed in _read_records(fs, f"{directory}/{delta}"):
                (keys.discard if removed else keys.add)(hash(key))
    except (ValueError, struct.error):
        return None
    return len(keys)


def _read_records(fs: AbstractFileSystem, path: str) -> Iterator[tuple[bytes, bool]]:
    with fs.open(path, "rb") as handle:
        yield from _records(handle)


def _rocksdb_keys(fs: AbstractFileSystem, path: str) -> int | None:
    """numKeys from a RocksDB checkpoint zip's ``metadata`` entry."""
    try:
        with fs.open(path, "rb") as handle, zipfile.ZipFile(handle) as archive:
            text = archive.read("metadata").decode()
        value = json.loads(text.partition("\n")[2]).get("numKeys")
        return int(value) if value is not None else None
    except (KeyError, ValueError, zipfile.BadZipFile):
        return None
