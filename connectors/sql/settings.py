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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eoskit.twophase.options import (
    Option,
    OptionError,
    OptionSet,
    parse_bool,
    parse_choice,
    parse_str,
)
from eoskit.connectors.sink_options import DEAD_LETTER_SOURCE_COLUMNS, DEAD_LETTER_TABLE
from eoskit.connectors.sql import jdbc, network
from eoskit.connectors.sql.identifiers import QUOTES, IdentifierError, TableName, parse_table_name
from eoskit.connectors.sql.jdbc import ColumnType
from eoskit.twophase.contract import CommitMode, resolve_commit_mode
from eoskit.twophase.sink_options import COMMIT_MODE, COMMON

if TYPE_CHECKING:
    from eoskit.connectors.sql.sink import SqlSink

URL = Option("url", parse_str, None,
             "The database: a SQLAlchemy URL (`postgresql://user:pw@host:5432/db`, "
             "`mysql://...`) or Spark's JDBC URL (`jdbc:postgresql://host:5432/db`, "
             "`jdbc:mysql://...`, `jdbc:mariadb://...`), whose parameters are mapped to the "
             "Python driver's or refused by name.",
             secret=True)
DBTABLE = Option("dbtable", parse_str, None,
                 "Target table, `table` or `schema.table`, written as in SQL: a bare name is "
                 "folded as the database folds it (PostgreSQL: lower case), a quoted one "
                 "(`\"OrderItems\"`, MySQL also `` `OrderItems` ``) is taken as it is.")
MODE = Option("mode", parse_choice("append", "upsert"), "append",
              "`append` inserts every row; `upsert` inserts or updates by `key`.")
KEY = Option("key", parse_str, None,
             "Comma-separated key columns for `upsert` (a primary key or unique constraint "
             "of the table).")
MARKER_TABLE = Option("markerTable", parse_str, "eoskit_markers",
                      "Table of the idempotent mode's progress markers, in the target's "
                      "schema; created if missing.")
CREATE_TABLE = Option("createTable", parse_bool, True,
                      "Create the table from the DataFrame schema if it does not exist, as "
                      "Spark's JDBC writer does (with `key` as primary key in upsert mode); "
                      "`false` refuses a missing table instead.")
OPTIONS = OptionSet(
    (URL, DBTABLE, MODE, KEY, CREATE_TABLE, MARKER_TABLE, DEAD_LETTER_TABLE,
     DEAD_LETTER_SOURCE_COLUMNS, *jdbc.OPTIONS, *network.OPTIONS, *COMMON),
    owner="this eoskit SQL sink",
    refused=jdbc.REFUSED,
    refused_from="Spark JDBC",
)


@dataclass(frozen=True)
class SqlSinkSettings:
    url: str
    table: TableName
    mode: str
    key: tuple[str, ...]
    commit_mode: CommitMode
    create_table: bool
    marker_table: str = "eoskit_markers"
    #: Where refused rows go (``deadLetterTable``); None: a refused row fails the batch.
    dead_letter_table: TableName | None = None
    #: ``deadLetterSourceColumns`` as given; None: the default columns.
    dead_letter_source_columns: tuple[str, ...] | None = None
    #: ``isolationLevel`` as SQL spells it; None: the server's default.
    isolation_level: str | None = None
    #: ``queryTimeout`` in seconds; 0: no limit.
    query_timeout: int = 0
    #: ``createTableColumnTypes``: (column, type) pairs.
    column_types: tuple[tuple[str, ColumnType], ...] = ()
    #: ``createTableOptions`` as SQLAlchemy ``Table`` keyword arguments.
    table_options: tuple[tuple[str, object], ...] = ()
    #: ``connectTimeout``, ``networkTimeout``, ``sessionIdleTimeout``, ``reconnectWithin``.
    limits: network.SessionLimits = network.SessionLimits()

    @property
    def dbtable(self) -> str:
        """The option as the user gave it."""
        return self.table.text

    @classmethod
    def parse(cls, options: Mapping[str, str], sink_name: str,
              sink_type: "type[SqlSink]") -> "SqlSinkSettings":
        """The options as settings; ``commitMode`` resolved against the
        capabilities of ``sink_type``, JDBC's options by its ``JDBC``."""
        raw = OPTIONS.normalise(options)
        url = URL.read(raw)
        if not url:
            raise OptionError(f"{sink_name} needs the option 'url' (a SQLAlchemy or JDBC URL)")
        dialect = sink_type.JDBC
        jdbc.check_driver(raw, dialect)
        query_timeout = jdbc.QUERY_TIMEOUT.read(raw)
        url = jdbc.connection_url(url, raw, dialect, query_timeout)
        isolation = jdbc.ISOLATION_LEVEL.read(raw)
        column_types = jdbc.CREATE_TABLE_COLUMN_TYPES.read(raw)
        dbtable = DBTABLE.read(raw)
        if not dbtable:
            raise OptionError(f"{sink_name} needs the option 'dbtable'")
        quotes = getattr(sink_type, "identifier_quotes", QUOTES)
        try:
            table = parse_table_name(dbtable, quotes)
        except IdentifierError as exc:
            raise OptionError(f"{sink_name}: option 'dbtable' = {dbtable!r}: {exc}") from None
        mode = MODE.read(raw)
        key = tuple(k.strip() for k in (KEY.read(raw) or "").split(",") if k.strip())
        if mode == "upsert" and not key:
            raise OptionError(f"{sink_name}: mode 'upsert' needs the option 'key' (key columns)")
        dead_letters = DEAD_LETTER_TABLE.read(raw)
        dead_letter_table = None
        if dead_letters is not None:
            try:
                dead_letter_table = parse_table_name(dead_letters, quotes)
            except IdentifierError as exc:
                raise OptionError(f"{sink_name}: option '{DEAD_LETTER_TABLE.name}' = "
                                  f"{dead_letters!r}: {exc}") from None
        sources = DEAD_LETTER_SOURCE_COLUMNS.read(raw)
        if sources is not None and dead_letter_table is None:
            raise OptionError(f"{sink_name}: option '{DEAD_LETTER_SOURCE_COLUMNS.name}' needs "
                              f"the option '{DEAD_LETTER_TABLE.name}'")
        return cls(url=url, table=table, mode=mode, key=key,
                   commit_mode=resolve_commit_mode(sink_type, COMMIT_MODE.read(raw)), create_table=CREATE_TABLE.read(raw),
                   marker_table=MARKER_TABLE.read(raw), dead_letter_table=dead_letter_table,
                   dead_letter_source_columns=sources,
                   isolation_level=jdbc.ISOLATION_SQL[isolation] if isolation else None,
                   query_timeout=query_timeout,
                   column_types=jdbc.parse_column_types(column_types) if column_types else (),
                   table_options=_table_options(raw, dialect), limits=network.SessionLimits.read(raw))


def _table_options(raw: Mapping[str, str], dialect: jdbc.JdbcDialect) -> tuple[tuple[str, object], ...]:
    """``createTableOptions`` by the dialect's grammar, and ``tableComment``."""
    text = jdbc.CREATE_TABLE_OPTIONS.read(raw)
    options = dict(dialect.table_options(text) if text else ())
    comment = jdbc.TABLE_COMMENT.read(raw)
    if comment is not None:
        if "comment" in options:
            raise OptionError("options 'tableComment' and 'createTableOptions' both give the "
                              "table's comment: give it once")
        options["comment"] = comment
    return tuple(options.items())
