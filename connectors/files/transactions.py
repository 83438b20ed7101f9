"""A directory of Parquet or JSON-lines files as a two-phase sink.

The transaction of a task is its staging directory plus a manifest
(``eoskit.connectors.files.layout``); the driver's side of the protocol,
the committer (``files/committer.py``):

- ``in_doubt``: the ``.prepared`` manifests in ``_eoskit/staging/``
  (one listing).
- ``commit``: 1. read the manifest (none: already committed or
  rolled back, return False); 2. move each staged file to its final name,
  where "staged gone and final present" counts as moved, so a repeated
  commit after a crash, or after an object store's copy without its
  delete, finishes the job; 3. write the ``.committed`` manifest, then
  remove the ``.prepared`` one and the empty staging directory.
- ``outcome`` (of an id no longer prepared): committed if the final name
  of one of its files (the evidence its prepare left) exists.
- ``roll_back``: delete the staged files, then the manifest (the
  order keeps a half-done rollback listed, so it is done again).
- ``decision_applied`` (after every id of the batch is committed): write the
  batch's manifest under ``_eoskit/batches/`` from the ``.committed``
  manifests, remove them, and delete staging directories of this batch and
  older that never got a manifest (tasks killed mid-write); every
  ``layout.COMPACT_EVERY`` batches, merge the batch manifests into one
  compact file (``manifests.compact``), so that a job of weeks leaves a
  file per hundred batches there, not one per batch.

Readers that list the directory see each committed file once: a file
appears whole (a rename, or an object's PUT), at a name no other attempt
can take.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import posixpath
import time
from collections.abc import Mapping, Sequence

from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from eoskit.connectors.files import layout
from eoskit.connectors.files.committer import FilesCommitter
from eoskit.connectors.files.settings import FilesSettings
from eoskit.connectors.files.storage import Storage, describe_os_error
from eoskit.connectors.files.writer import FilesWriter, StagedFile
from eoskit.twophase.contract import (
    DirectCommitting,
    Marker,
    SinkContext,
    SinkError,
    TwoPhaseCommitting,
)
from eoskit.twophase.txn_id import TxnId

log = logging.getLogger(__name__)

_PARTITION_TYPES = (StringType, LongType, IntegerType, ShortType, ByteType, BooleanType, DateType,
                    DecimalType)


class FilesTransactions(TwoPhaseCommitting, DirectCommitting):
    """The sink for one output directory; picklable."""

    kind = "files"

    def __init__(self, settings: FilesSettings, schema: StructType) -> None:
        self.settings = settings
        self.schema = schema
        self.storage = Storage(settings.path, settings.storage_options)

    @classmethod
    def for_path(cls, path: str, options: Mapping[str, str]) -> "FilesTransactions":
        """Enough of a sink to list and settle prepared ids under ``path``
        (its format, for messages, from the sink ids recorded there)."""
        settings = FilesSettings.parse({**options, "path": path}, "eoskit txn", "parquet", cls)
        sink = cls(settings, StructType([]))
        for name in sink.storage.list(layout.SINKS_DIR)[:1]:
            recorded = json.loads(sink.storage.read(f"{layout.SINKS_DIR}/{name}") or b"{}")
            if recorded.get("format") == "json":
                sink = cls(dataclasses.replace(settings, format="json", compression="none"), StructType([]))
        return sink

    def describe(self) -> str:
        return f"{self.settings.format} files at {self.settings.path}"

    # -- checks, on the driver -----------------------------------------------------

    def check(self, schema: StructType, context: SinkContext) -> None:
        self._check_columns(schema)
        self._check_directory()
        self._claim(context)

    def _check_columns(self, schema: StructType) -> None:
        names = [f.name for f in schema.fields]
        for column in self.settings.partition_by:
            if column not in names:
                raise SinkError(
                    f"{self.describe()}: partition column {column!r} (option 'partitionBy') is "
                    f"not a column of the DataFrame; its columns: {', '.join(names)}")
            kind = schema[column].dataType
            if not isinstance(kind, _PARTITION_TYPES):
                raise SinkError(
                    f"{self.describe()}: partition column {column!r} is {kind.simpleString()}; "
                    "partition by a string, integer, boolean, date or decimal column (derive "
                    "one, e.g. F.to_date(...) for a timestamp)")
        if self.settings.partition_by and len(self.settings.partition_by) == len(names):
            raise SinkError(f"{self.describe()}: every column is a partition column; the files "
                            "would hold no data")

    def _check_directory(self) -> None:
        storage = self.storage
        try:
            if storage.fs.isfile(storage.root):
                raise SinkError(f"option 'path' = {self.settings.path!r} is a file, not a directory")
            if storage.exists("_spark_metadata"):
                raise SinkError(
                    f"{self.settings.path} holds _spark_metadata, the log of Spark's own file "
                    "sink: Spark readers would then see only the files that log lists and miss "
                    "every file eoskit writes. Write to a new directory (or move _spark_metadata "
                    "away if Spark readers should list the directory instead)")
        except OSError as exc:
            raise SinkError(describe_os_error(exc, f"cannot read {self.settings.path}")) from None

    def _claim(self, context: SinkContext) -> None:
        """Record which checkpoint owns the sink id: file names and staged
        transactions are namespaced by it. Also proves the write permission."""
        claim = layout.sink_claim(context.sink_id)
        try:
            data = self.storage.read(claim)
            if data is None:
                self.storage.write_atomic(claim, json.dumps({
                    "sinkId": context.sink_id, "checkpointLocation": context.checkpoint_location,
                    "format": self.settings.format, "createdAt": time.time(),
                }).encode())
                return
        except OSError as exc:
            raise SinkError(describe_os_error(
                exc, f"cannot write under {self.settings.path} (eoskit records its sink id in "
                     f"{layout.SINKS_DIR}/ there)")) from None
        owner = json.loads(data).get("checkpointLocation", "")
        if owner.rstrip("/") != context.checkpoint_location.rstrip("/"):
            raise SinkError(
                f"sink id {context.sink_id!r} in {self.settings.path} belongs to the query with "
                f"checkpoint {owner}; this query's checkpoint is {context.checkpoint_location}. "
                "Two jobs must not share a sink id: set another 'sinkId' (or, if the checkpoint "
                f"moved, settle its in-doubt transactions and delete {layout.sink_claim(context.sink_id)})")

    # -- tasks, on executors -----------------------------------------------------------

    def begin_prepared(self, txn_id: str) -> FilesWriter:
        parsed = TxnId.parse(txn_id)
        if parsed is None:
            raise SinkError(f"{txn_id!r} is not an eoskit transaction id")
        return FilesWriter(self, txn_id, parsed.sink_id, parsed.batch, parsed.partition)

    def begin_direct(self, marker: Marker, attempt: int) -> FilesWriter:
        txn_id = str(TxnId.new(marker.sink_id, marker.batch, marker.partition, attempt))
        return FilesWriter(self, txn_id, marker.sink_id, marker.batch, marker.partition)

    def committer(self) -> FilesCommitter:
        return FilesCommitter(self)

    # -- shared by the writer and the committer ---------------------------------------

    def move_to_final(self, txn_id: str, files: Sequence[StagedFile]) -> None:
        directories = set()
        for staged in files:
            try:
                self.storage.move(staged.staged, staged.path)
            except FileNotFoundError:
                if not self.storage.exists(staged.path):
                    raise SinkError(
                        f"{self.describe()}: transaction {txn_id}'s file {staged.staged} is gone "
                        f"and its final name {staged.path} does not exist: someone removed it "
                        "between prepare and commit, and its rows are missing") from None
            directories.add(posixpath.dirname(staged.path))
        self.storage.sync_dirs(directories)

    def discard(self, txn_id: str) -> None:
        """Delete a transaction's staged files, then its manifest."""
        self.storage.remove_tree(layout.staging_dir(txn_id))
        self.storage.remove(layout.prepared_manifest(txn_id))

