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
    all), by sink id then batch."""
    storage = Storage(normalise_path(path), storage_options or {})
    out = []
    sink_ids = [sink_id] if sink_id else storage.list(layout.BATCHES_DIR)
    for sink in sorted(sink_ids):
        for name in sorted(storage.list(f"{layout.BATCHES_DIR}/{sink}")):
            if not name.endswith(layout.MANIFEST):
                continue
            data = storage.read(f"{layout.BATCHES_DIR}/{sink}/{name}")
            if data is None:
                continue
            manifest = json.loads(data)
            out.append(BatchManifest(manifest["sinkId"], manifest["batch"],
                                     tuple(f["path"] for f in manifest["files"]),
                                     manifest["rows"], manifest["bytes"]))
    return out
