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

#: fsspec options per protocol: ``{"s3": {"endpoint_url": ...}}``.
StorageOptions = Mapping[str, Mapping[str, Any]]

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


def open_location(location: str, storage_options: StorageOptions | None = None
                  ) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec file system and path of a local path, fsspec URL or Hadoop
    URL, with ``storage_options``' entry for its protocol."""
    url = fs_path(str(location))
    protocol = fsspec.utils.get_protocol(url)
    options = dict((storage_options or {}).get(protocol, {}))
    fs, path = fsspec.core.url_to_fs(url, **options)
    return fs, path.rstrip("/") or "/"


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


def use_storage_options(options: Mapping[str, Mapping[str, Any]],
                        environ: Any = None) -> None:
    """Make ``options`` (fsspec options per protocol, ``{"s3": {"endpoint_url":
    ...}}``) the defaults of every fsspec file system this process opens from
    now on, and of the Python processes it starts (Spark's, in local mode):
    fsspec's own configuration (``fsspec.config.conf``) and its environment
    variables (``FSSPEC_<PROTOCOL>_<KEY>``), which win over earlier ones.

    For a process that runs one job or one command (``eoskit run``, ``eoskit
    state rescale``): eoskit's files beside the checkpoint (the control files,
    the decision log, savepoints) are opened in many places, some in Spark's
    Python processes, which no argument reaches. Spark's own reads and writes
    go through Hadoop and its configuration (``spark.hadoop.fs.s3a.*``),
    untouched. The values may be credentials: they are never printed."""
    import json

    import fsspec.config

    environ = os.environ if environ is None else environ
    for protocol, given in options.items():
        fsspec.config.conf.setdefault(protocol, {}).update(given)
        for key, value in given.items():
            # fsspec parses each variable as JSON where it parses, as --storage-option does.
            text = value if isinstance(value, str) and not _is_json(value) else json.dumps(value)
            environ[f"FSSPEC_{protocol.upper()}_{key.upper()}"] = text


def _is_json(text: str) -> bool:
    import json

    try:
        json.loads(text)
    except ValueError:
        return False
    return True
