"""Options of the SQL sinks (PostgreSQL, MySQL/MariaDB), declared once.

Names follow Spark's JDBC data source where one exists (``url``,
``dbtable``); ``url`` is a SQLAlchemy URL rather than a JDBC one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eoskit.connectors.options import (
    Option,
    OptionError,
    OptionSet,
    parse_bool,
    parse_choice,
    parse_str,
)

URL = Option("url", parse_str, None,
             "SQLAlchemy URL of the database, e.g. postgresql+psycopg://user:pw@host:5432/db.",
             secret=True)
DBTABLE = Option("dbtable", parse_str, None, "Target table, `table` or `schema.table`.")
MODE = Option("mode", parse_choice("append", "upsert"), "append",
              "`append` inserts every row; `upsert` inserts or updates by `key`.")
KEY = Option("key", parse_str, None,
             "Comma-separated key columns for `upsert` (a primary key or unique constraint "
             "of the table).")
COMMIT_MODE = Option("commitMode", parse_choice("twophase", "idempotent", "at_least_once"),
                     "twophase",
                     "`twophase`: exactly-once through prepared transactions; `idempotent`: "
                     "each task commits with a progress marker, exactly-once for deterministic "
                     "replays, for servers without prepared transactions; `at_least_once`: "
                     "each task commits by itself.")
MARKER_TABLE = Option("markerTable", parse_str, "eoskit_markers",
                      "Table of the idempotent mode's progress markers, in the target's "
                      "schema; created if missing.")
SINK_ID = Option("sinkId", parse_str, None,
                 "Namespace of the sink's transaction ids, stable across restarts and "
                 "savepoints. Default: derived from the checkpoint location.")
CREATE_TABLE = Option("createTable", parse_bool, False,
                      "Create the table from the DataFrame schema if it does not exist "
                      "(with `key` as primary key in upsert mode).")
CHECKPOINT = Option("checkpointLocation", parse_str, None,
                    "Set by Spark from writeStream's checkpointLocation; the decision log "
                    "lives beside it.")

QUERY_NAME = Option("queryName", parse_str, None,
                    "Set by Spark from writeStream's queryName; not used by the sink.")

OPTIONS = OptionSet(
    (URL, DBTABLE, MODE, KEY, COMMIT_MODE, SINK_ID, CREATE_TABLE, MARKER_TABLE, CHECKPOINT,
     QUERY_NAME),
    owner="this eoskit SQL sink",
)


@dataclass(frozen=True)
class SqlSinkSettings:
    url: str
    schema: str | None
    table: str
    mode: str
    key: tuple[str, ...]
    commit_mode: str
    create_table: bool
    marker_table: str = "eoskit_markers"

    @property
    def dbtable(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table

    @classmethod
    def parse(cls, options: Mapping[str, str], sink_name: str) -> "SqlSinkSettings":
        raw = OPTIONS.normalise(options)
        url = URL.read(raw)
        if not url:
            raise OptionError(f"{sink_name} needs the option 'url' (a SQLAlchemy URL)")
        dbtable = DBTABLE.read(raw)
        if not dbtable:
            raise OptionError(f"{sink_name} needs the option 'dbtable'")
        schema, _, table = dbtable.rpartition(".")
        mode = MODE.read(raw)
        key = tuple(k.strip() for k in (KEY.read(raw) or "").split(",") if k.strip())
        if mode == "upsert" and not key:
            raise OptionError(f"{sink_name}: mode 'upsert' needs the option 'key' (key columns)")
        return cls(url=url, schema=schema or None, table=table, mode=mode, key=key,
                   commit_mode=COMMIT_MODE.read(raw), create_table=CREATE_TABLE.read(raw),
                   marker_table=MARKER_TABLE.read(raw))
