"""PostgreSQL as a transactional sink: COPY inside a task's transaction,
``PREPARE TRANSACTION``, then ``COMMIT PREPARED`` / ``ROLLBACK PREPARED``
by id from the driver.

With a dead-letter table (``deadLetterTable``), each Arrow batch is one
COPY inside a savepoint (psycopg's ``conn.transaction()`` inside the task's
open transaction: a refused block is rolled back to it, and the task's
transaction goes on). A refused COPY is rolled back to its savepoint and
the batch bisected, each half COPYed in a savepoint of its own, down to the
single refused rows, which go to the dead-letter table by an INSERT in the
same transaction (``eoskit.connectors.dead_letters``). In upsert mode each
Arrow batch is merged from the staging table right after its COPY, in a
savepoint too; a refused merge is bisected over the batch's winning rows
(the last row of each key), and a refused winner gives way to the key's
previous row of the batch, as if the refused row had never arrived. A
batch without a refused row pays three round trips per Arrow batch for
this; only a refusal pays for the bisection.
"""

from __future__ import annotations

import hashlib
import logging

import psycopg
import pyarrow as pa
import sqlalchemy as sa
from psycopg import sql
from pyspark.sql.types import StructType
from sqlalchemy.pool import NullPool

from eoskit.connectors.dead_letters import DeadLetter, isolate
from eoskit.connectors.postgres import checks
from eoskit.connectors.postgres.connection import (
    cached_connection,
    check_url,
    drop_connection,
    with_limits,
)
from eoskit.connectors.postgres.committer import PostgresCommitter
from eoskit.connectors.postgres.csv import to_copy_csv
from eoskit.connectors.postgres.dialect import in_schema, table_sql
from eoskit.connectors.postgres.failures import lost as connection_lost
from eoskit.connectors.postgres.jdbc import JDBC
from eoskit.connectors.postgres.plugin import BACKENDS
from eoskit.connectors.sql import deadletter
from eoskit.connectors.sql.database import SqlDatabase
from eoskit.connectors.sql.refusals import Refusal
from eoskit.connectors.sql.reconnect import Attempt
from eoskit.connectors.sql.sink import SqlSink, safe
from eoskit.connectors.sql.tables import TargetTable, resolve_table
from eoskit.connectors.sql.writer import SqlWriter
from eoskit.core import timings
from eoskit.twophase.contract import (
    CommitMode,
    Marker,
    ServiceUnavailableError,
    SinkContext,
    SinkError,
)

log = logging.getLogger(__name__)

#: How long a task waits for a row lock before failing: a wait longer than
#: this is two tasks of one batch writing the same key (see _lock_error).
LOCK_TIMEOUT = "60s"
#: The staging table's column of a row's offset in its Arrow batch
#: (dead-letter mode; otherwise an identity column: the arrival order).
ROW_COLUMN = "__eoskit_row"


def refused_row(exc: BaseException) -> bool:
    """A row the server refuses for what it holds: a data exception (class
    22: too long, out of range, bad text) or an integrity constraint (class
    23: NOT NULL, CHECK, unique, foreign key, exclusion). Never a lock
    timeout, a deadlock, a lost connection: those fail the task."""
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith(("22", "23"))


def _describe_error(exc: psycopg.Error, target: str) -> str:
    diag = exc.diag
    parts = [f"PostgreSQL refused the write to {target}: {diag.message_primary or exc}"]
    if diag.constraint_name:
        parts.append(f"constraint {diag.constraint_name!r}")
    if diag.message_detail:
        parts.append(diag.message_detail)
    return "; ".join(parts)


def copy_position(context: str | None, relations: list[str], columns: list[str]) -> tuple[int | None, str | None]:
    """The line and column of a COPY error's context, ``COPY <relation>, line
    <n>[, column <name>][: "<text>"]``: the relation and column names are
    printed bare, so they are matched against the known ones."""
    for text in (context or "").splitlines():
        for relation in relations:
            prefix = f"COPY {relation}, line "
            if not text.startswith(prefix):
                continue
            rest = text[len(prefix):]
            digits = len(rest) - len(rest.lstrip("0123456789"))
            if not digits:
                continue
            line, rest = int(rest[:digits]), rest[digits:]
            if rest.startswith(", column "):
                rest = rest[len(", column "):]
                named = [c for c in columns if rest == c or rest.startswith(c + ": ")]
                return line, max(named, key=len) if named else None
            return line, None
    return None, None


