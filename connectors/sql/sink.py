"""What both SQL sinks do the same way, on the driver and on executors.

``SqlSink`` is the base of ``PostgresTransactions`` and ``MySQLTransactions``:
their target and dead-letter tables (each found once, by the sink's own
lookup against its database, and cached), a sink made to settle prepared
transactions by hand (``for_url``), the writers it begins for each commit
mode (its dialect's ``SqlWriter``, ``sql/writer.py``), the driver's commit,
rollback and listing of prepared ids, and its calls that ride out a lost
connection (``reconnecting``, at the end of this module), and its URL,
parsed once and shown without its password (``parse_url``, ``safe``: the
plug-in registry's helpers, which must load without SQLAlchemy, stay in
``urls.py``). A dialect supplies the rest: its engine, its table lookup, its writer class, the
statements that end a prepared transaction and list prepared ids, and which
of its driver's errors mean a lost connection (its ``failures.py``).

Riding out a lost database connection means trying again on a new
connection, for a bounded time, remembering whether a lost try may have
taken effect. The sink does it where repeating a call is safe:

- on the driver, the coordinator's calls (``commit_prepared``,
  ``rollback_prepared``, ``list_prepared``): a database restart between the
  decision and ``COMMIT PREPARED`` / ``XA COMMIT`` delays the commit instead
  of failing the batch;
- on executors, opening a task's transaction (``SqlWriter._open``): nothing
  of it exists until the server has answered, and the server rolls back an
  unprepared transaction whose session is gone, so a lost try leaves
  nothing behind.

Never around a task's writes or its prepare: what a lost connection did to
those is the protocol's business (the task fails, Spark retries it with a
new attempt id, and the retry or the next sweep rolls back whatever the
lost attempt prepared).

The one subtle case is a statement whose connection drops after it was
sent and before the reply: it may have been applied. A ``COMMIT PREPARED``
that did commit leaves nothing to commit, so the next try hears "no such
prepared transaction", and so would one that somebody rolled back
meanwhile. The sink never guesses which: it proves outcomes
(``ProvesOutcomes``). Each task's prepare leaves evidence (PostgreSQL: the
transaction's id, whose fate ``txid_status`` reports; MySQL: a row of the
marker table written inside the XA transaction, there only if it
committed), the coordinator writes it into the decision, and an id found
gone is settled by ``outcome`` (``twophase/coordinator.py``, step 2). A
call wraps the statement in ``attempt.sending()``, so that a lost
connection inside it is logged as what it is.

Which errors mean "the connection is lost" is each driver's own business:
each sink passes its classifier (``lost`` in its ``failures.py``).
Anything else is raised at once.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ClassVar, TypeVar

import sqlalchemy as sa
from pyspark.sql.types import StructType
from sqlalchemy.engine import URL, make_url

from eoskit.connectors.sql.deadletter import DeadLetterTable, source_columns_of
from eoskit.connectors.sql.identifiers import parse_table_name
from eoskit.connectors.sql.jdbc import JdbcDialect
from eoskit.connectors.sql.network import RECONNECT_WITHIN
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.tables import TargetTable, constraint_columns
from eoskit.connectors.sql.writer import SqlWriter
from eoskit.twophase.options import OptionError
from eoskit.twophase.contract import (
    CommitMode,
    DirectCommitting,
    MarkedCommitting,
    Marker,
    Outcome,
    ProvesOutcomes,
    ServiceUnavailableError,
)
from eoskit.twophase.txn_id import TxnId
from eoskit.twophase.verdicts import first_line

T = TypeVar("T")

log = logging.getLogger(__name__)

#: How long a call keeps trying to get a connection back by default (the
#: sink's option ``reconnectWithin``): long enough for a database restart
#: (seconds to tens of seconds), short enough that a database that stays
#: away fails the batch while someone is looking.
RECONNECT_WITHIN_S = float(RECONNECT_WITHIN.default or 60)
#: Backoff between tries: doubling from the first to the last, then flat.
FIRST_DELAY_S = 0.1
MAX_DELAY_S = 2.0


class SqlSink(ProvesOutcomes, MarkedCommitting, DirectCommitting):
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
    #: that has not talked to the server yet (``reconnecting``). False
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
    def _outcome(self, txn_id: str, evidence: str) -> Outcome:
        """The fate of ``txn_id``, no longer prepared, from ``evidence`` (its
        writer's ``evidence``), read on the cached connection. Inside
        ``reconnecting``, like ``_end_prepared``."""

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
        finished the transaction before the connection dropped, and a later
        try hears "no such id": False all the same, for the coordinator to
        settle from the evidence (``outcome``), never a guess here."""
        statement = self.END_PREPARED.format(verb=verb)

        def attempt(state: Attempt) -> bool:
            if self._end_prepared(statement, txn_id, state):
                return True
            if state.maybe_applied:
                log.info("%s %s: no such prepared transaction after a try whose connection was "
                         "lost with the statement sent; its outcome is read from the evidence",
                         statement, txn_id)
            return False

        return self.reconnecting(f"{statement} {txn_id}", attempt)

    def outcome(self, txn_id: str, evidence: str) -> Outcome:
        """What became of ``txn_id`` (no longer prepared); a read, tried again
        over a lost connection."""
        return self.reconnecting(f"reading the outcome of {txn_id}",
                                 lambda _: self._outcome(txn_id, evidence))

    def list_prepared(self, prefix: str) -> list[str]:
        """Prepared ids starting with ``prefix``; a read, so a lost
        connection is simply tried again."""
        return self.reconnecting(self.LIST_PREPARED, lambda _: self._prepared_ids(prefix))

    def reconnecting(self, what: str, action: Callable[[Attempt], T]) -> T:
        """``action`` on the cached connection, tried again on a new one
        while the server is unreachable (``reconnecting`` below)."""
        return reconnecting(action, lost=self._connection_lost, drop=self._drop_connection,
                            what=f"{what} in {self.describe()}", server=safe(self.url),
                            reached=self.in_query, within=self.settings.limits.reconnect)


# -- riding out a lost connection (see the module doc) ----------------------

#: Servers this process has talked to: only a connection that was working
#: is waited for. A server that never answered (a wrong address, a database
#: that is down when a command starts) fails at once, unless the caller
#: knows it answered another process of the same job (``reached``): a
#: running query's start-up check reached it, and a Python worker the query
#: starts while the server restarts (a task's, the commit's) must wait too.
_reached: set[str] = set()


class ConnectionLostError(ServiceUnavailableError):
    """The database could not be reached (again within ``RECONNECT_WITHIN_S``)."""


class Attempt:
    """What one try of a call knows about the tries before it."""

    def __init__(self, lost: Callable[[BaseException], bool]) -> None:
        self._lost = lost
        #: How many tries failed on a lost connection before this one.
        self.retries = 0
        #: An earlier try lost its connection while its statement was on
        #: the wire (inside ``sending``): the statement may have taken effect.
        self.maybe_applied = False

    @contextmanager
    def sending(self) -> Iterator[None]:
        """Wrap the statement whose effect matters: if the connection is
        lost inside, the statement counts as maybe applied from then on."""
        try:
            yield
        except BaseException as exc:
            if self._lost(exc):
                self.maybe_applied = True
            raise


def reconnecting(
    action: Callable[[Attempt], T],
    *,
    lost: Callable[[BaseException], bool],
    drop: Callable[[], None],
    what: str,
    server: str | None = None,
    reached: bool = False,
    within: float = RECONNECT_WITHIN_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``action(attempt)``, tried again after each error that ``lost``
    calls a lost connection, for ``within`` seconds, if this process has
    reached ``server`` before or ``reached`` says another process of the job
    did. ``drop`` forgets the process's cached
    connection before each new try, so that the action's next "get the
    cached connection" connects anew. ``what`` names the call (with the
    server, never a password) for the log and the final error."""
    attempt = Attempt(lost)
    deadline = clock() + within
    delay = FIRST_DELAY_S
    server = server or what
    while True:
        try:
            result = action(attempt)
            _reached.add(server)
            return result
        except Exception as exc:
            if not lost(exc):
                raise
            drop()
            if not reached and server not in _reached:
                raise ConnectionLostError(f"{what}: cannot reach the database ({first_line(exc)})") from exc
            now = clock()
            if now >= deadline:
                raise ConnectionLostError(
                    f"{what}: the connection to the database was lost and no new one could be "
                    f"made within {within:.0f} s (last error: {first_line(exc)}). Nothing is "
                    "lost: once the database is reachable from this host again, start the job "
                    "again and its next batch settles what is in doubt (the option "
                    "reconnectWithin waits longer)"
                ) from None
            if attempt.retries == 0:
                log.warning("%s: connection lost (%s); reconnecting for up to %.0f s",
                            what, first_line(exc), within)
            attempt.retries += 1
            sleep(min(delay, max(0.0, deadline - now)))
            delay = min(delay * 2, MAX_DELAY_S)


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
