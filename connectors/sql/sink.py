"""A SQL table as a sink: the declaration both SQL databases share.

``SqlSink`` is the base of ``PostgresTransactions`` and ``MySQLTransactions``.
It holds what the driver checks and what every role reads: the settings,
the URL (parsed once and shown without its password: ``parse_url``,
``safe``; the plug-in registry's helpers, which must load without
SQLAlchemy, stay in ``urls.py``), the target and dead-letter tables (each
found once, by the dialect's lookup against its database, and cached). It
makes the other two roles:

- a task's writer on an executor (``begin_*``: the dialect's ``SqlWriter``,
  ``sql/writer.py``), one per task attempt and commit mode;
- the driver's committer (``committer()``: the dialect's ``SqlCommitter``,
  ``sql/committer.py``), which ends prepared transactions by id.

Both ride out a lost connection through the sink's ``reconnecting``
(``sql/reconnect.py``), where repeating is safe. A dialect supplies the
rest: its engine, its table lookup, its writer and committer classes, and
which of its driver's errors mean a lost connection (its ``failures.py``).
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ClassVar, TypeVar

import sqlalchemy as sa
from pyspark.sql.types import StructType
from sqlalchemy.engine import URL, make_url

from eoskit.connectors.sql.committer import SqlCommitter
from eoskit.connectors.sql.deadletter import DeadLetterTable, source_columns_of
from eoskit.connectors.sql.identifiers import parse_table_name
from eoskit.connectors.sql.database import SqlDatabase
from eoskit.connectors.sql.reconnect import Attempt, reconnecting
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.tables import TargetTable, constraint_columns
from eoskit.connectors.sql.writer import (
    DirectSqlWriter,
    MarkedSqlWriter,
    PreparingSqlWriter,
    kind_of,
)
from eoskit.core.options import OptionError
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
    A dialect declares its database in ``DATABASE`` (``sql/database.py``)
    and supplies the hooks below."""

    DATABASE: ClassVar[SqlDatabase]
    #: Part of a running query, whose start-up check reached the server: a
    #: lost connection is waited for in every process of the job, even one
    #: that has not talked to the server yet (``reconnecting``). False
    #: for a sink made to settle transactions by hand (``for_url``): a server
    #: it never reached fails at once.
    in_query: bool = True
    settings: SqlSinkSettings
    schema: StructType
    url: URL
    _target: TargetTable | None
    _dead_letters: DeadLetterTable | None

    def __init__(self, settings: SqlSinkSettings, schema: StructType) -> None:
        self.settings = settings
        url = parse_url(settings.url, self.DATABASE.backends)
        self.check_url(url)
        self.url: URL = url.set(drivername=self.DATABASE.driver)
        self.schema = schema
        self._target: TargetTable | None = None
        self._dead_letters: DeadLetterTable | None = None

    # -- what a dialect supplies ----------------------------------------------

    @classmethod
    def check_url(cls, url: URL) -> None:
        """Refuse, with an ``OptionError``, URL keys that would change how the
        server reads the sink's statements; run where the options are checked,
        before anything connects. Nothing by default."""

    @abstractmethod
    def _engine(self) -> sa.Engine:
        """A SQLAlchemy engine without a pool, for one lookup (disposed after)."""

    @abstractmethod
    def _resolve(self) -> TargetTable:
        """The target table as the database has it (or creates it)."""

    @abstractmethod
    def _drop_connection(self) -> None:
        """Forget this process's cached connection to ``url``."""

    # -- the same for both ------------------------------------------------------

    @classmethod
    def for_url(cls, url: str) -> "SqlSink":
        """Enough of a sink for its committer to list and settle prepared
        ids (``eoskit txn``; no table needed)."""
        if url.lower().startswith("jdbc:"):  # as the sink's option takes it
            url = cls.DATABASE.jdbc.translate(url).render_as_string(hide_password=False)
        settings = SqlSinkSettings(url=url, table=parse_table_name("-"), mode="append", key=(),
                                   commit_mode=CommitMode.TWOPHASE, create_table=False)
        sink = cls(settings, StructType([]))  # type: ignore[call-arg]
        sink.in_query = False
        return sink

    def describe(self) -> str:
        # ``dbtable`` as given, read off the parsed name: on an executor
        # (every task's reconnecting call names the sink) nothing of
        # ``settings.py`` runs.
        return f"{self.DATABASE.name} {safe(self.url)} table {self.settings.table.text}"

    def dead_letter_destination(self) -> str | None:
        table = self.settings.dead_letter_table
        return None if table is None else f"{self.DATABASE.name} table {table}"

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

    def begin_prepared(self, txn_id: str) -> PreparingSqlWriter:
        return kind_of(self.DATABASE.writer, PreparingSqlWriter)(self, txn_id)  # type: ignore[return-value]

    def begin_marked(self, marker: Marker, attempt: int) -> MarkedSqlWriter:
        return kind_of(self.DATABASE.writer, MarkedSqlWriter)(  # type: ignore[return-value]
            self, self._attempt_id(marker, attempt), marker)

    def begin_direct(self, marker: Marker, attempt: int) -> DirectSqlWriter:
        return kind_of(self.DATABASE.writer, DirectSqlWriter)(  # type: ignore[return-value]
            self, self._attempt_id(marker, attempt))

    def committer(self) -> SqlCommitter:
        return self.DATABASE.committer(self)

    @staticmethod
    def _attempt_id(marker: Marker, attempt: int) -> str:
        return str(TxnId.new(marker.sink_id, marker.batch, marker.partition, attempt))

    def reconnecting(self, what: str, action: Callable[[Attempt], T]) -> T:
        """``action`` on the cached connection, tried again on a new one
        while the server is unreachable (``reconnecting`` below)."""
        return reconnecting(action, lost=self.DATABASE.lost, drop=self._drop_connection,
                            what=f"{what} in {self.describe()}", server=safe(self.url),
                            reached=self.in_query, within=self.settings.limits.reconnect)


# -- the database URL -------------------------------------------------------

def parse_url(text: str, allowed_backends: tuple[str, ...]) -> URL:
    """``text`` as a SQLAlchemy URL of one of ``allowed_backends``; refused
    by the option's name otherwise."""
    try:
        url = make_url(text)
    except sa.exc.ArgumentError:
        raise OptionError(
            "option 'url' is not a SQLAlchemy URL (dialect+driver://user:password@host:port/db)"
        ) from None
    if url.get_backend_name() not in allowed_backends:
        raise OptionError(
            f"option 'url' names the {url.get_backend_name()!r} dialect; this sink "
            f"accepts {', '.join(allowed_backends)}"
        )
    return url


def safe(url: URL) -> str:
    """The URL as it may appear in logs and errors."""
    return url.render_as_string(hide_password=True)