class PostgresWriter(SqlWriter):
    """One task attempt's transaction on the executor's cached connection
    (the flow is ``SqlWriter``'s; these are PostgreSQL's statements)."""

    DriverError = psycopg.Error
    sink: "PostgresTransactions"
    _conn: psycopg.Connection | None

    def __init__(self, sink: "PostgresTransactions", txn_id: str, marker: Marker | None = None) -> None:
        super().__init__(sink, txn_id, marker)
        self._copy_cm = None
        self._copy = None
        self._columns: list[str] | None = None
        self._stage: str | None = None
        #: COPY counts lines, and a value with a line break spans several:
        #: up to this many lines (all rows so far), line n is row n.
        self._exact_lines: int | None = None
        #: Dead-letter mode: the COPY statement each Arrow batch runs.
        self._into: sql.Composable | None = None

    def _start_transaction(self, attempt: Attempt) -> psycopg.Connection:
        """BEGIN on the process's cached connection. Safe to try again on a
        new connection after a lost one (a database restart while the
        worker was idle leaves its cached connection dead): until BEGIN is
        answered nothing of this transaction exists, and the server rolls
        back the open transaction of a session that is gone."""
        conn = cached_connection(self.sink.url, self.sink.settings.limits)
        settings = self.sink.settings
        # The isolation level is SQL's own spelling of a declared choice
        # (jdbc.ISOLATION_SQL), never text the user gave.
        conn.execute(sql.SQL("BEGIN ISOLATION LEVEL {}").format(sql.SQL(settings.isolation_level))
                     if settings.isolation_level else "BEGIN")
        conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))
        if settings.query_timeout:
            conn.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(
                sql.Literal(f"{settings.query_timeout}s")))
        return conn

    def _insert_marker(self, marker: Marker) -> int:
        """``ON CONFLICT DO NOTHING``: it waits for an open transaction
        holding the same marker; a psycopg error fails the task as raised."""
        assert self._conn is not None
        return self._conn.execute(sql.SQL(
            "INSERT INTO {} (sink_id, batch, task_partition) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING"
        ).format(in_schema(self.sink.target, self.sink.settings.marker_table)),
            (marker.sink_id, marker.batch, marker.partition)).rowcount

    def _create_stage(self, row_column: sql.Composable) -> sql.Composable:
        """Upsert's staging table, for this transaction only: the target's
        columns and defaults, and ``ROW_COLUMN`` (``row_column``: how it is
        filled) to keep each row's place. Returns its qualified name."""
        assert self._conn is not None
        target = self.sink.target
        self._stage = "eoskit_stage_" + hashlib.sha1(self.txn_id.encode()).hexdigest()[:16]
        stage = in_schema(target, self._stage)
        self._conn.execute(sql.SQL(
            "CREATE UNLOGGED TABLE {} (LIKE {} INCLUDING DEFAULTS, {} {})"
        ).format(stage, table_sql(target), sql.Identifier(ROW_COLUMN), row_column))
        return stage

    def _begin(self, columns: list[str]) -> None:
        conn = self._open()
        into = table_sql(self.sink.target)
        if self.sink.settings.mode == "upsert":
            into = self._create_stage(sql.SQL("bigint GENERATED ALWAYS AS IDENTITY"))
        self._columns = columns = self.sink.table_columns(columns)
        cursor = conn.cursor()
        self._copy_cm = cursor.copy(sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(
            into, sql.SQL(", ").join(map(sql.Identifier, columns))))
        self._copy = self._copy_cm.__enter__()

    def _write_rows(self, batch: pa.RecordBatch) -> None:
        """Everything into one COPY, open until ``_end_writes``."""
        try:
            if self._copy is None:
                self._begin(batch.schema.names)
            with timings.span("task.write.encode"):
                data = to_copy_csv(batch)
            if self._exact_lines is None and data.count(b"\n") != batch.num_rows:
                self._exact_lines = self.rows
            self._copy.write(data)
        except psycopg.Error as exc:
            raise self._refused(exc) from None
        self.rows += batch.num_rows
        self.bytes += len(data)

    # -- dead-letter mode ---------------------------------------------------

    def _begin_setting_aside(self, columns: list[str]) -> None:
        self._open()
        into = table_sql(self.sink.target)
        self._columns = self.sink.table_columns(columns)
        copied = list(self._columns)
        if self.sink.settings.mode == "upsert":
            into = self._create_stage(sql.SQL("bigint NOT NULL"))
            copied.append(ROW_COLUMN)
        self._into = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(
            into, sql.SQL(", ").join(map(sql.Identifier, copied)))

    def _copy_rows(self, rows: pa.RecordBatch, start: int, length: int) -> None:
        """COPY rows [start, start + length) of the Arrow batch, atomically."""
        part = rows.slice(start, length)
        if self._stage is not None:
            part = part.append_column(ROW_COLUMN, pa.array(range(start, start + length), pa.int64()))
        data = to_copy_csv(part)
        assert self._conn is not None and self._into is not None
        with self._conn.transaction():  # a savepoint, nested as psycopg nests them
            with self._conn.cursor().copy(self._into) as copy:
                copy.write(data)
        self.bytes += len(data)

    def _write_isolating(self, rows: pa.RecordBatch) -> list[tuple[int, str]]:
        """One COPY (and in upsert mode one merge) per Arrow batch, each in
        a savepoint; a refused one is rolled back to it and bisected."""
        try:
            if self._into is None:
                self._begin_setting_aside(rows.schema.names)
            refused = isolate(rows.num_rows, lambda start, length: self._copy_rows(rows, start, length),
                              refused_row)
            if self._stage is not None:
                refused += self._merge_setting_aside()
        except psycopg.errors.LockNotAvailable:
            raise SinkError(self._lock_error()) from None
        except psycopg.Error as exc:
            raise self._refused(exc) from None
        return [(offset, self._describe(error, self.rows + offset + 1)
                 if isinstance(error, psycopg.Error) else str(error))
                for offset, error in sorted(refused, key=lambda r: r[0])]

    def _merge_setting_aside(self) -> list[tuple[int, BaseException]]:
        """Merge the staged Arrow batch into the target; the refused rows
        (offsets in the batch) with their errors. The staging table is
        emptied for the next batch."""
        assert self._conn is not None and self._stage is not None
        stage = in_schema(self.sink.target, self._stage)
        refused: list[tuple[int, BaseException]] = []
        try:
            with self._conn.transaction():  # a savepoint, nested as psycopg nests them
                self._conn.execute(self._merge_sql())
        except psycopg.Error as exc:
            if not refused_row(exc):
                raise
            keys = sql.SQL(", ").join(map(sql.Identifier, self.sink.target.key))
            winners = sorted(r[0] for r in self._conn.execute(sql.SQL(
                "SELECT DISTINCT ON ({keys}) {row} FROM {stage} ORDER BY {keys}, {row} DESC"
            ).format(keys=keys, row=sql.Identifier(ROW_COLUMN), stage=stage)).fetchall())
            found = isolate(len(winners), lambda start, length: self._merge_rows(
                winners[start:start + length]), refused_row)
            for index, error in found:
                row: int | None = winners[index]
                while row is not None and error is not None:
                    refused.append((row, error))
                    row, error = self._merge_previous_of_key(row)
        self._conn.execute(sql.SQL("TRUNCATE {}").format(stage))
        return refused

    def _merge_rows(self, rows: list[int]) -> None:
        assert self._conn is not None
        with self._conn.transaction():  # a savepoint, nested as psycopg nests them
            self._conn.execute(self._merge_sql(subset=True), (rows,))

    def _merge_previous_of_key(self, row: int) -> tuple[int | None, BaseException | None]:
        """Merge the row that ``row`` (refused) superseded, if the batch has
        one: (that row, its error) if it is refused too, else (None, None)."""
        assert self._conn is not None and self._stage is not None
        stage = in_schema(self.sink.target, self._stage)
        same_key = sql.SQL(" AND ").join(
            sql.SQL("s.{k} IS NOT DISTINCT FROM r.{k}").format(k=sql.Identifier(k))
            for k in self.sink.target.key)
        previous = self._conn.execute(sql.SQL(
            "SELECT max(s.{row}) FROM {stage} s JOIN {stage} r ON {same_key} "
            "WHERE r.{row} = %s AND s.{row} < %s"
        ).format(row=sql.Identifier(ROW_COLUMN), stage=stage, same_key=same_key), (row, row)).fetchone()[0]
        if previous is None:
            return None, None
        try:
            self._merge_rows([previous])
        except psycopg.Error as exc:
            if not refused_row(exc):
                raise
            return previous, exc
        return None, None

    def _insert_dead_letters(self, statement: str, letters: list[DeadLetter]) -> None:
        """All of them in one ``executemany``."""
        assert self._conn is not None
        with self._conn.cursor() as cursor:
            cursor.executemany(statement, deadletter.values(letters))

    def _error_text(self, exc: psycopg.Error) -> str:
        return str(exc.diag.message_primary or exc)

    def _end_writes(self) -> None:
        """End the COPY; merge and drop the staging table (upsert)."""
        try:
            if self._copy_cm is not None:
                self._copy_cm.__exit__(None, None, None)
                self._copy_cm = self._copy = None
            if self._stage is not None and self._into is not None:
                assert self._conn is not None  # dead-letter mode merged batch by batch
                self._conn.execute(sql.SQL("DROP TABLE {}").format(
                    in_schema(self.sink.target, self._stage)))
            elif self._stage is not None:
                self._merge_stage()
        except psycopg.errors.LockNotAvailable:
            raise SinkError(self._lock_error()) from None
        except psycopg.Error as exc:
            raise self._refused(exc) from None

    def _describe(self, exc: psycopg.Error, row: int | None = None) -> str:
        """The error in the sink's words; a refused row (a data exception or
        a constraint violation) with its table, column and position (``row``:
        the row's position among the task's rows, where the caller knows it)."""
        target = self.sink.target
        if not refused_row(exc):
            return _describe_error(exc, target.qualified)
        diag = exc.diag

        def ours(text: str | None) -> str | None:
            # A row refused in upsert's staging table is refused for the target.
            return text.replace(self._stage, target.name) if text and self._stage else text

        relations = [target.name] + ([self._stage] if self._stage else [])
        line, column = copy_position(diag.context, relations, list(target.columns))
        columns: tuple[str, ...] = ()
        if diag.column_name or column:
            columns = (diag.column_name or column,)
        elif diag.constraint_name:
            columns = self._constraint_columns(diag.constraint_name)
        exact = row is None and line is not None and (
            self._exact_lines is None or line <= self._exact_lines)
        return Refusal(
            "PostgreSQL", target.qualified, ours(diag.message_primary) or str(exc), columns,
            row=row if row is not None else line if exact else None,
            server_position=f"COPY line {line} (values with line breaks span several lines)"
            if row is None and line is not None and not exact else "",
            constraint=ours(diag.constraint_name), detail=diag.message_detail, txn_id=self.txn_id,
        ).message()

    def _merge_sql(self, subset: bool = False) -> sql.Composed:
        """The staged rows into the target, the last row of each key
        winning; ``subset``: only the rows whose ROW_COLUMN is in the
        statement's one parameter (an array)."""
        target = self.sink.target
        key = target.key
        columns = [sql.Identifier(c) for c in self._columns or []]
        updates = [c for c in self._columns or [] if c not in key]
        stage = in_schema(target, self._stage)
        on_conflict = (
            sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
                sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                for c in updates))
            if updates else sql.SQL("DO NOTHING")
        )
        where = sql.SQL("WHERE {} = ANY(%s) ").format(sql.Identifier(ROW_COLUMN)) if subset else sql.SQL("")
        return sql.SQL(
            "INSERT INTO {target} ({cols}) SELECT DISTINCT ON ({keys}) {cols} FROM {stage} "
            "{where}ORDER BY {keys}, {row} DESC ON CONFLICT ({keys}) {action}"
        ).format(
            target=table_sql(target), cols=sql.SQL(", ").join(columns), stage=stage,
            keys=sql.SQL(", ").join(map(sql.Identifier, key)), action=on_conflict,
            where=where, row=sql.Identifier(ROW_COLUMN),
        )

    def _merge_stage(self) -> None:
        assert self._conn is not None
        self._conn.execute(self._merge_sql())
        self._conn.execute(sql.SQL("DROP TABLE {}").format(in_schema(self.sink.target, self._stage)))

    def _lock_error(self) -> str:
        return (
            f"a row of {self.sink.target.qualified} stayed locked for {LOCK_TIMEOUT}: "
            "another transaction of the same batch holds it, which means rows with the same "
            f"key ({', '.join(self.sink.settings.key) or 'unique constraint'}) reached two "
            "tasks. Partition the data by the key columns (Kafka's message key, or "
            "df.repartition(*key)) so that each key is written by one task."
        )

    def _prepare_transaction(self) -> None:
        """``PREPARE TRANSACTION``: the session is free again at once. Its
        transaction id (with epoch, ``txid_current``) is the evidence of its
        outcome: ``txid_status`` tells committed from rolled back once the
        prepared transaction is gone (``PostgresCommitter._outcome``)."""
        assert self._conn is not None
        try:
            self.evidence = str(self._conn.execute("SELECT txid_current()").fetchone()[0])
            self._conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(self.txn_id)))
        except psycopg.Error as exc:
            if "maximum number of prepared transactions" in str(exc):
                raise SinkError(
                    "PostgreSQL's max_prepared_transactions is too low for this job: set it to "
                    "at least twice the number of write tasks per batch and restart the server"
                ) from None
            raise self._refused(exc) from None

    def _run(self, statement: str) -> None:
        assert self._conn is not None
        self._conn.execute(statement)

    def _roll_back(self, conn: psycopg.Connection) -> None:
        """Abandon the COPY, ``ROLLBACK``; a connection that fails it is dropped."""
        try:
            if self._copy_cm is not None:
                try:
                    self._copy_cm.__exit__(RuntimeError, RuntimeError("abort"), None)
                except Exception:  # noqa: BLE001 - aborting a failed COPY
                    pass
            if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
        except psycopg.Error:
            drop_connection(self.sink.url, self.sink.settings.limits)


