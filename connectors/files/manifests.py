"""For readers that want whole batches only: the committed batches' manifests.

A plain directory listing shows each committed file once, but during a
commit it may show some of a batch's files and not yet the others (each
file appears whole, one after the other). The files sink writes one
manifest per committed batch under ``_eoskit/batches/<sink-id>/``, after
every file of the batch is in place; reading the files the manifests list
gives whole batches only:

    import pyarrow.dataset as ds
    from eoskit.connectors.files import committed_batches

    batches = committed_batches("s3://bucket/orders")
    files = [f"bucket/orders/{f}" for b in batches for f in b.files]
    table = ds.dataset(files, format="parquet", filesystem=s3, partitioning="hive",
                       partition_base_dir="bucket/orders").to_table()
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from eoskit.connectors.files import layout
from eoskit.connectors.files.settings import normalise_path
from eoskit.connectors.files.storage import Storage


@dataclass(frozen=True)
class BatchManifest:
    sink_id: str
    batch: int
    #: Committed files, relative to the output directory.
    files: tuple[str, ...]
    rows: int
    bytes: int


def committed_batches(path: str, storage_options: dict[str, Any] | None = None,
                      sink_id: str | None = None) -> list[BatchManifest]:
    """Every committed batch's manifest under ``path`` (of one sink id, or
    all), by sink id then batch: from the compact files (every
    ``layout.COMPACT_EVERY`` batches the sink merges the manifests into one)
    and the manifests of the batches after them, each batch once."""
    storage = Storage(normalise_path(path), storage_options or {})
    out = []
    sink_ids = [sink_id] if sink_id else storage.list(layout.BATCHES_DIR)
    for sink in sorted(sink_ids):
        out += sorted(read_sink_manifests(storage, sink).values(), key=lambda m: m.batch)
    return out


def _manifest(data: dict[str, Any]) -> BatchManifest:
    return BatchManifest(data["sinkId"], data["batch"], tuple(f["path"] for f in data["files"]),
                         data["rows"], data["bytes"])


def read_sink_manifests(storage: Storage, sink_id: str) -> dict[int, BatchManifest]:
    """One sink's committed batches by batch id. A batch is in a compact
    file or in its own manifest, or in both for a moment (a compaction that
    had written its file and not yet removed the manifests it merged)."""
    found: dict[int, BatchManifest] = {}
    directory = f"{layout.BATCHES_DIR}/{sink_id}"
    for name in sorted(storage.list(directory)):
        parsed = layout.parse_manifest_name(name)
        if parsed is None:
            continue
        data = storage.read(f"{directory}/{name}")
        if data is None:
            continue  # removed by a compaction meanwhile: its batches are in the compact file
        loaded = json.loads(data)
        for entry in (loaded["batches"] if parsed[0] else [loaded]):
            found[entry["batch"]] = _manifest(entry)
    return found


def _listing(storage: Storage, sink_id: str) -> tuple[dict[int, str], int]:
    """(the batch manifests by batch, the last batch the newest compact file
    holds, -1 for none) of ``sink_id``: one listing."""
    singles, compacted = {}, -1
    for name in storage.list(f"{layout.BATCHES_DIR}/{sink_id}"):
        parsed = layout.parse_manifest_name(name)
        if parsed is None:
            continue
        is_compact, batch = parsed
        if is_compact:
            compacted = max(compacted, batch)
        else:
            singles[batch] = name
    return singles, compacted


def compact(storage: Storage, sink_id: str, last: int) -> int:
    """Merge the batch manifests of ``sink_id`` up to batch ``last`` that no
    compact file holds yet into ``compact-<last>.manifest``, then remove
    them; returns how many were merged. Safe to repeat after a crash at any
    point: the compact file is written whole (write then rename) before a
    manifest goes, a reader takes each batch once, and a repeat finds the
    compact file and only removes what it holds."""
    directory = f"{layout.BATCHES_DIR}/{sink_id}"
    singles, compacted = _listing(storage, sink_id)
    merged = []
    if compacted < last:
        for batch in sorted(b for b in singles if compacted < b <= last):
            data = storage.read(f"{directory}/{singles[batch]}")
            if data is not None:
                merged.append(json.loads(data))
        if not merged:
            return 0
        storage.write_atomic(layout.compact_manifest(sink_id, last), json.dumps(
            {"sinkId": sink_id, "last": last, "batches": merged}, sort_keys=True).encode())
        compacted = last
    for batch, name in singles.items():
        if batch <= compacted:
            storage.remove(f"{directory}/{name}")
    return len(merged)


def compacted_through(storage: Storage, sink_id: str) -> int:
    """The last batch the newest compact file of ``sink_id`` holds (-1: none)."""
    return _listing(storage, sink_id)[1]
