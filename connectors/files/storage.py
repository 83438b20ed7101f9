"""The output directory on its file system: the few operations the sink needs,
each with the durability the protocol counts on.

Local disks get ``fsync`` where a crash of the machine (not only of a
process) could otherwise undo a step: a staged file before its manifest, a
rename before the manifest that records it. Object stores need none: an
object is durable once its PUT (or multipart upload) returns. Listings on
object stores, and the existence checks behind reads, are never served from
fsspec's cache, since another process (an executor, a previous run) changes
what is there.

Picklable: holds the URL and the storage options; the fsspec instance is
made (and cached by fsspec) in each process.
"""

from __future__ import annotations

import errno
import os
from typing import Any

import fsspec
import pyarrow as pa
from fsspec.implementations.local import LocalFileSystem

from eoskit.twophase.contract import SinkError
from eoskit.core.fs import write_atomic


class Storage:
    """An output root URL plus fsspec storage options."""

    def __init__(self, url: str, storage_options: dict[str, Any]) -> None:
        self.url = url
        self.storage_options = storage_options
        self._fs: fsspec.AbstractFileSystem | None = None
        self._root: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fs": None, "_root": None}

    def _open_fs(self) -> None:
        try:
            self._fs, self._root = fsspec.core.url_to_fs(self.url, **self.storage_options)
        except ImportError as exc:
            raise SinkError(f"{self.url}: {exc}") from None
        self._root = self._root.rstrip("/") or "/"

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self._fs is None:
            self._open_fs()
        assert self._fs is not None
        return self._fs

    @property
    def root(self) -> str:
        if self._root is None:
            self._open_fs()
        assert self._root is not None
        return self._root

    @property
    def local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}" if relative else self.root

    def _fresh(self) -> None:
        if not self.local:
            self.fs.invalidate_cache()

    # -- data files ---------------------------------------------------------

    def open_output(self, relative: str) -> pa.NativeFile:
        """A new file for writing; Arrow's own OS file locally (no GIL while
        it writes), the file system's buffered writer elsewhere."""
        path = self.path(relative)
        if self.local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            return pa.OSFile(path, "wb")
        return pa.PythonFile(self.fs.open(path, "wb"), mode="w")

    def sync(self, relative: str) -> None:
        """Make a closed file's bytes durable (locally; a no-op elsewhere)."""
        if self.local:
            fd = os.open(self.path(relative), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def sync_dirs(self, relatives: set[str]) -> None:
        """Make renames and creations in these directories durable (locally)."""
        if self.local:
            for relative in sorted(relatives):
                fd = os.open(self.path(relative), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def size(self, relative: str) -> int:
        if self.local:
            return os.stat(self.path(relative)).st_size
        self._fresh()
        return int(self.fs.size(self.path(relative)))

    def move(self, src: str, dst: str) -> None:
        """Move one file over ``dst`` (replacing it). Raises FileNotFoundError
        when ``src`` is gone. Atomic locally; copy-then-delete on object stores,
        so a crash between the two leaves both (the caller copes)."""
        source, target = self.path(src), self.path(dst)
        if self.local:
            try:
                os.replace(source, target)
            except FileNotFoundError:
                if not os.path.exists(source):
                    raise
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.replace(source, target)
            return
        try:
            self.fs.cp_file(source, target)
        except NotImplementedError:
            self.fs.mv(source, target)
            return
        self.fs.rm_file(source)

    # -- small metadata files -----------------------------------------------

    def write_atomic(self, relative: str, data: bytes) -> None:
        write_atomic(self.fs, self.path(relative), data)

    def read(self, relative: str) -> bytes | None:
        self._fresh()
        try:
            with self.fs.open(self.path(relative), "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def exists(self, relative: str) -> bool:
        self._fresh()
        return bool(self.fs.exists(self.path(relative)))

    def list(self, relative: str) -> list[str]:
        """Base names in a directory (objects and sub-prefixes); [] if absent."""
        self._fresh()
        try:
            names = self.fs.ls(self.path(relative), detail=False)
        except FileNotFoundError:
            return []
        return [n.rstrip("/").rsplit("/", 1)[-1] for n in names]

    def remove(self, relative: str) -> None:
        try:
            self.fs.rm_file(self.path(relative))
        except FileNotFoundError:
            pass

    def remove_tree(self, relative: str) -> None:
        self._fresh()
        try:
            self.fs.rm(self.path(relative), recursive=True)
        except FileNotFoundError:
            pass


def describe_os_error(exc: OSError, what: str) -> str:
    """An OSError as a sentence that says what to change."""
    if exc.errno == errno.ENOSPC:
        return f"{what}: the file system is full (no space left on device)"
    if exc.errno == errno.EFBIG:
        return f"{what}: the file is larger than this process may write (file size limit)"
    if exc.errno == errno.EDQUOT:
        return f"{what}: the disk quota is exhausted"
    if exc.errno in (errno.EACCES, errno.EPERM) or isinstance(exc, PermissionError):
        return f"{what}: permission denied ({exc.strerror or exc})"
    if exc.errno == errno.EROFS:
        return f"{what}: the file system is read-only"
    return f"{what}: {exc.strerror or exc}"
