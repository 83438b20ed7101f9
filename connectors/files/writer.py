"""A task attempt's files, on an executor: Arrow in, Parquet or JSON lines out.

Every file a task writes goes to its transaction's staging directory
(``_eoskit/staging/<txn>/<seq>.staged``); its final name, deterministic in
(sink id, batch, task partition, sequence), is decided when the file is
opened and recorded in the manifest. ``prepare`` closes every file, makes it
durable, and writes the manifest last, atomically: a transaction is
prepared exactly when its manifest exists. In ``at_least_once`` mode,
``commit`` moves the files to their final names itself.

No per-row Python: partition directories come from a hash aggregation over
the partition columns (formatted once per distinct value), Parquet from
pyarrow's writer (row groups buffered up to ``ROW_GROUP_ROWS``), JSON lines
from the vectorised encoder in ``jsonlines``.
"""

from __future__ import annotations

import json
import posixpath
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from eoskit.connectors.files import layout
from eoskit.connectors.files.jsonlines import JsonEncodingError, encode_lines
from eoskit.connectors.files.storage import Storage, describe_os_error
from eoskit.twophase.contract import CommittingWriter, PreparingWriter, SinkError

if TYPE_CHECKING:
    from eoskit.connectors.files.transactions import FilesTransactions

#: Rows buffered per Parquet file before a row group is written (Spark hands
#: Arrow batches of 10,000 rows; a row group per batch would be too small).
ROW_GROUP_ROWS = 1 << 20
ROW_GROUP_BYTES = 64 << 20
#: Files open at once per task; the least recently written is closed beyond it.
MAX_OPEN_FILES = 32


@dataclass(frozen=True)
class StagedFile:
    """One closed file of a transaction: where it is, where it goes."""

    staged: str  # relative to the output root
    path: str  # final, relative to the output root
    rows: int
    bytes: int


def manifest_bytes(txn_id: str, file_format: str, files: Sequence[StagedFile]) -> bytes:
    return json.dumps({
        "txn": txn_id, "format": file_format, "files": [asdict(f) for f in files],
        "rows": sum(f.rows for f in files), "bytes": sum(f.bytes for f in files),
        "writtenAt": time.time(),
    }, sort_keys=True).encode()


def read_manifest(data: bytes) -> list[StagedFile]:
    return [StagedFile(**f) for f in json.loads(data)["files"]]


# -- partition directories ------------------------------------------------------


def partition_texts(column: pa.Array) -> pa.Array:
    """A partition column's values as Spark spells them in directory names."""
    if pa.types.is_boolean(column.type):
        return pc.if_else(column, "true", "false")
    return pc.cast(column, pa.string())


def split_by_partition(batch: pa.RecordBatch, columns: Sequence[str]
                       ) -> Iterator[tuple[tuple[str | None, ...], pa.Table | pa.RecordBatch]]:
    """The batch's rows per distinct partition value tuple, partition columns
    dropped, rows in their original order within each group."""
    if not columns:
        yield (), batch
        return
    table = pa.Table.from_batches([batch])
    keys = {f"k{i}": partition_texts(table.column(c)) for i, c in enumerate(columns)}
    data = table.drop_columns(list(columns))
    if table.num_rows == 0:
        return
    keys["__row"] = pa.array(np.arange(table.num_rows, dtype=np.int64))
    groups = pa.table(keys).group_by([f"k{i}" for i in range(len(columns))], use_threads=False
                                     ).aggregate([("__row", "list")])
    values = [groups.column(f"k{i}").to_pylist() for i in range(len(columns))]
    rows = groups.column("__row_list")
    for g in range(groups.num_rows):
        key = tuple(v[g] for v in values)
        yield key, (data if groups.num_rows == 1 else data.take(rows[g].values))


# -- one open file ----------------------------------------------------------------


class _OpenFile(ABC):
    """One data file being written: its staged and final paths, its rows."""

    def __init__(self, staged: str, path: str) -> None:
        self.staged, self.path, self.rows = staged, path, 0

    @abstractmethod
    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        """Append rows (with the file's schema)."""

    @abstractmethod
    def close(self) -> None:
        """Finish the file (footer, compression trailer) and close it."""


class _ParquetFile(_OpenFile):
    def __init__(self, storage: Storage, staged: str, path: str, schema: pa.Schema, codec: str) -> None:
        super().__init__(staged, path)
        self.stream = storage.open_output(staged)
        self.writer = pq.ParquetWriter(self.stream, schema, compression=codec)
        self.buffer: list[pa.RecordBatch] = []
        self.buffered_rows = self.buffered_bytes = 0

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        batches = data.to_batches() if isinstance(data, pa.Table) else [data]
        self.buffer.extend(batches)
        self.rows += data.num_rows
        self.buffered_rows += data.num_rows
        self.buffered_bytes += data.nbytes
        if self.buffered_rows >= ROW_GROUP_ROWS or self.buffered_bytes >= ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            self.writer.write_table(pa.Table.from_batches(self.buffer), row_group_size=ROW_GROUP_ROWS)
            self.buffer, self.buffered_rows, self.buffered_bytes = [], 0, 0

    def close(self) -> None:
        try:
            self.flush()
            self.writer.close()
        finally:
            self.stream.close()


