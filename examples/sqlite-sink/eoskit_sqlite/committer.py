"""The driver's committer of the two-phase mode: it ends the prepared
transactions (``<txn id>.prepared.db`` files) by id.

``commit`` moves a prepared file's rows into its table and records the id
in ``eoskit_committed``, in one transaction; only then is the file deleted.
A crash between the two leaves a file whose id is recorded: the next
``commit`` finds the record, deletes the file and says False (no such
prepared transaction), and ``outcome`` proves from the record that it
committed. So a repeated commit never writes rows twice."""

from __future__ import annotations

from pathlib import Path

from eoskit.twophase.contract import Outcome, ProvesOutcomes
from eoskit.twophase.txn_id import TxnId, sink_prefix

from eoskit_sqlite.writer import connected, quote

SUFFIX = ".prepared.db"


class SqliteCommitter(ProvesOutcomes):
    """Commits, rolls back and lists one SQLite database's prepared transactions; picklable."""

    def __init__(self, path: str, staging: Path) -> None:
        self.path, self.staging = path, staging

    def describe(self) -> str:
        return f"SQLite {self.path}"

    def _file(self, txn_id: str) -> Path:
        return self.staging / f"{txn_id}{SUFFIX}"

    def in_doubt(self, prefix: str) -> list[str]:
        names = (p.name[: -len(SUFFIX)] for p in self.staging.glob(f"*{SUFFIX}"))
        return sorted(n for n in names if n.startswith(prefix))

    def commit(self, txn_id: str) -> bool:
        staged = self._file(txn_id)
        if not staged.exists():
            return False
        with connected(self.path) as conn:
            conn.execute("ATTACH DATABASE ? AS staged", (str(staged),))  # not inside a transaction
            conn.execute("BEGIN IMMEDIATE")
            if conn.execute("SELECT 1 FROM eoskit_committed WHERE txn_id = ?", (txn_id,)).fetchone():
                conn.execute("ROLLBACK")  # an earlier try committed it and died before the delete
                committed_now = False
            else:
                (table,) = conn.execute("SELECT name FROM staged.target").fetchone()
                columns = ", ".join(quote(row[1]) for row in conn.execute("PRAGMA staged.table_info(rows)"))
                conn.execute(f"INSERT INTO main.{quote(table)} ({columns}) SELECT {columns} FROM staged.rows")
                parsed = TxnId.parse(txn_id)
                conn.execute("INSERT INTO eoskit_committed VALUES (?, ?, ?)",
                             (txn_id, parsed.sink_id if parsed else "", parsed.batch if parsed else -1))
                conn.execute("COMMIT")
                committed_now = True
            conn.execute("DETACH DATABASE staged")
        staged.unlink(missing_ok=True)
        return committed_now

    def decision_applied(self, sink_id: str, batch: int, txn_ids) -> None:
        """Once a batch is decided and applied: remove the ``.writing.db``
        files of this sink's batches up to it, left by tasks killed while
        writing (their retries wrote under new attempt ids). Every task of
        those batches has ended; a straggler still writing one finds it gone
        at its prepare and fails, and the decision does not name it anyway.
        Idempotent, as eoskit requires."""
        for path in self.staging.glob(f"{sink_prefix(sink_id)}*.writing.db"):
            parsed = TxnId.parse(path.name[: -len(".writing.db")])
            if parsed is not None and parsed.batch <= batch:
                path.unlink(missing_ok=True)

    def roll_back(self, txn_id: str) -> bool:
        staged = self._file(txn_id)
        existed = staged.exists()
        staged.unlink(missing_ok=True)
        return existed

    def outcome(self, txn_id: str, evidence: str) -> Outcome:
        with connected(self.path) as conn:
            if conn.execute("SELECT 1 FROM eoskit_committed WHERE txn_id = ?", (evidence,)).fetchone():
                return Outcome.COMMITTED
        return Outcome.UNKNOWN if self._file(txn_id).exists() else Outcome.ROLLED_BACK

    def forget_evidence(self, sink_id: str, below_batch: int) -> None:
        """Records of batches whose decisions eoskit has forgotten (the table stays flat)."""
        with connected(self.path) as conn:
            conn.execute("DELETE FROM eoskit_committed WHERE sink_id = ? AND batch < ?", (sink_id, below_batch))
