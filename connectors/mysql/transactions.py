"""MySQL / MariaDB as a transactional sink: a task writes inside
``XA START``, ends with ``XA END`` + ``XA PREPARE``, and the driver runs
``XA COMMIT`` / ``XA ROLLBACK`` by id; ``XA RECOVER`` lists what is prepared.

How connections are used, and why a task's XA session is closed right
after its prepare, is in ``connection.py``. The bulk path is multi-row
``INSERT ... VALUES (...),(...)`` built column-wise by Arrow
(``literals.py``). Measured on MariaDB 10.11 here, 250,000 rows of
(bigint, text, decimal(12,2), datetime(6)) in one transaction: PyMySQL
``executemany`` 7.5 s (2.7 s of it turning Arrow into Python tuples),
Arrow-built literals 1.7 s, ``LOAD DATA LOCAL INFILE`` of an Arrow CSV
1.15 s. LOAD DATA is not used: it needs ``local_infile`` on both ends (off
by default in MySQL 8), makes the client hand over any file the server
names, cannot express NULL apart from '' in Arrow's CSV, and has no
``ON DUPLICATE KEY UPDATE`` for upsert.

With a dead-letter table (``deadLetterTable``), a refused INSERT is
bisected, each half one INSERT of its own, down to the single refused rows,
which go to the dead-letter table in the same transaction
(``eoskit.connectors.dead_letters``). No savepoint is needed: InnoDB rolls
back a refused statement alone and the transaction goes on, inside an XA
transaction too (MariaDB 10.11 also allows SAVEPOINT inside XA, verified,
but a statement is already the unit). Values no column can hold (NaN, text
that is not UTF-8) and a row whose INSERT alone would exceed the server's
``max_allowed_packet`` (which makes the server drop the connection, and
with it the transaction) are found before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable

import dataclasses
import logging
import re

import pyarrow as pa
import pyarrow.compute as pc
import pymysql
import sqlalchemy as sa
from pyspark.sql.types import StructType
from sqlalchemy.pool import NullPool

from eoskit.connectors.mysql import checks
from eoskit.connectors.mysql.committer import MySQLCommitter
from eoskit.connectors.mysql.connection import (
    cached_connection,
    check_url,
    close_quietly,
    connect,
    drop_connection,
    engine_connect_args,
)
from eoskit.connectors.mysql.dialect import (
    error_code,
    error_text,
    qualified,
    quote,
    server_version,
)
from eoskit.connectors.dead_letters import DeadLetter, cut_json, isolate
from eoskit.connectors.mysql.failures import lost as connection_lost
from eoskit.connectors.mysql.literals import UnwritableValueError, statements, value_rows
from eoskit.connectors.mysql.jdbc import JDBC
from eoskit.connectors.mysql.plugin import BACKENDS
from eoskit.connectors.sql import deadletter
from eoskit.connectors.sql.database import SqlDatabase
from eoskit.connectors.sql.refusals import Refusal
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.reconnect import Attempt
from eoskit.connectors.sql.sink import SqlSink, safe
from eoskit.connectors.sql.tables import TargetTable, resolve_table
from eoskit.connectors.sql.writer import SqlWriter
from eoskit.twophase.contract import (
    CommitMode,
    Marker,
    ServiceUnavailableError,
    SinkContext,
    SinkError,
)
from eoskit.twophase.txn_id import TxnId

log = logging.getLogger(__name__)

DRIVER = "mysql+pymysql"
#: A two-phase transaction's evidence: a row of the marker table named by its XA id.
EVIDENCE = "marker row"

# Server error numbers the sink reacts to.
LOCK_WAIT_TIMEOUT = 1205
DEADLOCK = 1213
PACKET_TOO_LARGE = 1153

#: Where a server message names the column of a refused row: 1048 (cannot be
#: null), 1406 (data too long), 1264 (out of range), 1366 / 1292 (incorrect
#: value; MariaDB qualifies the column with database and table).
_COLUMN = (
    re.compile(r"^Column '(?P<name>.*)' cannot be null$"),
    re.compile(r"for column `(?:[^`]|``)*`\.`(?:[^`]|``)*`\.`(?P<name>(?:[^`]|``)*)` at row \d+$"),
    re.compile(r"for column '(?P<name>.*)' at row \d+$"),
)
#: Where it names a constraint or key: MariaDB's and MySQL's CHECK, a
#: duplicate key (MySQL 8 prefixes the table), a foreign key.
_CONSTRAINT = (
    re.compile(r"^CONSTRAINT `(?P<name>(?:[^`]|``)*)` failed for "),
    re.compile(r"^Check constraint '(?P<name>.*)' is violated\.?$"),
    re.compile(r"^Duplicate entry '.*' for key '(?P<name>.*)'$", re.DOTALL),
    re.compile(r", CONSTRAINT `(?P<name>(?:[^`]|``)*)` FOREIGN KEY "),
)
_AT_ROW = re.compile(r" at row (?P<row>\d+)$")
NOT_NULL = 1048
#: Server errors that refuse a row for what it holds: NULL into NOT NULL
#: (1048, 1263), duplicate key (1062, 1586), foreign key (1216, 1452), a
#: value out of range, too long, truncated or malformed (1264, 1265, 1292,
#: 1366, 1406, 1411, 1690, 3140), a CHECK (MySQL 3819, MariaDB 4025).
#: Never a lock wait, a deadlock or a lost connection: those fail the task.
REFUSED_ROW_CODES = frozenset({1048, 1263, 1062, 1586, 1216, 1452, 1264, 1265, 1292, 1366,
                               1406, 1411, 1690, 3140, 3819, 4025})


def refused_row(exc: BaseException) -> bool:
    return isinstance(exc, pymysql.MySQLError) and error_code(exc) in REFUSED_ROW_CODES


def refused_row_facts(text: str, table: str) -> tuple[str | None, str | None, int | None]:
    """(column, constraint, row within the statement) a server message names."""
    column = constraint = None
    for pattern in _COLUMN:
        match = pattern.search(text)
        if match:
            column = match["name"].replace("``", "`")
            break
    for pattern in _CONSTRAINT:
        match = pattern.search(text)
        if match:
            constraint = match["name"].replace("``", "`")
            if constraint.startswith(table + "."):  # MySQL 8: 'orders.PRIMARY'
                constraint = constraint[len(table) + 1:]
            break
    row = _AT_ROW.search(text)
    return column, constraint, int(row["row"]) if row else None


#: Upper bound of one INSERT statement; lowered to fit max_allowed_packet.
MAX_STATEMENT_BYTES = 4 << 20


class MySQLWriter(SqlWriter):
    """One task attempt's transaction: XA on a session of its own
    (``twophase``), or a local transaction on the process's cached session
    (``idempotent``, ``at_least_once``). The flow is ``SqlWriter``'s; these
    are MySQL's statements."""

    DriverError = pymysql.MySQLError
    DESCRIBE_OPEN_ERRORS = True
    sink: "MySQLTransactions"
    _conn: pymysql.connections.Connection | None

    def __init__(self, sink: "MySQLTransactions", txn_id: str, marker: Marker | None = None) -> None:
        super().__init__(sink, txn_id, marker)
        self._sql: tuple[bytes, bytes, int] | None = None

    def _start_transaction(self, attempt: Attempt) -> pymysql.connections.Connection:
        """A session with this task's transaction started: ``XA START`` on
        a session of its own, or ``START TRANSACTION`` on the cached one.
        Safe to try again on a new session after a lost one (a database
        restart, a killed session): until the server answers, nothing of
        the transaction exists, and it rolls back the unprepared
        transaction, XA included, of a session that is gone."""
        conn = connect(self.sink.url, self.sink.settings.limits) if self.two_phase \
            else cached_connection(self.sink.url, self.sink.settings.limits)
        try:
            with conn.cursor() as cursor:
                level = self.sink.settings.isolation_level
                if level:  # SQL's spelling of a declared choice (jdbc.ISOLATION_SQL)
                    cursor.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
                if self.two_phase:
                    cursor.execute("XA START %s", (self.txn_id,))
                else:
                    cursor.execute("START TRANSACTION")
        except BaseException:
            if self.two_phase:
                close_quietly(conn)
            raise
        return conn

    def _execute(self, statement: str | bytes, args: tuple | None = None) -> int:
        assert self._conn is not None
        try:
            with self._conn.cursor() as cursor:
                return cursor.execute(statement, args)
        except pymysql.MySQLError as exc:
            raise self._refused(exc) from None

    def _describe(self, exc: pymysql.MySQLError, rows: pa.RecordBatch | None = None) -> str:
        """The error in the sink's words. ``rows``: the statement's rows, the
        first of them the task's row ``self.rows + 1``; a refused row is
        named with its table, column and position among the task's rows."""
        code = error_code(exc)
        refusal = self._refusal(exc, rows)
        if refusal is not None:
            return refusal.message()
        target = self.sink.target.qualified
        if code in (LOCK_WAIT_TIMEOUT, DEADLOCK):
            return (
                f"writing to {target}: {error_text(exc)}. Another transaction of the same "
                "batch holds the rows' locks, which means rows with the same key "
                f"({', '.join(self.sink.settings.key) or 'a unique key'}) reached two tasks. "
                "Partition the data by the key columns (Kafka's message key, or "
                "df.repartition(*key)) so that each key is written by one task; in upsert "
                "mode, make the key the table's PRIMARY KEY (a secondary unique key also "
                "locks the gaps next to its rows)."
            )
        if code == PACKET_TOO_LARGE:
            return (f"writing to {target}: a single row is larger than the server's "
                    f"max_allowed_packet: raise it ({error_text(exc)})")
        return f"MySQL refused the write to {target}: {error_text(exc)}"

    def _refusal(self, exc: pymysql.MySQLError, rows: pa.RecordBatch | None) -> Refusal | None:
        target = self.sink.target
        text = exc.args[1] if len(exc.args) >= 2 and isinstance(exc.args[1], str) else ""
        column, constraint, row = refused_row_facts(text, target.name)
        if column is None and constraint is None:
            return None
        lower = {c.lower(): c for c in target.columns}
        columns: tuple[str, ...] = ()
        if column is not None:
            columns = (lower.get(column.lower(), column),)
        elif constraint is not None:
            columns = self._constraint_columns(constraint)
        if row is None and rows is not None and error_code(exc) == NOT_NULL and columns:
            row = _first_null(rows, target, columns[0])
        return Refusal("MySQL", target.qualified, error_text(exc), columns,
                       row=None if row is None or rows is None else self.rows + row,
                       constraint=constraint, txn_id=self.txn_id)

    def _insert_marker(self, marker: Marker) -> int:
        """``INSERT IGNORE`` of the marker row: it waits for another open
        transaction holding the same key, and inserts nothing (0 rows) if a
        committed one has it."""
        return self._execute(
            f"INSERT IGNORE INTO {self.sink.marker_table_sql} (sink_id, batch, task_partition) "
            "VALUES (%s, %s, %s)", (marker.sink_id, marker.batch, marker.partition))

    def _statement_parts(self, columns: list[str]) -> tuple[bytes, bytes, int]:
        """INSERT prefix, upsert suffix, and the statement budget."""
        conn = self._open()
        target = self.sink.target
        columns = self.sink.table_columns(columns)
        into = qualified(target.schema, target.name)
        prefix = f"INSERT INTO {into} ({', '.join(map(quote, columns))}) VALUES "
        suffix = ""
        if self.sink.settings.mode == "upsert":
            suffix = upsert_clause(columns, target.key, conn.get_server_info())
        return prefix.encode(), suffix.encode(), self.sink.statement_budget(conn)

    def _write_rows(self, batch: pa.RecordBatch) -> None:
        """INSERTs of as many rows as fit the statement budget."""
        if self._sql is None:
            self._sql = self._statement_parts(batch.schema.names)
        prefix, suffix, budget = self._sql
        assert self._conn is not None
        start = 0
        for statement, count in statements(prefix, value_rows(batch), suffix, budget):
            try:
                with self._conn.cursor() as cursor:
                    cursor.execute(statement)
            except pymysql.MySQLError as exc:
                raise self._refused(exc, batch.slice(start, count)) from None
            self.rows += count
            self.bytes += len(statement)
            start += count

    # -- dead-letter mode ---------------------------------------------------

    def _insert(self, statement: bytes) -> None:
        """One INSERT: all its rows, or (refused) none of them."""
        assert self._conn is not None
        with self._conn.cursor() as cursor:
            cursor.execute(statement)
        self.bytes += len(statement)

    def _write_isolating(self, rows: pa.RecordBatch) -> list[tuple[int, str]]:
        """One INSERT at a time, each atomic by itself (InnoDB rolls back a
        refused statement alone); values no column can hold and rows over
        max_allowed_packet are refused before anything is sent."""
        if self._sql is None:
            self._sql = self._statement_parts(rows.schema.names)
        prefix, suffix, budget = self._sql
        assert self._conn is not None
        packet = self.sink.max_packet(self._conn)
        refused: list[tuple[int, str]] = []
        # Step 1: values no column can hold, found before anything is sent.
        kept = list(range(rows.num_rows))
        try:
            literals = value_rows(rows)
        except UnwritableValueError:
            found = isolate(rows.num_rows, lambda start, length: value_rows(rows.slice(start, length)),
                            lambda exc: isinstance(exc, UnwritableValueError))
            refused += [(offset, self._unwritable(exc, offset)) for offset, exc in found]
            dropped = {offset for offset, _ in found}
            kept = [i for i in kept if i not in dropped]
            literals = value_rows(rows.take(kept)) if kept else value_rows(rows.slice(0, 0))
        # Step 2: one INSERT at a time; a refused one is bisected.
        start = 0
        for statement, count in statements(prefix, literals, suffix, budget):
            chunk = literals.slice(start, count)
            offsets = kept[start:start + count]
            start += count
            if count == 1 and len(statement) > packet - 1024:
                refused.append((offsets[0], self._over_packet(len(statement), packet, offsets[0])))
                continue
            try:
                found_rows = isolate(count, self._inserting(statement, chunk), refused_row)
            except pymysql.MySQLError as exc:
                raise self._refused(exc, rows.take(offsets)) from None
            refused += [(offsets[i], self._row_error(exc, offsets[i])) for i, exc in found_rows]
        return refused

    def _inserting(self, statement: bytes, rows: pa.Array) -> Callable[[int, int], None]:
        """What ``isolate`` calls to INSERT rows [first, first + length) of
        one statement's ``rows`` (literal rows): the statement itself for all
        of them, else a statement of just those (smaller, so still one)."""
        assert self._sql is not None
        prefix, suffix, budget = self._sql

        def attempt(first: int, length: int) -> None:
            if length == len(rows):
                self._insert(statement)
                return
            [(part, _)] = list(statements(prefix, rows.slice(first, length), suffix, budget))
            self._insert(part)

        return attempt

    def _row_error(self, exc: BaseException, offset: int) -> str:
        """A refused row in the sink's words, at its position among the task's rows."""
        assert isinstance(exc, pymysql.MySQLError)
        row = self.rows + offset + 1
        refusal = self._refusal(exc, None)
        if refusal is None:
            refusal = Refusal("MySQL", self.sink.target.qualified, error_text(exc),
                              txn_id=self.txn_id)
        return dataclasses.replace(refusal, row=row).message()

    def _unwritable(self, exc: BaseException, offset: int) -> str:
        assert isinstance(exc, UnwritableValueError)
        target = self.sink.target
        column = target.column_of.get(exc.column, exc.column)
        return Refusal("MySQL", target.qualified, f"the value is {exc.reason}", (column,),
                       row=self.rows + offset + 1, txn_id=self.txn_id).message()

    def _over_packet(self, size: int, packet: int, offset: int) -> str:
        return Refusal("MySQL", self.sink.target.qualified,
                       f"the row's INSERT is {size} bytes, over the server's max_allowed_packet "
                       f"({packet} bytes)", row=self.rows + offset + 1, txn_id=self.txn_id).message()

    def _insert_dead_letters(self, statement: str, letters: list[DeadLetter]) -> None:
        """One statement each, so that none comes near max_allowed_packet
        (a record's JSON is cut to fit)."""
        assert self._conn is not None
        limit = self.sink.statement_budget(self._conn) // 2
        with self._conn.cursor() as cursor:
            for letter in letters:
                letter = dataclasses.replace(letter, record=cut_json(letter.record, limit))
                cursor.execute(statement, deadletter.values([letter])[0])

    def _error_text(self, exc: pymysql.MySQLError) -> str:
        return error_text(exc)

    def _prepare_transaction(self) -> None:
        """``XA END`` + ``XA PREPARE``, then close the session: only that
        detaches the prepared transaction so that the driver can commit it."""
        assert self._conn is not None
        self._insert_evidence()
        self._execute("XA END %s", (self.txn_id,))
        self._execute("XA PREPARE %s", (self.txn_id,))
        close_quietly(self._conn)

    def _insert_evidence(self) -> None:
        """A row of the marker table named by the XA id itself (its
        ``sink_id`` column; the idempotent mode's rows hold bare sink ids),
        written inside the XA transaction: it exists once the transaction
        committed and never if it rolled back, which is how an ``XA COMMIT``
        whose reply was lost is settled (``MySQLTransactions._outcome``).
        Its key is the attempt's own, so no other attempt waits on it."""
        position = TxnId.parse(self.txn_id)
        assert position is not None
        self._execute(f"INSERT INTO {self.sink.marker_table_sql} (sink_id, batch, task_partition) "
                      "VALUES (%s, %s, %s)", (self.txn_id, position.batch, position.partition))
        self.evidence = EVIDENCE

    def _run(self, statement: str) -> None:
        assert self._conn is not None
        with self._conn.cursor() as cursor:
            cursor.execute(statement)

    def _roll_back(self, conn: pymysql.connections.Connection) -> None:
        """An XA session is closed whatever happens: the server rolls back
        an unprepared XA of a session that disconnects, and the next task
        gets a fresh one anyway."""
        if self.two_phase:
            try:
                with conn.cursor() as cursor:
                    cursor.execute("XA END %s", (self.txn_id,))
            except pymysql.MySQLError:
                pass  # already ended, or marked rollback-only by a deadlock
            try:
                with conn.cursor() as cursor:
                    cursor.execute("XA ROLLBACK %s", (self.txn_id,))
            except pymysql.MySQLError:
                pass
            close_quietly(conn)
            return
        try:
            conn.rollback()
        except pymysql.MySQLError:
            drop_connection(self.sink.url, self.sink.settings.limits)


