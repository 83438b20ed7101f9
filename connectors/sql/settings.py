"""Options of the SQL sinks (PostgreSQL, MySQL/MariaDB), declared once.

Names follow Spark's JDBC data source, and its writer's options are taken
as a job written for ``format("jdbc")`` gives them (``jdbc.py``): ``url``
is a SQLAlchemy URL or a JDBC one, ``user``, ``password``, ``driver``,
``createTableColumnTypes``, ... A missing table is created, as Spark's
JDBC writer creates it (``createTable=false`` refuses one instead).
``dbtable`` is read as SQL, as Spark's JDBC source reads it (see
``identifiers.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from eoskit.core.options import (
    Option,
    OptionError,
    OptionSet,
    Reading,
    parse_bool,
    parse_choice,
    parse_str,
    setting,
)
from eoskit.connectors.sink_options import DEAD_LETTER_SOURCE_COLUMNS, DEAD_LETTER_TABLE, parse_names
from eoskit.connectors.sql import jdbc, network
from eoskit.connectors.sql.identifiers import IdentifierError, TableName, parse_table_name
from eoskit.connectors.sql.jdbc import ColumnType
from eoskit.twophase.contract import CommitMode, resolve_commit_mode
from eoskit.twophase.sink_options import COMMIT_MODE, COMMON

if TYPE_CHECKING:
    from eoskit.connectors.sql.sink import SqlSink


# -- what the fields derive from their options (on the driver, when the sink is
# made; an OptionError names the option at fault) -----------------------------------


def _url(url: str, reading: Reading) -> str:
    """The SQLAlchemy URL to connect with: a JDBC one translated by the sink
    type's ``JDBC`` dialect (whose ``driver`` it checks first), with
    ``user``, ``password`` and ``queryTimeout``'s query keys in it."""
    dialect = reading["sink_type"].DATABASE.jdbc
    jdbc.check_driver(reading.raw, dialect)
    return jdbc.connection_url(url, reading.raw, dialect, jdbc.QUERY_TIMEOUT.read(reading.raw))


def _table_name(option: str) -> Callable[[str, Reading], TableName]:
    """Option ``option``'s text as a table name, quoted as the sink type quotes."""

    def derive(text: str, reading: Reading) -> TableName:
        quotes = reading["sink_type"].DATABASE.identifier_quotes
        try:
            return parse_table_name(text, quotes)
        except IdentifierError as exc:
            raise OptionError(f"{reading.owner}: option '{option}' = {text!r}: {exc}") from None

    return derive


def _commit_mode(mode: str, reading: Reading) -> CommitMode:
    return resolve_commit_mode(reading["sink_type"], mode)


def _table_options(_: None, reading: Reading) -> tuple[tuple[str, object], ...]:
    """``createTableOptions`` by the dialect's grammar, and ``tableComment``."""
    text = jdbc.CREATE_TABLE_OPTIONS.read(reading.raw)
    options = dict(reading["sink_type"].DATABASE.jdbc.table_options(text) if text else ())
    comment = jdbc.TABLE_COMMENT.read(reading.raw)
    if comment is not None:
        if "comment" in options:
            raise OptionError("options 'tableComment' and 'createTableOptions' both give the "
                              "table's comment: give it once")
        options["comment"] = comment
    return tuple(options.items())


# -- rules that span options (after every field is read) ------------------------------


def upsert_needs_key(settings: "SqlSinkSettings", reading: Reading) -> None:
    if settings.mode == "upsert" and not settings.key:
        raise OptionError(f"{reading.owner}: mode 'upsert' needs the option 'key' (key columns)")


def dead_letter_columns_need_a_table(settings: "SqlSinkSettings", reading: Reading) -> None:
    if settings.dead_letter_source_columns is not None and settings.dead_letter_table is None:
        raise OptionError(f"{reading.owner}: option '{DEAD_LETTER_SOURCE_COLUMNS.name}' needs "
                          f"the option '{DEAD_LETTER_TABLE.name}'")