class PostgresTransactions(SqlSink):
    """The sink for one PostgreSQL table, with all three commit capabilities; picklable."""

    kind = "postgres"
    DATABASE = SqlDatabase(
        name="PostgreSQL", backends=BACKENDS, driver="postgresql+psycopg", default_port=5432, jdbc=JDBC,
        identifier_quotes='"',
        # A scratch copy of a table (``eoskit chaos``): columns, defaults, keys, indexes.
        create_like="CREATE TABLE {new} (LIKE {old} INCLUDING ALL)",
        writer=PostgresWriter, committer=PostgresCommitter, lost=connection_lost)

    #: Before anything connects: the session's encoding stays UTF-8.
    check_url = staticmethod(check_url)

    def _engine(self) -> sa.Engine:
        return sa.create_engine(with_limits(self.url, self.settings.limits), poolclass=NullPool)

    def _resolve(self) -> TargetTable:
        with self.lookup() as engine:
            try:
                return resolve_table(engine, self.settings, self.schema, self.dead_letter_sources)
            except sa.exc.OperationalError as exc:
                raise ServiceUnavailableError(f"cannot connect to PostgreSQL at {safe(self.url)}: "
                                              f"{str(exc.orig).strip().splitlines()[0]}") from None

    def check(self, schema: StructType, context: SinkContext) -> None:
        self._target = target = self._resolve()
        self._dead_letters = None
        conn = cached_connection(self.url, self.settings.limits)
        checks.check_privileges(conn, target, self.settings, self.url)
        dead_letters = self.ensure_dead_letter_table()
        if dead_letters is not None:
            checks.check_dead_letter_table(conn, dead_letters, self.url)
        if self.settings.commit_mode is CommitMode.TWOPHASE:
            checks.check_prepared_transactions(conn, self.url)
        reaping = checks.session_reaping(conn, self.url)
        if reaping is not None:
            log.warning("%s", reaping)
        with self.lookup() as engine:
            checks.claim(engine, target, context, self.describe())
        if self.settings.commit_mode is CommitMode.IDEMPOTENT:
            checks.create_marker_table(conn, target, self.settings)

    def _drop_connection(self) -> None:
        drop_connection(self.url, self.settings.limits)

    def forget_markers(self, sink_id: str, below_batch: int) -> None:
        conn = cached_connection(self.url, self.settings.limits)
        conn.execute(sql.SQL("DELETE FROM {} WHERE sink_id = %s AND batch < %s").format(
            in_schema(self.target, self.settings.marker_table)), (sink_id, below_batch))
