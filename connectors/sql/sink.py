"""What both SQL sinks do the same way, on the driver and on executors.

``SqlSink`` is the base of ``PostgresTransactions`` and ``MySQLTransactions``:
their target and dead-letter tables (each found once, by the sink's own
lookup against its database, and cached), a sink made to settle prepared
transactions by hand (``for_url``), the writers it begins for each commit
mode (its dialect's ``SqlWriter``, ``sql/writer.py``), the driver's commit,
rollback and listing of prepared ids, and its calls that ride out a lost
connection (``reconnecting``). A dialect supplies the rest: its engine, its
table lookup, its writer class, the statements that end a prepared
transaction and list prepared ids, and which of its driver's errors mean a
lost connection (its ``failures.py``).
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ClassVar, TypeVar

import sqlalchemy as sa
from pyspark.sql.types import StructType
from sqlalchemy.engine import URL

from eoskit.connectors.sql.deadletter import DeadLetterTable, source_columns_of
from eoskit.connectors.sql.identifiers import parse_table_name
from eoskit.connectors.sql.jdbc import JdbcDialect
from eoskit.connectors.sql.retry import Attempt, reconnecting
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.tables import TargetTable, constraint_columns
from eoskit.connectors.sql.urls import safe
from eoskit.connectors.sql.writer import SqlWriter
from eoskit.twophase.contract import (
    CommitMode,
    DirectCommitting,
    MarkedCommitting,
    Marker,
    TwoPhaseCommitting,
)
from eoskit.twophase.txn_id import TxnId

T = TypeVar("T")

log = logging.getLogger(__name__)


class SqlSink(TwoPhaseCommitting, MarkedCommitting, DirectCommitting):
    """A SQL table as a sink with all three commit capabilities; picklable.
    A dialect sets ``settings``, ``schema``, ``url``, ``_target`` and
    ``_dead_letters`` (None) in its ``__init__``, names its database in
    ``DATABASE``, its URL backends in ``BACKENDS``, its JDBC mapping in
    ``JDBC``, its quotes in ``identifier_quotes`` and ``CREATE_LIKE``, and
    its task's writer in ``WRITER``."""

    DATABASE: ClassVar[str]
    BACKENDS: ClassVar[tuple[str, ...]]
    #: How Spark's JDBC URLs and options map to this database (``sql/jdbc.py``).
    JDBC: ClassVar[JdbcDialect]
    #: The quotes ``dbtable`` may use, the first the one names are written with.
    identifier_quotes: ClassVar[str]
    #: The statement that creates table ``{new}`` like table ``{old}`` (both
    #: quoted by the driver): a scratch copy for ``eoskit chaos`` (``sql/scratch.py``).
    CREATE_LIKE: ClassVar[str]
    #: A task's writer (``sql/writer.py``), made on an executor by ``begin_*``.
    WRITER: ClassVar[type[SqlWriter]]
    #: The statement that ends a prepared transaction, ``verb`` COMMIT or
    #: ROLLBACK (``{verb} PREPARED``, ``XA {verb}``), as messages name it.
    END_PREPARED: ClassVar[str]
    #: What listing the prepared ids is called in messages.
    LIST_PREPARED: ClassVar[str]
    #: Part of a running query, whose start-up check reached the server: a
    #: lost connection is waited for in every process of the job, even one
    #: that has not talked to the server yet (``retry.reconnecting``). False
    #: for a sink made to settle transactions by hand (``for_url``): a server
    #: it never reached fails at once.
    in_query: bool = True
    settings: SqlSinkSettings
    schema: StructType
    url: URL
    _target: TargetTable | None
    _dead_letters: DeadLetterTable | None

    # -- what a dialect supplies ----------------------------------------------

    @abstractmethod
    def _engine(self) -> sa.Engine:
        """A SQLAlchemy engine without a pool, for one lookup (disposed after)."""

    @abstractmethod
    def _resolve(self) -> TargetTable:
        """The target table as the database has it (or creates it)."""

    @staticmethod
    @abstractmethod
    def _connection_lost(exc: BaseException) -> bool:
        """Whether ``exc`` lost the connection (the dialect's ``failures.lost``)."""

    @abstractmethod
    def _drop_connection(self) -> None:
        """Forget this process's cached connection to ``url``."""

    @abstractmethod
    def _end_prepared(self, statement: str, txn_id: str, attempt: Attempt) -> bool:
        """Run ``statement`` (``END_PREPARED`` with its verb) for ``txn_id``
        on the cached connection, the sending inside ``attempt.sending()``;
        True if it ended the transaction, False if no prepared transaction
        has the id. On the driver (``rollback_prepared`` on an executor
        too), inside ``reconnecting``: a lost connection is tried again on a
        new one; any other error fails the caller (the coordinator's call,
        and with it the batch's commit, which a restart repeats)."""

    @abstractmethod
    def _prepared_ids(self, prefix: str) -> list[str]:
        """The prepared ids starting with ``prefix``, sorted, read on the
        cached connection. Inside ``reconnecting``, like ``_end_prepared``."""

    # -- the same for both ------------------------------------------------------

    @classmethod
    def for_url(cls, url: str) -> "SqlSink":
        """Enough of a sink to list and settle prepared ids (no table needed)."""
        settings = SqlSinkSettings(url=url, table=parse_table_name("-"), mode="append", key=(),
                                   commit_mode=CommitMode.TWOPHASE, create_table=False)
        sink = cls(settings, StructType([]))  # type: ignore[call-arg]
        sink.in_query = False
        return sink

    def describe(self) -> str:
        # ``dbtable`` as given, read off the parsed name: on an executor
        # (every task's reconnecting call names the sink) nothing of
        # ``settings.py`` runs.
        return f"{self.DATABASE} {safe(self.url)} table {self.settings.table.text}"

    def dead_letter_destination(self) -> str | None:
        table = self.settings.dead_letter_table
        return None if table is None else f"{self.DATABASE} table {table}"

    @property
    def target(self) -> TargetTable:
        if self._target is None:
            self._target = self._resolve()
        return self._target

    def table_columns(self, dataframe_columns: list[str]) -> list[str]:
        """The table's spelling of these DataFrame columns, as the driver's
        lookup matched them (``TargetTable.column_of``, ``sql/tables.py``):
        what a task's statements name."""
        return [self.target.column_of.get(c, c) for c in dataframe_columns]

    @property
    def dead_letter_table(self) -> DeadLetterTable | None:
        """Where refused rows go; None: a refused row fails the batch."""
        if self._dead_letters is None and self.settings.dead_letter_table is not None:
            self._dead_letters = DeadLetterTable.locate(self.settings.dead_letter_table,
                                                        self.target)
        return self._dead_letters

    @property
    def dead_letter_sources(self) -> tuple[str, ...]:
        """The DataFrame columns a dead letter carries as its source position."""
        return source_columns_of(self.settings, self.schema)

    @contextmanager
    def lookup(self) -> Iterator[sa.Engine]:
        """An engine for one lookup or check, disposed after it."""
        engine = self._engine()
        try:
            yield engine
        finally:
            engine.dispose()

    def ensure_dead_letter_table(self) -> DeadLetterTable | None:
        """The dead-letter table, created if missing (driver side, at the check)."""
        table = self.dead_letter_table
        if table is not None:
            with self.lookup() as engine:
                table.ensure(engine)
        return table

    def constraint_columns(self, constraint: str) -> tuple[str, ...]:
        """The target's columns a constraint or key covers, for an error
        message (empty if they cannot be read)."""
        with self.lookup() as engine:
            try:
                return constraint_columns(engine, self.target, constraint)
            except sa.exc.SQLAlchemyError:
                return ()

    def begin_prepared(self, txn_id: str) -> SqlWriter:
        return self.WRITER(self, txn_id, two_phase=True)

    def begin_marked(self, marker: Marker, attempt: int) -> SqlWriter:
        return self.WRITER(self, self._attempt_id(marker, attempt), two_phase=False, marker=marker)

    def begin_direct(self, marker: Marker, attempt: int) -> SqlWriter:
        return self.WRITER(self, self._attempt_id(marker, attempt), two_phase=False)

    @staticmethod
    def _attempt_id(marker: Marker, attempt: int) -> str:
        return str(TxnId.new(marker.sink_id, marker.batch, marker.partition, attempt))

    def commit_prepared(self, txn_id: str) -> bool:
        return self._finish("COMMIT", txn_id)

    def rollback_prepared(self, txn_id: str) -> bool:
        return self._finish("ROLLBACK", txn_id)

    def _finish(self, verb: str, txn_id: str) -> bool:
        """Commit or roll back a prepared transaction by id; False if no
        prepared transaction has the id. A lost connection is ridden out:
        the statement is sent again on a new connection. If a try lost its
        connection with the statement on the wire, the server may have
        finished the transaction before the connection dropped; an id that
        is gone on a later try then counts as done (see retry.py), so that
        the coordinator's call that wrote the decision does not report a
        committed id as vanished."""
        statement = self.END_PREPARED.format(verb=verb)

        def attempt(state: Attempt) -> bool:
            if self._end_prepared(statement, txn_id, state):
                return True
            if state.maybe_applied:
                log.info("%s %s: done by an earlier try whose connection was lost",
                         statement, txn_id)
            return state.maybe_applied

        return self.reconnecting(f"{statement} {txn_id}", attempt)

    def list_prepared(self, prefix: str) -> list[str]:
        """Prepared ids starting with ``prefix``; a read, so a lost
        connection is simply tried again."""
        return self.reconnecting(self.LIST_PREPARED, lambda _: self._prepared_ids(prefix))

    def reconnecting(self, what: str, action: Callable[[Attempt], T]) -> T:
        """``action`` on the cached connection, tried again on a new one
        while the server is unreachable (``eoskit.connectors.sql.retry``)."""
        return reconnecting(action, lost=self._connection_lost, drop=self._drop_connection,
                            what=f"{what} in {self.describe()}", server=safe(self.url),
                            reached=self.in_query)