@dataclass(frozen=True, kw_only=True)
class SqlSinkSettings:
    """One SQL sink's settings, each field declared by the option it is read
    from (``setting``): ``OPTIONS`` and ``parse`` are derived from them.
    Parsed on the driver; pickled to executors with the sink."""

    url: str = setting(
        Option("url", parse_str, None,
               "The database: a SQLAlchemy URL (`postgresql://user:pw@host:5432/db`, "
               "`mysql://...`) or Spark's JDBC URL (`jdbc:postgresql://host:5432/db`, "
               "`jdbc:mysql://...`, `jdbc:mariadb://...`), whose parameters are mapped to the "
               "Python driver's or refused by name.",
               secret=True),
        required=" (a SQLAlchemy or JDBC URL)", derive=_url,
        reads=(jdbc.USER, jdbc.PASSWORD, jdbc.DRIVER))
    #: ``dbtable`` as a table name (``dbtable`` gives the text back).
    table: TableName = setting(
        Option("dbtable", parse_str, None,
               "Target table, `table` or `schema.table`, written as in SQL: a bare name is "
               "folded as the database folds it (PostgreSQL: lower case), a quoted one "
               "(`\"OrderItems\"`, MySQL also `` `OrderItems` ``) is taken as it is."),
        required="", derive=_table_name("dbtable"))
    mode: str = setting(
        Option("mode", parse_choice("append", "upsert"), "append",
               "`append` inserts every row; `upsert` inserts or updates by `key`."))
    key: tuple[str, ...] = setting(
        Option("key", parse_names, None,
               "Comma-separated key columns for `upsert` (a primary key or unique constraint "
               "of the table)."),
        default=())
    create_table: bool = setting(
        Option("createTable", parse_bool, True,
               "Create the table from the DataFrame schema if it does not exist, as "
               "Spark's JDBC writer does (with `key` as primary key in upsert mode); "
               "`false` refuses a missing table instead."))
    marker_table: str = setting(
        Option("markerTable", parse_str, "eoskit_markers",
               "Table of the idempotent mode's progress markers, in the target's "
               "schema; created if missing."))
    #: Where refused rows go (``deadLetterTable``); None: a refused row fails the batch.
    dead_letter_table: TableName | None = setting(
        DEAD_LETTER_TABLE, derive=_table_name(DEAD_LETTER_TABLE.name), default=None)
    #: ``deadLetterSourceColumns`` as given; None: the default columns.
    dead_letter_source_columns: tuple[str, ...] | None = setting(DEAD_LETTER_SOURCE_COLUMNS)
    #: ``isolationLevel`` as SQL spells it; None: the server's default.
    isolation_level: str | None = setting(
        jdbc.ISOLATION_LEVEL, derive=lambda level, _: jdbc.ISOLATION_SQL[level], default=None)
    #: ``queryTimeout`` in seconds; 0: no limit.
    query_timeout: int = setting(jdbc.QUERY_TIMEOUT)
    #: ``createTableColumnTypes``: (column, type) pairs.
    column_types: tuple[tuple[str, ColumnType], ...] = setting(
        jdbc.CREATE_TABLE_COLUMN_TYPES, derive=lambda text, _: jdbc.parse_column_types(text),
        default=())
    #: ``createTableOptions`` as SQLAlchemy ``Table`` keyword arguments.
    table_options: tuple[tuple[str, object], ...] = setting(
        derive=_table_options, reads=(jdbc.CREATE_TABLE_OPTIONS, jdbc.TABLE_COMMENT), default=())
    #: ``connectTimeout``, ``networkTimeout``, ``sessionIdleTimeout``, ``reconnectWithin``.
    limits: network.SessionLimits = setting(
        derive=lambda _, reading: network.SessionLimits.read(reading.raw),
        reads=network.OPTIONS, default=network.SessionLimits())
    #: ``commitMode`` resolved against the sink type's capabilities.
    commit_mode: CommitMode = setting(COMMIT_MODE, derive=_commit_mode)

    CHECKS: ClassVar = (upsert_needs_key, dead_letter_columns_need_a_table)

    @property
    def dbtable(self) -> str:
        """The option as the user gave it."""
        return self.table.text

    @classmethod
    def parse(cls, options: Mapping[str, str], sink_name: str,
              sink_type: "type[SqlSink]") -> "SqlSinkSettings":
        """The options as settings (``OPTIONS.read``); ``commitMode``
        resolved against the capabilities of ``sink_type``, JDBC's options
        by its ``JDBC``. ``sink_name`` is the sink's name in errors."""
        return OPTIONS.read(options, sink_name, sink_type=sink_type)


OPTIONS = OptionSet.of(
    SqlSinkSettings,
    also=(jdbc.BATCHSIZE, *COMMON),  # COMMON's sinkId, ...: read by the protocol's adapter
    owner="this eoskit SQL sink",
    refused=jdbc.REFUSED,
    refused_from="Spark JDBC",
)
