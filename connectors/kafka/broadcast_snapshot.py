"""What a broadcast snapshot file is: its name, its bytes and its digest.

A snapshot is an Arrow IPC file (docs/design/broadcast-and-operator-state.md,
1.3). ``latest``: columns ``key binary, value binary, partition int32, offset
int64, timestamp timestamp[ms]``, one row per key, sorted by key. A user
fold: one row, ``state large_binary``, the state's canonical JSON. The schema
metadata holds ``name``, ``version``, ``offsets`` (the pin, JSON) and
``fold``. The digest is the sha256 of the file's bytes: it ties the offset
log's pin to the file, and need not be equal across runs.

Pure: bytes in, bytes out; the store (``broadcast_store``) does the I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from eoskit.connectors.kafka.broadcast_fold import LatestEntry, canonical_json, is_latest, normalise_spec
from eoskit.connectors.kafka.offsets import from_json_dict, to_json_dict

SNAPSHOTS = "snapshots"
LATEST_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("partition", pa.int32()),
                           ("offset", pa.int64()), ("timestamp", pa.timestamp("ms"))])


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def snapshot_file(version: int, digest: str) -> str:
    """``snapshots/<v>-<digest16>.arrow``, relative to the folder."""
    return f"{SNAPSHOTS}/{version}-{digest[7:23]}.arrow"


def offsets_json(offsets: Mapping[Any, Any]) -> dict[str, dict[str, int]]:
    """The pin's offsets in Spark's JSON shape and fixed order, given either
    that shape or ``{(topic, partition): offset}``."""
    if all(isinstance(k, tuple) for k in offsets):
        return to_json_dict(offsets)
    return to_json_dict(from_json_dict(offsets, "broadcast offsets"))


def json_bytes(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def serialise(name: str, version: int, offsets: Mapping[Any, Any], state: Any, fold_spec: str) -> bytes:
    """A snapshot's bytes (Arrow IPC file): ``latest`` one row per key, sorted
    by key; a user fold one row of canonical JSON. Metadata: name, version,
    offsets, fold."""
    spec = normalise_spec(fold_spec)
    meta = {"name": name, "version": str(version), "fold": spec,
            "offsets": json_bytes(offsets_json(offsets)).decode()}
    if is_latest(spec):
        keys = sorted(state)
        entries = [state[k] for k in keys]
        table = pa.table([keys, [e.value for e in entries], [e.partition for e in entries],
                          [e.offset for e in entries], [e.timestamp_ms for e in entries]],
                         schema=LATEST_SCHEMA.with_metadata(meta))
    else:
        table = pa.table({"state": pa.array([canonical_json(state, spec)], pa.large_binary())})
        table = table.replace_schema_metadata(meta)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def deserialise(data: bytes) -> tuple[Any, dict[str, dict[str, int]], dict[str, str]]:
    """``(state, offsets, metadata)`` of a snapshot's bytes."""
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    offsets = json.loads(meta.get("offsets", "{}"))
    if "state" in table.column_names:
        return json.loads(table.column("state")[0].as_py()), offsets, meta
    cols = [table.column(c).to_pylist() for c in ("key", "value", "partition", "offset")]
    stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    state = {k: LatestEntry(v, p, o, t) for k, v, p, o, t in zip(*cols, stamps)}
    return state, offsets, meta
