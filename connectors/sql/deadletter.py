"""The SQL sinks' dead-letter table (option ``deadLetterTable``): where it
is, how it is created, and the statement a task inserts its refused rows
with, inside the task's own transaction (so that they commit, prepare or
roll back with its good rows, and a replay writes them exactly once too).

One row per refused row, keyed by its position, which is what identifies
the record for a deterministic replay::

    sink_id, batch, task_partition, row_in_task   -- primary key
    error        the sink's message (table, column, constraint, reason)
    record       the row as JSON text (``eoskit.connectors.dead_letters``)
    source       JSON of the row's source columns, or NULL
    failed_at    when the task's transaction wrote it

The primary key turns a bug that would write a dead letter twice into an
error instead of a duplicate; in ``at_least_once`` mode, where a retried
task writes its rows again, a repeated dead letter is skipped instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from pyspark.sql.types import StructType
from sqlalchemy.dialects.mysql import dialect as mysql_dialect
from sqlalchemy.dialects.postgresql import dialect as postgresql_dialect

from eoskit.connectors.dead_letters import SQL_SOURCE_DEFAULT, DeadLetter, source_columns
from eoskit.connectors.sink_options import DEAD_LETTER_TABLE
from eoskit.connectors.sql.identifiers import TableName, display
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.tables import NameRules, TargetTable
from eoskit.twophase.contract import SinkError

#: The columns a task fills, in the order of ``values``.
COLUMNS = ("sink_id", "batch", "task_partition", "row_in_task", "error", "record", "source")
#: Every column the table must have.
REQUIRED = (*COLUMNS, "failed_at")

_CREATE = {
    "postgresql": (
        "CREATE TABLE IF NOT EXISTS {table} (sink_id text NOT NULL, batch bigint NOT NULL, "
        "task_partition integer NOT NULL, row_in_task bigint NOT NULL, error text NOT NULL, "
        "record text NOT NULL, source text, failed_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (sink_id, batch, task_partition, row_in_task))"
    ),
    # utf8mb4 whatever the database's default: errors quote the server's text.
    "mysql": (
        "CREATE TABLE IF NOT EXISTS {table} (sink_id VARCHAR(64) NOT NULL, "
        "batch BIGINT NOT NULL, task_partition INT NOT NULL, row_in_task BIGINT NOT NULL, "
        "error TEXT NOT NULL, record LONGTEXT NOT NULL, source TEXT NULL, "
        "failed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        "PRIMARY KEY (sink_id, batch, task_partition, row_in_task)) "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    ),
}


@dataclass(frozen=True)
class DeadLetterTable:
    """Where the dead letters go: the option's table, a bare name in the
    target's schema, folded as the database folds ``dbtable``."""

    schema: str | None
    name: str
    dialect: str
    #: The option as given, for messages.
    option: str

    @classmethod
    def locate(cls, option: TableName, target: TargetTable) -> "DeadLetterTable":
        rules = NameRules.for_dialect(target.dialect)
        schema = rules.wanted(option.schema) if option.schema is not None else target.schema
        return cls(schema, rules.wanted(option.table), target.dialect, option.text)

    @property
    def qualified(self) -> str:
        """The table's name for messages and logs."""
        rules = NameRules.for_dialect(self.dialect)
        return display([self.schema, self.name], rules.quote, rules.folds)

    @property
    def mysql(self) -> bool:
        return self.dialect in ("mysql", "mariadb")

    @property
    def sql_name(self) -> str:
        """The table's name in SQL, every part quoted by SQLAlchemy's
        identifier preparer for the dialect."""
        dialect = mysql_dialect() if self.mysql else postgresql_dialect()
        quote = dialect.identifier_preparer.quote_identifier
        return ".".join(quote(p) for p in ([self.schema] if self.schema else []) + [self.name])

    def ensure(self, engine: sa.Engine) -> None:
        """Create the table if it is missing, then refuse one the task could
        not insert into (a column missing, another NOT NULL column without
        a default). On the driver, before any data moves."""
        template = _CREATE["mysql" if self.mysql else "postgresql"]
        where = f"the dead-letter table {self.qualified} (option '{DEAD_LETTER_TABLE.name}')"
        try:
            with engine.begin() as conn:
                conn.exec_driver_sql(template.format(table=self.sql_name))
            reflected = sa.inspect(engine).get_columns(self.name, schema=self.schema)
        except sa.exc.DBAPIError as exc:
            text = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise SinkError(f"cannot create or read {where}: {text}") from None
        names = {c["name"] for c in reflected}
        missing = [c for c in REQUIRED if c not in names]
        if missing:
            raise SinkError(f"{where} exists without column(s) {', '.join(missing)}: drop it "
                            "to have the sink create it, or name another table")
        extra = [c["name"] for c in reflected if c["name"] not in REQUIRED
                 and not c.get("nullable", True) and c.get("default") is None
                 and not c.get("autoincrement") is True and not c.get("identity")]
        if extra:
            raise SinkError(f"{where} has NOT NULL column(s) {', '.join(extra)} without a "
                            "default, which the sink does not fill")

    def insert_sql(self, tolerate_repeats: bool) -> str:
        """The INSERT of one dead letter (``%s`` parameters, psycopg and
        PyMySQL alike). ``tolerate_repeats``: a row already there is skipped
        (the at-least-once mode, whose retried tasks write their rows again)."""
        return _insert_sql(self.sql_name, self.mysql, tolerate_repeats)


def _insert_sql(table_sql: str, mysql: bool, tolerate_repeats: bool) -> str:
    columns = ", ".join(COLUMNS)
    values = ", ".join("%s" for _ in COLUMNS)
    statement = f"INSERT INTO {table_sql} ({columns}) VALUES ({values})"
    if tolerate_repeats:
        if mysql:
            statement += " ON DUPLICATE KEY UPDATE sink_id = sink_id"
        else:
            statement += " ON CONFLICT DO NOTHING"
    return statement


def values(letters: Iterable[DeadLetter]) -> list[tuple]:
    """The parameters of ``insert_sql``, one tuple per dead letter."""
    return [(d.sink_id, d.batch, d.task_partition, d.row_in_task, d.error, d.record, d.source)
            for d in letters]


def source_columns_of(settings: SqlSinkSettings, schema: StructType) -> tuple[str, ...]:
    """The DataFrame columns a dead letter carries as its source position
    (none without a dead-letter table)."""
    if settings.dead_letter_table is None:
        return ()
    return source_columns(settings.dead_letter_source_columns, schema.fieldNames(),
                          SQL_SOURCE_DEFAULT)
