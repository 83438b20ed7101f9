"""The files sink's scratch copy (``runtime.components.Scratch``): the
output path with a suffix (``s3://bucket/orders-chaosr1``), on the same file
system with the same options; read as a reader of whole batches reads it
(the files the committed batches' manifests list, with pyarrow, partition
columns from their ``key=value`` folders); removed at the end. Runs on the
driver of ``eoskit chaos``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from eoskit.connectors.files.manifests import committed_batches
from eoskit.connectors.files.settings import FilesSettings, normalise_path
from eoskit.connectors.files.storage import Storage

if TYPE_CHECKING:
    from eoskit.connectors.files.datasource import FilesSink

_DROPPED = ("sinkid", "path")  # each run's checkpoint gives it a sink id of its own


@dataclass
class FilesScratch:
    """The scratch copy of ``original``'s output path, named with ``suffix``."""

    original: "FilesSink"
    suffix: str

    def __post_init__(self) -> None:
        path = f"{normalise_path(self.original.path).rstrip('/')}-{self.suffix}"
        options = {k: v for k, v in self.original.options.items() if k.lower() not in _DROPPED}
        self._sink = replace(self.original, path=path, options=options)
        source = self._sink.data_source
        self._settings = FilesSettings.parse(self._sink.all_options(), source.short_name,
                                             self._sink.format, source.sink_type)
        self.name = f"path {path}"

    def sink(self) -> "FilesSink":
        return self._sink

    def _storage(self) -> Storage:
        return Storage(self._settings.path, self._settings.storage_options)

    def create(self) -> None:
        """Nothing: the sink creates its path as it writes."""

    def rows(self) -> tuple[tuple[str, ...], list[tuple], tuple[str, ...]]:
        import pyarrow.dataset as ds

        storage = self._storage()
        files = [storage.path(f) for batch in committed_batches(self._settings.path, self._settings.storage_options)
                 for f in batch.files]
        if not files:
            return (), [], ()
        dataset = ds.dataset(files, format=self._settings.format, filesystem=storage.fs,
                             partitioning="hive" if self._settings.partition_by else None,
                             partition_base_dir=storage.root)
        table = dataset.to_table()
        columns = tuple(table.column_names)
        return columns, [tuple(r[c] for c in columns) for r in table.to_pylist()], ()

    def drop(self) -> None:
        storage = self._storage()
        if storage.fs.exists(storage.root):
            storage.fs.rm(storage.root, recursive=True)
