"""File-system helpers for the folders eoskit keeps beside a checkpoint
(the decision log, sink metadata, savepoints, the files sink's manifests):
Hadoop's URLs as fsspec's, a write that lands whole or not at all, and a
file's modification time whatever the file system."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

# Hadoop's object-store schemes, as fsspec knows them.
_SCHEMES = {"s3a://": "s3://", "s3n://": "s3://", "gs://": "gs://", "abfss://": "abfs://"}


def fs_path(location: str) -> str:
    """A Hadoop location (``s3a://``, ``file:/path``) as an fsspec URL or path."""
    for hadoop, fsspec_scheme in _SCHEMES.items():
        if location.startswith(hadoop):
            return fsspec_scheme + location[len(hadoop):]
    if location.startswith("file:") and not location.startswith("file://"):
        return location[len("file:"):]  # Hadoop's file:/path
    return location


def write_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Write ``data`` whole or not at all: a durable temporary file renamed
    over ``path`` locally (then the directory synced), a single PUT on object
    stores, whose objects appear whole."""
    if isinstance(fs, LocalFileSystem):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    else:
        fs.pipe_file(path, data)


def file_mtime(info: Mapping[str, Any]) -> float | None:
    """A file's modification time (seconds since the epoch) from fsspec's
    ``info``, where the file system reports one (local ``mtime``, S3
    ``LastModified``, ...)."""
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
        try:
            return float(value)
        except (TypeError, ValueError):
            continue
    return None