def _first_null(rows: pa.RecordBatch, target: TargetTable, column: str) -> int | None:
    """1-based position of the first row whose value for table column
    ``column`` is null (MySQL's "cannot be null" says no row)."""
    for name in rows.schema.names:
        if target.column_of.get(name, name) == column:
            position = pc.index(pc.is_null(rows.column(name)), True).as_py()
            return position + 1 if position is not None and position >= 0 else None
    return None


def upsert_clause(columns: list[str], key: tuple[str, ...], server_info: str) -> str:
    """``ON DUPLICATE KEY UPDATE`` for every non-key column, from the row
    being inserted. Rows of one statement (and of one task) are applied in
    order, so the last row of a key wins. MariaDB only has ``VALUES(col)``;
    MySQL deprecates it from 8.0.20 in favour of a row alias (8.0.19+), so
    the alias is used where it exists."""
    updates = [c for c in columns if c not in key] or [key[0]]
    mariadb, version = server_version(server_info)
    if not mariadb and version >= (8, 0, 19):
        alias = quote("eoskit_new")
        sets = ", ".join(f"{quote(c)} = {alias}.{quote(c)}" for c in updates)
        return f" AS {alias} ON DUPLICATE KEY UPDATE {sets}"
    sets = ", ".join(f"{quote(c)} = VALUES({quote(c)})" for c in updates)
    return f" ON DUPLICATE KEY UPDATE {sets}"


