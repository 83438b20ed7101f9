"""The declaration: where the sink writes, what it checks before data moves,
and the other two roles it makes (a task's writer, the driver's committer).

Two capabilities (``eoskit.twophase.contract``):

- ``TwoPhaseCommitting`` (``commitMode=twophase``, the default): SQLite has
  no prepared transactions, so a task prepares by writing its rows into a
  staging database of its own beside the target and renaming it
  ``<txn id>.prepared.db`` (``writer.py``); the driver's committer moves the
  rows into the table in one transaction with a row naming the id
  (``committer.py``), which is also the evidence of the outcome.
- ``MarkedCommitting`` (``commitMode=idempotent``): a task writes straight
  into the table and commits its rows together with a marker row (sink id,
  batch, partition, rows); a replay finds the marker and writes nothing.

Picklable: eoskit sends the sink to executors and to the driver's commit
process; it holds a path, a table name and column names, and connects where
it runs.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from eoskit.twophase.contract import (
    MarkedCommitting,
    Marker,
    SinkContext,
    SinkError,
    TwoPhaseCommitting,
)

from eoskit_sqlite.committer import SqliteCommitter
from eoskit_sqlite.writer import MarkedSqliteWriter, StagingWriter, connected, quote

#: The rows of the idempotent mode's markers, and the two-phase commits' evidence.
MARKERS, COMMITTED = "eoskit_markers", "eoskit_committed"
_HEADER = b"SQLite format 3\x00"


class SqliteSink(TwoPhaseCommitting, MarkedCommitting):
    """One table of one SQLite database file."""

    kind = "sqlite"

    def __init__(self, path: str, table: str, columns: Sequence[str]) -> None:
        self.path, self.table, self.columns = str(Path(path).absolute()), table, tuple(columns)

    @classmethod
    def for_path(cls, path: str) -> "SqliteSink":
        """Enough of a sink for ``eoskit txn`` to list and settle prepared ids."""
        return cls(path, "-", ())

    @staticmethod
    def is_database(path: str) -> bool:
        try:
            with open(path, "rb") as file:
                return file.read(len(_HEADER)) == _HEADER
        except OSError:
            return False

    @property
    def staging(self) -> Path:
        """Where prepared transactions wait: ``<database>.eoskit/``."""
        return Path(self.path + ".eoskit")

    def describe(self) -> str:
        return f"SQLite {self.path} table {self.table}"

    def check(self, schema, context: SinkContext) -> None:
        """On the driver, before a batch's data moves: the database opens, the
        table exists (created from the DataFrame's columns if missing) and
        has every column, and the protocol's own tables are there."""
        try:
            with connected(self.path) as conn:
                conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(self.table)} "
                             f"({', '.join(map(quote, self.columns))})")
                found = {row[1] for row in conn.execute(f"PRAGMA table_info({quote(self.table)})")}
                missing = [c for c in self.columns if c not in found]
                if missing:
                    raise SinkError(f"{self.describe()} has no column(s) {', '.join(missing)} "
                                    "of the DataFrame: add them, or select the table's columns")
                conn.execute(f"CREATE TABLE IF NOT EXISTS {MARKERS} (sink_id TEXT, batch INTEGER, "
                             "task_partition INTEGER, rows INTEGER, "
                             "PRIMARY KEY (sink_id, batch, task_partition))")
                conn.execute(f"CREATE TABLE IF NOT EXISTS {COMMITTED} (txn_id TEXT PRIMARY KEY, "
                             "sink_id TEXT, batch INTEGER)")
        except sqlite3.Error as exc:
            raise SinkError(f"cannot use {self.describe()}: {exc}") from None
        self.staging.mkdir(exist_ok=True)

    # -- the writers, on executors ------------------------------------------------

    def begin_prepared(self, txn_id: str) -> StagingWriter:
        return StagingWriter(self.staging, txn_id, self.table, self.columns)

    def begin_marked(self, marker: Marker, attempt: int) -> MarkedSqliteWriter:
        return MarkedSqliteWriter(self.path, self.table, self.columns, marker)

    # -- the driver's side ------------------------------------------------------------

    def committer(self) -> SqliteCommitter:
        return SqliteCommitter(self.path, self.staging)

    def forget_markers(self, sink_id: str, below_batch: int) -> None:
        """Markers of batches Spark can no longer replay (the marker table stays flat)."""
        with connected(self.path) as conn:
            conn.execute(f"DELETE FROM {MARKERS} WHERE sink_id = ? AND batch < ?", (sink_id, below_batch))

