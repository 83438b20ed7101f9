"""A directory of Parquet or JSON-lines files as a two-phase sink.

The transaction of a task is its staging directory plus a manifest
(``eoskit.connectors.files.layout``); the driver's side of the protocol:

- ``list_prepared``: the ``.prepared`` manifests in ``_eoskit/staging/``
  (one listing).
- ``commit_prepared``: 1. read the manifest (none: already committed or
  rolled back, return False); 2. move each staged file to its final name,
  where "staged gone and final present" counts as moved, so a repeated
  commit after a crash, or after an object store's copy without its
  delete, finishes the job; 3. write the ``.committed`` manifest, then
  remove the ``.prepared`` one and the empty staging directory.
- ``outcome`` (of an id no longer prepared): committed if the final name
  of one of its files (the evidence its prepare left) exists.
- ``rollback_prepared``: delete the staged files, then the manifest (the
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
from eoskit.connectors.files.manifests import compact, compacted_through
from eoskit.connectors.files.settings import FilesSettings
from eoskit.connectors.files.storage import Storage, describe_os_error
from eoskit.connectors.files.writer import FilesWriter, StagedFile, read_manifest
from eoskit.twophase.contract import (
    CommitMode,
    DirectCommitting,
    Marker,
    SinkContext,
    SinkError,
    Outcome,
    ProvesOutcomes,
)
from eoskit.twophase.txn_id import TxnId

log = logging.getLogger(__name__)

_PARTITION_TYPES = (StringType, LongType, IntegerType, ShortType, ByteType, BooleanType, DateType,
                    DecimalType)


class FilesTransactions(ProvesOutcomes, DirectCommitting):
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

    # -- the driver's side ----------------------------------------------------------------

    def list_prepared(self, prefix: str) -> list[str]:
        entries = (layout.parse_staging_entry(n) for n in self.storage.list(layout.STAGING_DIR))
        return sorted(e.txn_id for e in entries
                      if e is not None and e.kind == "prepared" and e.txn_id.startswith(prefix))

    def commit_prepared(self, txn_id: str) -> bool:
        # Step 1: the manifest says what to move; none means already settled.
        data = self.storage.read(layout.prepared_manifest(txn_id))
        if data is None:
            return False
        # Step 2: every file to its final name (idempotent).
        self.move_to_final(txn_id, read_manifest(data))
        # Step 3: committed; the batch's manifest is made from this one.
        self.storage.write_atomic(layout.committed_manifest(txn_id), data)
        self.storage.remove(layout.prepared_manifest(txn_id))
        self.storage.remove_tree(layout.staging_dir(txn_id))
        return True

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

    def outcome(self, txn_id: str, evidence: str) -> Outcome:
        """``evidence`` is the final name of one of the transaction's files
        (``FilesWriter.prepare``): only its commit puts a file there."""
        if self.storage.exists(evidence):
            return Outcome.COMMITTED
        if self.storage.exists(layout.prepared_manifest(txn_id)):
            return Outcome.UNKNOWN
        return Outcome.ROLLED_BACK

    def rollback_prepared(self, txn_id: str) -> bool:
        prepared = self.storage.exists(layout.prepared_manifest(txn_id))
        self.discard(txn_id)
        return prepared

    def discard(self, txn_id: str) -> None:
        """Delete a transaction's staged files, then its manifest."""
        self.storage.remove_tree(layout.staging_dir(txn_id))
        self.storage.remove(layout.prepared_manifest(txn_id))

    def decision_applied(self, sink_id: str, batch: int, txn_ids: Sequence[str]) -> None:
        if self.settings.commit_mode is not CommitMode.TWOPHASE:
            return
        target = layout.batch_manifest(sink_id, batch)
        if not self.storage.exists(target):
            self._write_batch_manifest(sink_id, batch, txn_ids, target)
        for txn in txn_ids:
            self.storage.remove(layout.committed_manifest(txn))
        self._remove_unprepared(sink_id, batch)
        if (batch + 1) % layout.COMPACT_EVERY == 0:
            compact(self.storage, sink_id, batch)

    def _write_batch_manifest(self, sink_id: str, batch: int, txn_ids: Sequence[str], target: str) -> None:
        files, missing = [], []
        for txn in txn_ids:
            data = self.storage.read(layout.committed_manifest(txn))
            if data is None:
                missing.append(txn)
            else:
                files += [{"path": f.path, "rows": f.rows, "bytes": f.bytes}
                          for f in read_manifest(data)]
        if txn_ids and len(missing) == len(txn_ids) and compacted_through(self.storage, sink_id) >= batch:
            # A repeat after a crash that came after this batch's compaction:
            # the compact file lists it, and its .committed manifests went
            # with the first application.
            return
        if missing:
            log.warning("batch %d: no committed manifest for %s; the batch manifest lists "
                        "the other transactions' files only", batch, ", ".join(missing))
        self.storage.write_atomic(target, json.dumps({
            "sinkId": sink_id, "batch": batch, "format": self.settings.format,
            "files": sorted(files, key=lambda f: f["path"]),
            "rows": sum(f["rows"] for f in files), "bytes": sum(f["bytes"] for f in files),
            "transactions": sorted(txn_ids), "committedAt": time.time(),
        }, sort_keys=True, indent=1).encode())

    def _remove_unprepared(self, sink_id: str, batch: int) -> None:
        """Staging directories of this sink's batches up to ``batch`` that
        never got a manifest: tasks killed while writing. Every task of these
        batches has finished (a zombie that prepares later finds the
        decision without it and rolls back by itself)."""
        entries = [layout.parse_staging_entry(n) for n in self.storage.list(layout.STAGING_DIR)]
        kinds: dict[str, set[str]] = {}
        for entry in filter(None, entries):
            kinds.setdefault(entry.txn_id, set()).add(entry.kind)
        for txn, kind in kinds.items():
            # A committed transaction's directory is empty: its files were moved first.
            if "files" not in kind or ("prepared" in kind and "committed" not in kind):
                continue
            parsed = TxnId.parse(txn)
            if parsed is not None and parsed.sink_id == sink_id and parsed.batch <= batch:
                log.info("removing the staging directory of %s (no manifest: a task killed "
                         "mid-write; or committed)", txn)
                self.storage.remove_tree(layout.staging_dir(txn))