class MySQLTransactions(SqlSink):
    """The sink for one target table in MySQL or MariaDB, with all three commit
    capabilities; picklable."""

    kind = "mysql"
    DATABASE = SqlDatabase(
        name="MySQL", backends=BACKENDS, driver=DRIVER, default_port=3306, jdbc=JDBC,
        # Backticks, or double quotes as under ANSI_QUOTES.
        identifier_quotes='`"',
        # A scratch copy of a table (``eoskit chaos``): columns, keys, indexes.
        create_like="CREATE TABLE {new} LIKE {old}",
        writer=MySQLWriter, committer=MySQLCommitter, lost=connection_lost)

    def __init__(self, settings: SqlSinkSettings, schema: StructType) -> None:
        super().__init__(settings, schema)
        self._budget: int | None = None
        self._packet: int | None = None

    #: URL keys that could change how the server reads the sink's literals
    #: are refused (see connection.py).
    check_url = staticmethod(check_url)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_budget"] = state["_packet"] = None  # the server's, read again where it runs
        return state

    @property
    def marker_table_sql(self) -> str:
        return qualified(self.target.schema, self.settings.marker_table)

    def _engine(self) -> sa.Engine:
        return sa.create_engine(self.url, poolclass=NullPool, connect_args={
            "connect_timeout": self.settings.limits.connect, **engine_connect_args(self.url)})

    def _resolve(self) -> TargetTable:
        with self.lookup() as engine:
            try:
                return resolve_table(engine, self.settings, self.schema, self.dead_letter_sources)
            except sa.exc.OperationalError as exc:
                raise ServiceUnavailableError(f"cannot connect to MySQL at {safe(self.url)}: "
                                              f"{error_text(exc.orig)}") from None
            except sa.exc.DBAPIError as exc:
                raise SinkError(f"cannot read table {self.settings.dbtable} in MySQL at "
                                f"{safe(self.url)}: {error_text(exc.orig)}") from None

    def statement_budget(self, conn: pymysql.connections.Connection) -> int:
        """Bytes per INSERT: MAX_STATEMENT_BYTES, or half the server's
        max_allowed_packet if that is smaller."""
        if self._budget is None:
            packet = self.max_packet(conn)
            self._budget = max(64 << 10, min(MAX_STATEMENT_BYTES, packet // 2))
        return self._budget

    def max_packet(self, conn: pymysql.connections.Connection) -> int:
        """The server's max_allowed_packet: no statement may be larger."""
        if self._packet is None:
            with conn.cursor() as cursor:
                cursor.execute("SELECT @@max_allowed_packet")
                self._packet = int(cursor.fetchone()[0])
        return self._packet

    def check(self, schema: StructType, context: SinkContext) -> None:
        self._target = target = self._resolve()
        self._dead_letters = None
        conn = self._checked_connection()
        who = checks.account(conn, self.url)
        checks.check_engine(conn, target, self.settings)
        checks.check_privileges(conn, target, self.settings, self.url, who,
                                self.table_columns(schema.fieldNames()))
        if self.settings.commit_mode is CommitMode.TWOPHASE:
            checks.check_xa_support(conn, self.url)
            checks.check_xa_rights(conn, self.url, who)
        with self.lookup() as engine:
            checks.claim(engine, target, context, self.describe(), self.url, who)
        if self.settings.commit_mode in (CommitMode.IDEMPOTENT, CommitMode.TWOPHASE):
            checks.create_marker_table(conn, target, self.settings, self.url, who)
        dead_letters = self.ensure_dead_letter_table()
        if dead_letters is not None:
            checks.check_dead_letter_table(conn, dead_letters, self.settings, self.url, who)

    def _checked_connection(self) -> pymysql.connections.Connection:
        try:
            return cached_connection(self.url, self.settings.limits)
        except pymysql.MySQLError as exc:
            raise ServiceUnavailableError(f"cannot connect to MySQL at {safe(self.url)}: "
                            f"{error_text(exc)}") from None

    def _drop_connection(self) -> None:
        drop_connection(self.url, self.settings.limits)

    def forget_markers(self, sink_id: str, below_batch: int) -> None:
        with cached_connection(self.url, self.settings.limits).cursor() as cursor:
            cursor.execute(f"DELETE FROM {self.marker_table_sql} WHERE sink_id = %s AND batch < %s",
                           (sink_id, below_batch))



__all__ = ["MySQLWriter", "MySQLTransactions"]
