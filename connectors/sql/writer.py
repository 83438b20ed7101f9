"""A task's transaction in a SQL sink, the same for every dialect.

``SqlWriter`` is the base of ``PostgresWriter`` and ``MySQLWriter``, which
supply a database's statements: one task attempt's writes. How the
transaction ends is the writer's kind, one class per commit mode, each the
contract's writer of that mode (``twophase/contract.py``):
``PreparingSqlWriter`` (``twophase``: ``prepare``), ``DirectSqlWriter``
(``at_least_once``: ``commit``) and ``MarkedSqlWriter`` (``idempotent``:
``claim``, then ``commit``). ``SqlSink.begin_*`` makes a dialect's writer
of the mode's kind (``kind_of``) on an executor. What a task does, in the
order ``eoskit.twophase.task`` calls it:

1. Open the transaction, lazily, on the first statement (``_open``): on a
   connection of the dialect's choosing, tried again on a new one while the
   server is unreachable (``SqlSink.reconnecting``). Safe to repeat: nothing
   of the transaction exists until the server has answered, and a server
   rolls back the open transaction of a session that is gone.
2. ``claim`` (idempotent mode, before any write): insert the task's marker
   row in the transaction; no row inserted means a committed attempt has it.
3. ``write`` each Arrow batch. Without a dead-letter table, the dialect's
   bulk path loads the rows and a refused row fails the task with a
   ``SinkError`` naming the row. With one, the dialect loads the rows in
   atomic pieces and bisects a refused piece down to its refused rows
   (``eoskit.connectors.dead_letters.isolate``); those are inserted into the
   dead-letter table in the same transaction (``_set_aside``), so they
   prepare, commit or roll back with the good rows.
4. End the writes (``_end_writes``: what the bulk path left open), then
   ``prepare`` (two-phase: the transaction is durable and committable by its
   id from the driver) or ``commit`` (the rows, and the marker, at once).
5. ``abort`` on any failure, and after a replay's refused claim: roll back
   what is open, never raising; a prepared transaction is left to the
   driver's committer (``Committer.roll_back``).

Writes and prepares are never retried in place (``SqlSink.reconnecting``
wraps step 1 only): a lost connection fails the task, and the protocol's
own rules clean up.

A dialect supplies the statements: the hooks below, each saying where it
runs and what raising means. All of them run on an executor, in the task.
"""

from __future__ import annotations

from abc import abstractmethod
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from eoskit.connectors.dead_letters import DeadLetter, dead_letter
from eoskit.twophase.contract import (
    CommitMode,
    CommittingWriter,
    Marker,
    MarkedWriter,
    PreparingWriter,
    ServiceUnavailableError,
    SinkError,
    TaskWriter,
)
from eoskit.twophase.txn_id import TxnId

if TYPE_CHECKING:
    # Annotations only: sink.py imports this module.
    from eoskit.connectors.sql.reconnect import Attempt
    from eoskit.connectors.sql.sink import SqlSink


