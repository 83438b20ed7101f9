"""Spark's absolute paths in a restored checkpoint: Spark names the
checkpoint location inside some of its files (operator metadata v2 names
its schema files by absolute path), so a checkpoint restored from a
savepoint into another directory gets them re-pointed at itself. Runs on
the driver (or the CLI), in ``restore_savepoint``, on the restored copy
before it is moved into place; nothing here imports Spark."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable

from fsspec import AbstractFileSystem


def hadoop_url(location: str) -> str:
    """How Spark names a checkpoint location in its own files: ``file:/abs/path``
    for a local path, any other URL as given."""
    if "://" in location:
        return location.rstrip("/")
    path = location[len("file:"):] if location.startswith("file:") else location
    return "file:" + os.path.abspath(path)


#: Operator metadata v2 (transformWithState): names its schema files by absolute path.
_METADATA_V2 = re.compile(r"^state/\d+/_metadata/v2/\d+$")
_SCHEMA_PATH = re.compile(r"^.*?(/state/\d+/_stateSchema/.*)$")


def repoint_schema_paths(fs: AbstractFileSystem, root: str, files: Iterable[tuple[str, int]],
                          new_url: str) -> None:
    """Point operator metadata v2 files at the schema files of the restored
    checkpoint: Spark reads ``stateSchemaFilePaths`` as written, and they name
    the checkpoint the savepoint came from. The rewritten file loses its
    Hadoop ``.crc`` (Hadoop reads a file without one unchecked)."""
    for rel, _ in files:
        if not _METADATA_V2.match(rel):
            continue
        path = f"{root}/{rel}"
        with fs.open(path, "rb") as handle:
            version, _, body = handle.read().decode().partition("\n")
        data = json.loads(body)
        for store in data.get("stateStoreInfo", ()):
            for key in ("stateSchemaFilePaths", "stateSchemaFilePath"):
                value = store.get(key)
                if isinstance(value, list):
                    store[key] = [_repoint(p, new_url) for p in value]
                elif isinstance(value, str):
                    store[key] = _repoint(value, new_url)
        fs.pipe_file(path, f"{version}\n{json.dumps(data, separators=(',', ':'))}".encode())
        directory, name = rel.rsplit("/", 1)
        try:
            fs.rm(f"{root}/{directory}/.{name}.crc")
        except FileNotFoundError:
            pass


def _repoint(path: str, new_url: str) -> str:
    match = _SCHEMA_PATH.match(path)
    return new_url + match[1] if match else path
