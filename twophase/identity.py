"""What names a query's checkpoint the same on every node and in every run.

- ``qualified_location``: a checkpoint path as the driver means it. A
  relative local path is made absolute on the driver, before anything is
  derived from it: executors resolve a relative path from their own working
  directory and would miss the decision log.
- ``default_sink_id``: the sink id a query gets when it sets no ``sinkId``.
  It is recorded in the checkpoint (``eoskit/identity.json``) the first time
  and read back ever after, so it stays the same however the path is typed
  later, and travels with the checkpoint into a savepoint and a restore
  (in-doubt transactions and the sink-id registry follow the job).
  Checkpoints written before the record existed keep the id derived from
  the path as it was typed then: it is found in their sink metadata.

The protocol's adapter asks both on the driver, never in the commit
process: that gets them resolved, pickled with the data source
(``adapter.py``).
"""

from __future__ import annotations

import json
import os
import posixpath

import fsspec

from eoskit.core.fs import fs_path
from eoskit.twophase.decision_log import SINK_MARKER, SINKS, sink_folder
from eoskit.twophase.txn_id import sink_id_for_checkpoint

IDENTITY = "eoskit/identity.json"
#: Where eoskit's runtime keeps the record of the run using a checkpoint
#: (``eoskit.runtime.job.control``); its start time tells one run from the next.
RUN_RECORD = "eoskit/control/run.json"
#: Written into a checkpoint restored from a savepoint (``runtime/state/savepoints.py``).
RESTORED = "eoskit/restored.json"

_cache: dict[str, str] = {}


def qualified_location(location: str) -> str:
    """Absolute for a local path (``file:`` URLs included); any other URL unchanged."""
    text = str(location)
    if text.startswith("file://"):
        return "file://" + os.path.abspath(text[len("file://"):])
    if text.startswith("file:"):
        return "file:" + os.path.abspath(text[len("file:"):])
    if "://" in text:
        return text
    return os.path.abspath(text)


def _join(location: str, name: str) -> str:
    return fs_path(location).rstrip("/") + "/" + name


def _read_json(url: str) -> dict | None:
    fs, path = fsspec.core.url_to_fs(url)
    try:
        with fs.open(path, "rb") as handle:
            return json.loads(handle.read())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _legacy_default(location: str) -> str | None:
    """A default-derived sink id already used in this checkpoint (before
    ``identity.json``): its ``sink.json`` records the location as typed."""
    fs, root = fsspec.core.url_to_fs(_join(location, SINKS))
    try:
        names = fs.ls(root, detail=False)
    except FileNotFoundError:
        return None
    for name in sorted(names):
        sink_id = posixpath.basename(name.rstrip("/"))
        record = _read_json(_join(location, f"{sink_folder(sink_id)}/{SINK_MARKER}")) or {}
        typed = record.get("checkpointLocation")
        if typed and sink_id == sink_id_for_checkpoint(typed):
            return sink_id
    return None


def default_sink_id(location: str) -> str:
    """The checkpoint's default sink id (see the module doc). Read once per
    process and location."""
    qualified = qualified_location(location)
    cached = _cache.get(qualified)
    if cached is not None:
        return cached
    record = _read_json(_join(qualified, IDENTITY))
    sink_id = (record or {}).get("defaultSinkId") or _legacy_default(qualified) \
        or sink_id_for_checkpoint(qualified)
    _cache[qualified] = sink_id
    return sink_id


def record_identity(location: str, sink_id: str) -> None:
    """Write ``identity.json`` if the checkpoint has none (driver side)."""
    qualified = qualified_location(location)
    url = _join(qualified, IDENTITY)
    if _read_json(url) is not None:
        return
    fs, path = fsspec.core.url_to_fs(url)
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    fs.pipe_file(path, json.dumps({"defaultSinkId": sink_id, "checkpointLocation": qualified},
                                  sort_keys=True).encode())


def run_started(location: str) -> float | None:
    """When the eoskit run using this checkpoint started (None outside
    ``eoskit run``): planning checks a sink once per run, not once per
    planning process, which Spark reuses across queries."""
    record = _read_json(_join(qualified_location(location), RUN_RECORD))
    return None if record is None else record.get("started")


def restored_from(location: str) -> str | None:
    """The checkpoint a restored checkpoint's savepoint was taken of, or None:
    its sinks' ids, and their registrations, move with the job."""
    record = _read_json(_join(qualified_location(location), RESTORED))
    return None if record is None else record.get("fromCheckpoint")
