"""Broadcast state materialised beside the checkpoint: snapshots, pointers, GC.

Layout (docs/design/broadcast-and-operator-state.md, 1.3)::

    <checkpoint>/eoskit/broadcast/<name>/
      broadcast.json                  {name, topic, fold, queryId, createdAt}
      snapshots/<v>-<digest16>.arrow  version v's folded state, immutable
      versions/<v>.json               {version, digest, file, offsets}: the pointer tasks follow

Why persisted, not re-read from the topic on a replay: compaction rewrites
history. Between an attempt and its replay the cleaner may drop a value whose
successor lies past the pin, or (after ``delete.retention.ms``) a tombstone,
and any fold but "latest per key" differs once a single record goes. The
file also makes folding incremental: ``S(v+1) = fold(S(v), [pin_v, pin_v+1))``.

Who calls what (the protocol is ``broadcast.py``'s, 1.5):

- driver, ``latestOffset``: ``claim`` once, ``load`` the start version,
  ``write_snapshot`` the next one *before* the offsets naming it are returned
  (an unnamed file is an orphan, never read);
- driver, ``partitions``: ``publish`` the pointer the logged JSON names
  (idempotent: the same bytes every time);
- executors: ``state`` (a read-only ``BroadcastState``), loaded through the
  pointer, its digest checked, cached per worker (an LRU of 2 per folder);
- driver, the source's ``commit``: ``gc``.

Every write is ``core.fs.write_atomic``: a file is whole or absent. Errors
name the path; none carries storage options.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import pyarrow as pa

from eoskit.connectors.kafka.broadcast_fold import (
    LATEST,
    LatestEntry,
    check_size,
    is_latest,
    normalise_spec,
    resolve_fold,
)
from eoskit.connectors.kafka.broadcast_snapshot import (
    SNAPSHOTS,
    deserialise,
    digest_of,
    json_bytes,
    offsets_json,
    serialise,
    snapshot_file,
)
from eoskit.core.fs import StorageOptions, open_location, write_atomic
from eoskit.core.options import OptionError
from eoskit.twophase.verdicts import Verdict

log = logging.getLogger(__name__)

FOLDER = "eoskit/broadcast"
META = "broadcast.json"
VERSIONS = "versions"
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_SNAPSHOT = re.compile(r"^(\d+)-([0-9a-f]{16})\.arrow$")
_CACHE_PER_FOLDER = 2


class BroadcastSnapshotMissing(RuntimeError):
    """A snapshot (or the pointer to it) that the offset log names is absent."""

    verdict: ClassVar[Verdict] = Verdict.PERMANENT


class BroadcastSnapshotCorrupt(RuntimeError):
    """A snapshot's bytes do not match the digest the offset log names."""

    verdict: ClassVar[Verdict] = Verdict.PERMANENT


