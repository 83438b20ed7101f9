"""Options of the SQL sinks (PostgreSQL, MySQL/MariaDB), declared once.

Names follow Spark's JDBC data source where one exists (``url``,
``dbtable``); ``url`` is a SQLAlchemy URL rather than a JDBC one.
``dbtable`` is read as SQL, as Spark's JDBC source reads it (see
``identifiers.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eoskit.twophase.options import (
    Option,
    OptionError,
    OptionSet,
    parse_bool,
    parse_choice,
    parse_str,
)
from eoskit.connectors.sink_options import DEAD_LETTER_SOURCE_COLUMNS, DEAD_LETTER_TABLE
from eoskit.connectors.sql.identifiers import QUOTES, IdentifierError, TableName, parse_table_name
from eoskit.twophase.contract import CommitMode, Sink, resolve_commit_mode
from eoskit.twophase.sink_options import COMMIT_MODE, COMMON

URL = Option("url", parse_str, None,
             "SQLAlchemy URL of the database, e.g. postgresql+psycopg://user:pw@host:5432/db.",
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
CREATE_TABLE = Option("createTable", parse_bool, False,
                      "Create the table from the DataFrame schema if it does not exist "
                      "(with `key` as primary key in upsert mode).")
OPTIONS = OptionSet(
    (URL, DBTABLE, MODE, KEY, CREATE_TABLE, MARKER_TABLE, DEAD_LETTER_TABLE,
     DEAD_LETTER_SOURCE_COLUMNS, *COMMON),
    owner="this eoskit SQL sink",
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

    @property
    def dbtable(self) -> str:
        """The option as the user gave it."""
        return self.table.text

    @classmethod
    def parse(cls, options: Mapping[str, str], sink_name: str,
              sink_type: type[Sink]) -> "SqlSinkSettings":
        """The options as settings; ``commitMode`` resolved against the
        capabilities of ``sink_type``."""
        raw = OPTIONS.normalise(options)
        url = URL.read(raw)
        if not url:
            raise OptionError(f"{sink_name} needs the option 'url' (a SQLAlchemy URL)")
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
                   dead_letter_source_columns=sources)