class SqlWriter(TaskWriter):
    """One task attempt's transaction in a SQL table; its kind (below) says how it ends."""

    #: Ends with ``prepare`` (a two-phase transaction: ``XA START``, a
    #: session of its own), not ``commit``. Set by the kind.
    two_phase: ClassVar[bool] = False

    #: The driver's base error class (``psycopg.Error``, ``pymysql.MySQLError``):
    #: what the statements of this module turn into a ``SinkError``.
    DriverError: ClassVar[type[Exception]]
    #: Whether a driver error that opening the transaction raises (other
    #: than a lost connection, which ``reconnecting`` rides out) fails the
    #: task as a ``SinkError`` in the sink's words (``_describe``), or as the
    #: driver raised it.
    DESCRIBE_OPEN_ERRORS: ClassVar[bool] = False

    def __init__(self, sink: "SqlSink", txn_id: str, marker: Marker | None = None) -> None:
        self.sink = sink
        self.txn_id = txn_id
        self.marker = marker
        self.rows = 0
        self.bytes = 0
        #: The connection of the open transaction, None before the first
        #: statement and after the transaction ended here.
        self._conn: Any = None
        self._prepared = False
        self._constraints: dict[str, tuple[str, ...]] = {}

    # -- what a dialect supplies ------------------------------------------------

    @abstractmethod
    def _start_transaction(self, attempt: Attempt) -> Any:
        """A connection with this task's transaction begun (isolation level,
        ``BEGIN`` / ``START TRANSACTION`` / ``XA START``). Runs inside
        ``SqlSink.reconnecting``: a lost connection is retried on a new one,
        so it must leave nothing behind when it raises; any other error
        fails the task (``DESCRIBE_OPEN_ERRORS``)."""

    @abstractmethod
    def _insert_marker(self, marker: Marker) -> int:
        """Insert the marker row in the open transaction, waiting for another
        open transaction that holds it; the number of rows inserted (0: a
        committed transaction has it). Raising fails the task."""

    @abstractmethod
    def _write_rows(self, batch: pa.RecordBatch) -> None:
        """The bulk path (no dead-letter table): add the batch's rows to the
        transaction, opening it if needed, and count them in ``rows`` and
        ``bytes``. Raises ``SinkError`` naming the refused row, which fails
        the task (and with it the batch)."""

    @abstractmethod
    def _write_isolating(self, rows: pa.RecordBatch) -> list[tuple[int, str]]:
        """The dead-letter path: add ``rows`` (the batch without its carried
        columns; the task's rows ``self.rows + 1`` on) to the transaction in
        atomic pieces, opening it if needed, and count their ``bytes``.
        Returns the refused rows, ``(offset in rows, message)``, every other
        row written. A message names the row at ``self.rows + offset + 1``.
        Raises ``SinkError`` for anything that is not a refused row (a lock
        timeout, a lost connection), failing the task."""

    @abstractmethod
    def _insert_dead_letters(self, statement: str, letters: list[DeadLetter]) -> None:
        """Run ``statement`` (``DeadLetterTable.insert_sql``) for each dead
        letter in the open transaction. A ``DriverError`` fails the task,
        saying the dead letters could not be inserted."""

    def _end_writes(self) -> None:
        """Finish what the writes left open (a COPY, a staging table's merge)
        before ``prepare`` or ``commit``. Raises ``SinkError``, failing the
        task. Nothing by default."""

    @abstractmethod
    def _prepare_transaction(self) -> None:
        """Prepare the open transaction under ``txn_id`` (``PREPARE
        TRANSACTION``, ``XA END`` + ``XA PREPARE``), and let go of whatever
        would keep the driver from committing it. Raises ``SinkError``,
        failing the task (``abort`` then rolls back)."""

    @abstractmethod
    def _run(self, statement: str) -> None:
        """One statement without parameters (``COMMIT``) on the open
        transaction's connection; a ``DriverError`` is described by the caller."""

    @abstractmethod
    def _roll_back(self, conn: Any) -> None:
        """Roll back the unprepared transaction open on ``conn``, and close
        or drop what cannot be used again. Never raises: it runs after a
        failure, on a transaction that may already be gone."""

    @abstractmethod
    def _describe(self, exc: Any) -> str:
        """A database error in the sink's words: the table, and for a
        refused row its column, constraint and position where known."""

    @abstractmethod
    def _error_text(self, exc: Any) -> str:
        """The server's own message of a driver error, in one line."""

    def _refused(self, exc: Any, *where: Any) -> SinkError:
        """What fails the task for driver error ``exc``: a connection the
        network or the server lost (``ServiceUnavailableError``: Spark's
        retry or the job's restart strategy may well fix it), or the
        server's refusal in the sink's words (``_describe``, with ``where``:
        a restart does not fix it)."""
        if self.sink.DATABASE.lost(exc):
            return ServiceUnavailableError(
                f"lost the connection to {self.sink.describe()} while a task wrote "
                f"({self._error_text(exc)}); its transaction rolls back with the session, and "
                "the task is retried")
        return SinkError(self._describe(exc, *where))

    # -- the task's transaction ---------------------------------------------------

    def _open(self) -> Any:
        """The open transaction's connection: step 1, on the first call."""
        if self._conn is None:
            try:
                self._conn = self.sink.reconnecting("starting a task's transaction",
                                                    self._start_transaction)
            except self.DriverError as exc:
                if not self.DESCRIBE_OPEN_ERRORS:
                    raise
                raise self._refused(exc) from None
        return self._conn

    def write(self, batch: pa.RecordBatch) -> None:
        if self.sink.dead_letter_table is None:
            self._write_rows(batch)
            return
        if not batch.num_rows:
            return
        target = self.sink.target
        rows = batch.drop_columns(list(target.carried)) if target.carried else batch
        refused = self._write_isolating(rows)
        self._set_aside(batch, refused)
        # Counted last: the dead letters are numbered from the rows before.
        self.rows += batch.num_rows

    def _set_aside(self, batch: pa.RecordBatch, refused: list[tuple[int, str]]) -> None:
        """INSERT the refused rows of ``batch`` into the dead-letter table,
        in the task's transaction."""
        if not refused:
            return
        position = TxnId.parse(self.txn_id)
        table = self.sink.dead_letter_table
        assert position is not None and table is not None and self._conn is not None
        letters = [dead_letter(position.sink_id, position.batch, position.partition, batch,
                               offset, self.rows + offset + 1, message,
                               self.sink.dead_letter_sources)
                   for offset, message in sorted(refused, key=lambda r: r[0])]
        at_least_once = self.sink.settings.commit_mode is CommitMode.AT_LEAST_ONCE
        try:
            self._insert_dead_letters(table.insert_sql(tolerate_repeats=at_least_once), letters)
        except self.DriverError as exc:
            raise SinkError(f"cannot insert {len(letters)} dead letter(s) into "
                            f"{table.qualified}: {self._error_text(exc)}") from None
        self.dead_letters += len(letters)

    def abort(self) -> None:
        """Roll back, never raising; a no-op once prepared or committed."""
        conn, self._conn = self._conn, None
        if conn is None or self._prepared:
            return
        self._roll_back(conn)

    # -- for the dialects' messages -------------------------------------------------

    def _constraint_columns(self, constraint: str) -> tuple[str, ...]:
        """The columns ``constraint`` covers, read once per writer."""
        if constraint not in self._constraints:
            self._constraints[constraint] = self.sink.constraint_columns(constraint)
        return self._constraints[constraint]


