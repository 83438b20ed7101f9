"""A task's writer, on an executor: one per task attempt.

eoskit calls ``write`` with each Arrow batch of the task (it counts the
rows itself), then ``prepare`` (two-phase) or ``claim`` first and ``commit``
last (idempotent), or ``abort`` after any failure."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path

import pyarrow as pa

from eoskit.twophase.contract import Marker, MarkedWriter, PreparingWriter, SinkError

#: How long a statement waits for another writer's lock on the database.
BUSY_TIMEOUT_S = 60.0


def quote(name: str) -> str:
    """An SQL identifier as SQLite quotes one: user-given names reach SQL only so."""
    return '"' + name.replace('"', '""') + '"'


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are begun explicitly)."""
    return sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)


@contextmanager
def connected(path: str | Path) -> Iterator[sqlite3.Connection]:
    """A connection for one block, closed after it."""
    with closing(connect(path)) as conn:
        yield conn


def _insert(conn: sqlite3.Connection, table: str, columns: Sequence[str], batch: pa.RecordBatch) -> None:
    """The batch's rows, column by column from Arrow into one ``executemany``."""
    statement = (f"INSERT INTO {table} ({', '.join(map(quote, columns))}) "
                 f"VALUES ({', '.join('?' * len(columns))})")
    try:
        conn.executemany(statement, zip(*(batch.column(c).to_pylist() for c in columns)))
    except sqlite3.Error as exc:
        raise SinkError(f"SQLite refused rows for {table}: {exc}") from None


class StagingWriter(PreparingWriter):
    """Two-phase: the task's rows in ``<txn id>.writing.db`` (table ``rows``,
    and ``target``: the table they are for), renamed ``<txn id>.prepared.db``
    by ``prepare`` (atomic, after an fsync): from then on only the committer
    ends it."""

    def __init__(self, staging: Path, txn_id: str, table: str, columns: Sequence[str]) -> None:
        self.txn_id, self.table, self.columns = txn_id, table, columns
        self.writing = staging / f"{txn_id}.writing.db"
        self.prepared = staging / f"{txn_id}.prepared.db"
        self._conn: sqlite3.Connection | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        if self._conn is None:
            self.writing.unlink(missing_ok=True)  # an earlier try of this very attempt
            self._conn = connect(self.writing)
            self._conn.execute(f"CREATE TABLE rows ({', '.join(map(quote, self.columns))})")
            self._conn.execute("CREATE TABLE target (name TEXT)")
            self._conn.execute("BEGIN")
            self._conn.execute("INSERT INTO target VALUES (?)", (self.table,))
        _insert(self._conn, "rows", self.columns, batch)

    def prepare(self) -> None:
        assert self._conn is not None, "eoskit prepares only a task that wrote rows"
        self._conn.execute("COMMIT")
        self._conn.close()
        self._conn = None
        with open(self.writing, "rb+") as file:
            os.fsync(file.fileno())
        os.replace(self.writing, self.prepared)
        directory = os.open(self.prepared.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        # Only a commit writes the id into the committed table: that row is the evidence.
        self.evidence = self.txn_id

    def abort(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.writing.unlink(missing_ok=True)  # never the prepared file: the committer's


class MarkedSqliteWriter(MarkedWriter):
    """Idempotent: the rows straight into the table, with the marker, in one
    ``BEGIN IMMEDIATE`` transaction (the database's write lock: two attempts
    of one task never both commit)."""

    def __init__(self, path: str, table: str, columns: Sequence[str], marker: Marker) -> None:
        self.table, self.columns, self.marker = quote(table), columns, marker
        self._rows = 0
        self._conn: sqlite3.Connection | None = connect(path)

    def claim(self) -> bool:
        assert self._conn is not None
        self._conn.execute("BEGIN IMMEDIATE")
        key = (self.marker.sink_id, self.marker.batch, self.marker.partition)
        found = self._conn.execute("SELECT rows FROM eoskit_markers WHERE sink_id = ? AND batch = ? "
                                   "AND task_partition = ?", key).fetchone()
        if found is not None:
            self.committed_rows = found[0]  # eoskit refuses a replay with other rows
            return False
        return True

    def write(self, batch: pa.RecordBatch) -> None:
        assert self._conn is not None
        _insert(self._conn, self.table, self.columns, batch)
        self._rows += batch.num_rows

    def commit(self) -> None:
        assert self._conn is not None
        self._conn.execute("INSERT INTO eoskit_markers VALUES (?, ?, ?, ?)",
                           (self.marker.sink_id, self.marker.batch, self.marker.partition, self._rows))
        self._conn.execute("COMMIT")
        self._conn.close()
        self._conn = None

    def abort(self) -> None:
        if self._conn is not None:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            self._conn.close()
            self._conn = None