class _Lru:
    """Loaded states, ``_CACHE_PER_FOLDER`` per folder, shared by a worker's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folders: dict[str, OrderedDict[Any, Any]] = {}

    def get(self, folder: str, key: Any) -> Any:
        with self._lock:
            entries = self._folders.get(folder)
            if entries is None or key not in entries:
                return None
            entries.move_to_end(key)
            return entries[key]

    def put(self, folder: str, key: Any, value: Any) -> None:
        with self._lock:
            entries = self._folders.setdefault(folder, OrderedDict())
            entries[key] = value
            entries.move_to_end(key)
            while len(entries) > _CACHE_PER_FOLDER:
                entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._folders.clear()


#: (folder, version, digest) -> (state, offsets); (folder, version, digest, decode) -> BroadcastState
_loaded = _Lru()
_views = _Lru()


class BroadcastState(Mapping[Any, Any]):
    """What user code sees: a read-only mapping, the same in every task of a batch.

    ``latest``: key (UTF-8 text, or bytes when not UTF-8) -> its value passed
    through ``decode`` once, at load. A user fold: the folded state itself if
    it is a JSON object, else empty; ``.value`` is the folded state either way
    (for ``latest``, the dict of ``LatestEntry``). Do not change what it holds:
    it is shared by the worker's later calls."""

    def __init__(self, name: str, version: int, offsets: dict[str, dict[str, int]],
                 entries: Mapping[Any, Any], value: Any) -> None:
        self.name, self.version, self.offsets, self.value = name, version, offsets, value
        self._entries = dict(entries)

    def __getitem__(self, key: Any) -> Any:
        return self._entries[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"BroadcastState({self.name!r}, version={self.version}, keys={len(self)})"


def _text_key(key: bytes) -> str | bytes:
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return key


class BroadcastStore:
    """One broadcast state's folder: ``<location>/eoskit/broadcast/<name>/``."""

    def __init__(self, location: str, name: str, storage_options: StorageOptions | None = None) -> None:
        if not _NAME.match(name) or name in (".", ".."):
            raise OptionError(f"broadcastName={name!r}: use letters, digits, '.', '_' and '-' "
                              "(it names a folder)")
        self.name = name
        self.fs, root = open_location(location, storage_options)
        self.folder = f"{root.rstrip('/')}/{FOLDER}/{name}"
        self.url = self.fs.unstrip_protocol(self.folder)

    def _path(self, relative: str) -> str:
        return f"{self.folder}/{relative}"

    def _read_json(self, relative: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.fs.cat_file(self._path(relative)))
        except FileNotFoundError:
            return None

    def meta(self) -> dict[str, Any] | None:
        """broadcast.json, or None before the first ``claim``."""
        return self._read_json(META)

    def claim(self, topic: str, fold_spec: str, query_id: str) -> dict[str, Any]:
        """Driver, first ``latestOffset``: make the folder this query's. Writes
        broadcast.json if absent; refuses (``OptionError``) a folder of another
        query, topic or fold, naming which and the folder."""
        fold = normalise_spec(fold_spec)
        found = self.meta()
        if found is None:
            found = {"name": self.name, "topic": topic, "fold": fold, "queryId": query_id,
                     "createdAt": time.time()}
            write_atomic(self.fs, self._path(META), json_bytes(found))
            return found
        for key, option, given in (("queryId", "checkpointLocation", query_id),
                                   ("topic", "broadcastTopic", topic), ("fold", "broadcastFold", fold)):
            if found.get(key) != given:
                raise OptionError(
                    f"broadcast state {self.url} belongs to {key} {found.get(key)!r}, not {given!r}: "
                    f"check {option}, or give this state another broadcastName")
        return found

    def write_snapshot(self, version: int, offsets: Mapping[Any, Any], state: Any, fold_spec: str,
                       max_bytes: int | None = None) -> str:
        """Driver, ``latestOffset``, before the offsets naming ``version`` are
        returned: write its snapshot and return its digest (``sha256:<hex>``).
        ``BroadcastTooLarge`` over ``max_bytes``, before anything is written."""
        data = serialise(self.name, version, offsets, state, fold_spec)
        if max_bytes is not None:
            check_size(len(data), max_bytes)
        digest = digest_of(data)
        write_atomic(self.fs, self._path(snapshot_file(version, digest)), data)
        return digest

    def pointer_bytes(self, version: int, digest: str, offsets: Mapping[Any, Any]) -> bytes:
        return json_bytes({"version": version, "digest": digest, "file": snapshot_file(version, digest),
                            "offsets": offsets_json(offsets)})

    def publish(self, version: int, digest: str, offsets: Mapping[Any, Any]) -> None:
        """Driver, ``partitions``, before any task: write ``versions/<v>.json``
        from the logged pin. Idempotent; ``BroadcastSnapshotMissing`` if the
        snapshot is absent. The log is the truth: a pointer that says
        otherwise (the batch was planned again) is replaced."""
        if version == 0:
            return
        snapshot = self._path(snapshot_file(version, digest))
        if not self.fs.exists(snapshot):
            raise BroadcastSnapshotMissing(f"broadcast snapshot {self.fs.unstrip_protocol(snapshot)} "
                                           f"(version {version}, {digest}) named by the offset log is missing")
        data, path = self.pointer_bytes(version, digest, offsets), self._path(f"{VERSIONS}/{version}.json")
        try:
            if self.fs.cat_file(path) == data:
                return
            log.warning("broadcast pointer %s named another snapshot; rewriting it from the offset log", path)
        except FileNotFoundError:
            pass
        write_atomic(self.fs, path, data)

    def load(self, version: int, digest: str | None = None) -> tuple[Any, dict[str, dict[str, int]]]:
        """``(state, offsets)`` of ``version``; version 0 is the fold's initial
        state. Reads the snapshot ``digest`` names, or without it the one
        ``versions/<v>.json`` names; checks
        the digest (``BroadcastSnapshotCorrupt``); ``BroadcastSnapshotMissing``
        if absent. Cached (the LRU): do not change the state returned."""
        if version == 0:
            meta = self.meta() or {}
            fold = LATEST if is_latest(meta.get("fold", "latest")) else resolve_fold(meta["fold"])
            return fold.initial(), {}
        if digest is None:  # the pointer names it (a snapshot's name derives from its digest)
            pointer = self._read_json(f"{VERSIONS}/{version}.json")
            if pointer is None:
                raise BroadcastSnapshotMissing(f"broadcast pointer {self.url}/{VERSIONS}/{version}.json is missing")
            digest = str(pointer["digest"])
        cached = _loaded.get(self.url, (version, digest))
        if cached is not None:
            return cached
        path = self._path(snapshot_file(version, digest))
        try:
            data = self.fs.cat_file(path)
        except FileNotFoundError:
            raise BroadcastSnapshotMissing(f"broadcast snapshot {self.fs.unstrip_protocol(path)} "
                                           f"(version {version}) is missing") from None
        if digest_of(data) != digest:
            raise BroadcastSnapshotCorrupt(f"broadcast snapshot {self.fs.unstrip_protocol(path)}: its sha256 "
                                           f"is {digest_of(data)}, the offset log names {digest}")
        try:
            state, offsets, _ = deserialise(data)
        except (pa.ArrowException, ValueError, KeyError) as exc:
            raise BroadcastSnapshotCorrupt(f"broadcast snapshot {self.fs.unstrip_protocol(path)} "
                                           f"is unreadable: {exc}") from None
        _loaded.put(self.url, (version, digest), (state, offsets))
        return state, offsets

    def state(self, version: int, digest: str | None = None,
              decode: Callable[[bytes], Any] | None = None) -> BroadcastState:
        """Executors: the ``BroadcastState`` of ``version`` (``load``), each
        ``latest`` value passed through ``decode`` once; cached per decode."""
        key = (version, digest, decode)
        view = _views.get(self.url, key)
        if view is None:
            state, offsets = self.load(version, digest)
            if isinstance(state, dict) and all(isinstance(v, LatestEntry) for v in state.values()) \
                    and all(isinstance(k, bytes) for k in state):
                entries = {_text_key(k): (e.value if decode is None else decode(e.value))
                           for k, e in state.items()}
            else:
                entries = state if isinstance(state, dict) else {}
            view = BroadcastState(self.name, version, offsets, entries, state)
            _views.put(self.url, key, view)
        return view

    def versions(self) -> list[int]:
        """The versions with a pointer, oldest first."""
        found = self.fs.glob(self._path(f"{VERSIONS}/*.json"))
        return sorted(int(n) for n in (p.rsplit("/", 1)[-1][:-5] for p in found) if n.isdigit())

    def _snapshots(self) -> list[tuple[int, str, str]]:
        """``(version, digest16, path)`` of every snapshot file."""
        found = []
        for path in self.fs.glob(self._path(f"{SNAPSHOTS}/*.arrow")):
            match = _SNAPSHOT.match(path.rsplit("/", 1)[-1])
            if match:
                found.append((int(match.group(1)), match.group(2), path))
        return sorted(found)

    def gc(self, oldest_needed_version: int, newest_logged_version: int) -> list[str]:
        """Driver, the source's ``commit``: remove pointers and snapshots below
        ``oldest_needed_version``, and orphans (snapshots at or below
        ``newest_logged_version`` whose pointer names another digest). A
        snapshot with no pointer yet, and anything above
        ``newest_logged_version``, is kept: the log may name it. Returns the
        paths removed."""
        removed = []
        pointers = {}
        for version in self.versions():
            if version > newest_logged_version:
                continue
            path = self._path(f"{VERSIONS}/{version}.json")
            if version < oldest_needed_version:
                self.fs.rm_file(path)
                removed.append(path)
            else:
                digest = (self._read_json(f"{VERSIONS}/{version}.json") or {}).get("digest")
                if isinstance(digest, str) and digest.startswith("sha256:"):
                    pointers[version] = digest  # else keep the snapshots: nothing says which is orphaned
        for version, short, path in self._snapshots():
            if version > newest_logged_version:
                continue
            named = pointers.get(version)
            if version < oldest_needed_version or (named is not None and named[7:23] != short):
                self.fs.rm_file(path)
                removed.append(path)
        return removed

    def describe(self) -> dict[str, Any]:
        """For inspection, without Spark: broadcast.json, and per pointer its
        digest, offsets, keys, bytes and whether the digest matches."""
        rows = []
        for version in self.versions():
            pointer = self._read_json(f"{VERSIONS}/{version}.json") or {}
            row = {"version": version, "digest": pointer.get("digest"), "offsets": pointer.get("offsets"),
                   "file": pointer.get("file"), "keys": None, "bytes": None, "digestOk": False}
            try:
                data = self.fs.cat_file(self._path(pointer["file"]))
                state = deserialise(data)[0]
                row.update(bytes=len(data), digestOk=digest_of(data) == pointer.get("digest"),
                           keys=len(state) if isinstance(state, dict) else None)
            except (FileNotFoundError, KeyError, pa.ArrowException, ValueError):
                pass
            rows.append(row)
        return {**(self.meta() or {"name": self.name}), "folder": self.url, "versions": rows,
                "snapshots": len(self._snapshots())}


def clear_cache() -> None:
    """Forget every loaded state of this process (tests)."""
    _loaded.clear()
    _views.clear()