# -- the kinds: how a task's transaction ends -------------------------------------


class PreparingSqlWriter(SqlWriter, PreparingWriter):
    """Commit mode ``twophase``: step 4 ends with ``prepare``."""

    two_phase = True

    def prepare(self) -> None:
        self._end_writes()
        assert self._conn is not None
        self._prepare_transaction()
        # Only the driver's committer ends it now.
        self._prepared = True
        self._conn = None


class DirectSqlWriter(SqlWriter, CommittingWriter):
    """Commit mode ``at_least_once``: step 4 ends with ``commit``."""

    def commit(self) -> None:
        self._end_writes()
        if self._conn is not None:
            try:
                self._run("COMMIT")
            except self.DriverError as exc:
                raise self._refused(exc) from None
            self._conn = None


class MarkedSqlWriter(DirectSqlWriter, MarkedWriter):
    """Commit mode ``idempotent``: step 2's ``claim``, then ``commit`` ends
    the rows and the marker at once."""

    def claim(self) -> bool:
        assert self.marker is not None
        self._open()
        return self._insert_marker(self.marker) == 1


@cache
def kind_of(writer: type[SqlWriter], kind: type[SqlWriter]) -> type[SqlWriter]:
    """The dialect's ``writer`` (its statements) of ``kind`` (how it ends):
    e.g. ``kind_of(PostgresWriter, PreparingSqlWriter)``. Made once per pair."""
    return type(f"{kind.__name__.replace('Sql', writer.__name__.removesuffix('Writer'), 1)}",
                (writer, kind), {"__module__": writer.__module__})


__all__ = ["DirectSqlWriter", "MarkedSqlWriter", "PreparingSqlWriter", "SqlWriter", "kind_of"]
