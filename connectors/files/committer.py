"""The files sink's committer: the driver's side of its two-phase commit
(the steps are in ``files/transactions.py``'s module doc)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from eoskit.connectors.files import layout
from eoskit.connectors.files.manifests import compact, compacted_through
from eoskit.connectors.files.writer import read_manifest
from eoskit.twophase.contract import CommitMode, Outcome, ProvesOutcomes
from eoskit.twophase.txn_id import TxnId

if TYPE_CHECKING:
    from eoskit.connectors.files.transactions import FilesTransactions

log = logging.getLogger(__name__)


class FilesCommitter(ProvesOutcomes):
    """Ends one output directory's prepared transactions; picklable."""

    def __init__(self, sink: "FilesTransactions") -> None:
        self.sink = sink
        self.storage = sink.storage

    def describe(self) -> str:
        return self.sink.describe()

    def in_doubt(self, prefix: str) -> list[str]:
        entries = (layout.parse_staging_entry(n) for n in self.storage.list(layout.STAGING_DIR))
        return sorted(e.txn_id for e in entries
                      if e is not None and e.kind == "prepared" and e.txn_id.startswith(prefix))

    def commit(self, txn_id: str) -> bool:
        # Step 1: the manifest says what to move; none means already settled.
        data = self.storage.read(layout.prepared_manifest(txn_id))
        if data is None:
            return False
        # Step 2: every file to its final name (idempotent).
        self.sink.move_to_final(txn_id, read_manifest(data))
        # Step 3: committed; the batch's manifest is made from this one.
        self.storage.write_atomic(layout.committed_manifest(txn_id), data)
        self.storage.remove(layout.prepared_manifest(txn_id))
        self.storage.remove_tree(layout.staging_dir(txn_id))
        return True

    def outcome(self, txn_id: str, evidence: str) -> Outcome:
        """``evidence`` is the final name of one of the transaction's files
        (``FilesWriter.prepare``): only its commit puts a file there."""
        if self.storage.exists(evidence):
            return Outcome.COMMITTED
        if self.storage.exists(layout.prepared_manifest(txn_id)):
            return Outcome.UNKNOWN
        return Outcome.ROLLED_BACK

    def roll_back(self, txn_id: str) -> bool:
        prepared = self.storage.exists(layout.prepared_manifest(txn_id))
        self.sink.discard(txn_id)
        return prepared

    def decision_applied(self, sink_id: str, batch: int, txn_ids: Sequence[str]) -> None:
        if self.sink.settings.commit_mode is not CommitMode.TWOPHASE:
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
            "sinkId": sink_id, "batch": batch, "format": self.sink.settings.format,
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