class _JsonFile(_OpenFile):
    def __init__(self, storage: Storage, staged: str, path: str, codec: str | None) -> None:
        super().__init__(staged, path)
        self.raw = storage.open_output(staged)
        self.stream = pa.CompressedOutputStream(self.raw, codec) if codec else self.raw

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        self.stream.write(encode_lines(data))
        self.rows += data.num_rows

    def close(self) -> None:
        try:
            self.stream.close()
        finally:
            if not self.raw.closed:
                self.raw.close()


# -- the task's transaction ----------------------------------------------------------


class FilesWriter(PreparingWriter, CommittingWriter):
    """One task attempt's files; ``prepare`` (two-phase) or ``commit``
    (at-least-once) ends it."""

    def __init__(self, sink: FilesTransactions, txn_id: str, sink_id: str, batch: int,
                 task: int) -> None:
        self.sink = sink
        self.storage = sink.storage
        self.settings = sink.settings
        self.txn_id = txn_id
        self.sink_id, self.batch, self.task = sink_id, batch, task
        self.rows = 0
        self.bytes = 0
        self._open: OrderedDict[str, _OpenFile] = OrderedDict()
        self._closed: list[StagedFile] = []
        self._seq = 0

    # -- writing --------------------------------------------------------------

    def write(self, batch: pa.RecordBatch) -> None:
        for values, data in split_by_partition(batch, self.settings.partition_by):
            try:
                directory = layout.partition_path(self.settings.partition_by, values)
            except layout.LayoutError as exc:
                raise SinkError(f"{self.sink.describe()}: {exc}") from None
            self._guarded(lambda: self._write_rows(directory, data), f"writing {directory or 'rows'}")
            self.rows += data.num_rows

    def _write_rows(self, directory: str, data: pa.Table | pa.RecordBatch) -> None:
        limit, done = self.settings.max_records_per_file, 0
        while done < data.num_rows:
            current = self._file_for(directory, data.schema)
            count = data.num_rows - done
            if limit:
                count = min(count, limit - current.rows)
            current.write(data.slice(done, count))
            done += count
            if limit and current.rows >= limit:
                self._close(directory)

    def _file_for(self, directory: str, schema: pa.Schema) -> _OpenFile:
        current = self._open.get(directory)
        if current is not None:
            self._open.move_to_end(directory)
            return current
        if len(self._open) >= MAX_OPEN_FILES:
            self._close(next(iter(self._open)))
        seq, self._seq = self._seq, self._seq + 1
        staged = layout.staged_file(self.txn_id, seq)
        name = layout.final_name(self.sink_id, self.batch, self.task, seq, self.settings.extension)
        path = posixpath.join(directory, name) if directory else name
        if self.settings.format == "parquet":
            current = _ParquetFile(self.storage, staged, path, schema, self.settings.codec or "none")
        else:
            current = _JsonFile(self.storage, staged, path, self.settings.codec)
        self._open[directory] = current
        return current

    def _close(self, directory: str) -> None:
        current = self._open.pop(directory)
        current.close()
        self.storage.sync(current.staged)
        size = self.storage.size(current.staged)
        self._closed.append(StagedFile(current.staged, current.path, current.rows, size))
        self.bytes += size

    def _close_all(self) -> None:
        while self._open:
            self._close(next(iter(self._open)))

    def _guarded(self, step: Callable[[], None], what: str) -> None:
        """Run a step; file system errors become a SinkError that says what
        failed and that nothing of this batch is committed."""
        try:
            step()
        except JsonEncodingError as exc:
            raise SinkError(f"{self.sink.describe()}: {exc}") from None
        except OSError as exc:
            raise SinkError(
                describe_os_error(exc, f"{self.sink.describe()}: {what} (transaction {self.txn_id})")
                + ". Nothing of this batch is committed, and files of committed batches are "
                "untouched; fix the cause and restart the query") from None

    # -- ending ------------------------------------------------------------------

    def prepare(self) -> None:
        def step() -> None:
            self._close_all()
            if self.storage.local:
                self.storage.sync_dirs({layout.staging_dir(self.txn_id)})
            self.storage.write_atomic(layout.prepared_manifest(self.txn_id),
                                      manifest_bytes(self.txn_id, self.settings.format, self._closed))
        self._guarded(step, "preparing the staged files")
        # The evidence of its outcome: a file reaches its final name, which
        # no other attempt can take, only by this transaction's commit.
        self.evidence = self._closed[0].path if self._closed else ""

    def commit(self) -> None:
        def step() -> None:
            self._close_all()
            self.sink.move_to_final(self.txn_id, self._closed)
            self.storage.remove_tree(layout.staging_dir(self.txn_id))
        self._guarded(step, "committing the staged files")

    def abort(self) -> None:
        for current in list(self._open.values()):
            try:
                current.close()
            except Exception:  # noqa: BLE001 - aborting after a failure; the files are deleted next
                pass
        self._open.clear()
        try:
            self.sink.discard(self.txn_id)
        except OSError:
            pass  # left for the batch's clean-up (an unprepared staging directory)
