"""What the PostgreSQL sink checks on the driver before any data moves, each
refusal with the statement that fixes it. Run by ``PostgresTransactions.check``
when the query starts (Spark's write planning), on the driver only.

Privileges are asked of the server (``has_table_privilege``,
``has_schema_privilege``), which covers roles and inherited grants.
"""

from __future__ import annotations

import psycopg
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import URL

from eoskit.connectors.postgres.dialect import in_schema
from eoskit.connectors.sql.deadletter import DeadLetterTable
from eoskit.connectors.sql.registry import claim_sink_id
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.tables import TargetTable
from eoskit.connectors.sql.sink import safe
from eoskit.twophase.contract import SinkContext, SinkError


def check_privileges(conn: psycopg.Connection, target: TargetTable, settings: SqlSinkSettings,
                     url: URL) -> None:
    """INSERT on the target (and UPDATE for upsert), and CREATE on its schema
    for upsert's staging table."""
    qualified = sql.SQL(".").join(
        sql.Identifier(p) for p in ([target.schema] if target.schema else []) + [target.name]
    ).as_string(conn)
    needed = ["INSERT"] + (["UPDATE"] if settings.mode == "upsert" else [])
    for privilege in needed:
        allowed = conn.execute("SELECT has_table_privilege(%s, %s)", (qualified, privilege)).fetchone()[0]
        if not allowed:
            raise SinkError(
                f"user {url.username!r} lacks {privilege} on {target.qualified}: "
                f"GRANT {privilege} ON {qualified} TO {url.username}"
            )
    if settings.mode == "upsert":
        schema_name = target.schema or conn.execute("SELECT current_schema()").fetchone()[0]
        if not conn.execute("SELECT has_schema_privilege(%s, 'CREATE')", (schema_name,)).fetchone()[0]:
            raise SinkError(
                f"user {url.username!r} lacks CREATE on schema {schema_name!r}, needed "
                "for upsert's staging table: GRANT CREATE ON SCHEMA "
                f"{schema_name} TO {url.username}"
            )


def check_dead_letter_table(conn: psycopg.Connection, table: DeadLetterTable, url: URL) -> None:
    """INSERT on the dead-letter table (created by then, ``DeadLetterTable.ensure``)."""
    if not conn.execute("SELECT has_table_privilege(%s, 'INSERT')", (table.sql_name,)).fetchone()[0]:
        raise SinkError(
            f"user {url.username!r} lacks INSERT on the dead-letter table "
            f"{table.qualified} (option 'deadLetterTable'): GRANT INSERT ON "
            f"{table.sql_name} TO {url.username}")


def check_prepared_transactions(conn: psycopg.Connection, url: URL) -> None:
    """The two-phase mode needs ``max_prepared_transactions`` above 0."""
    limit = int(conn.execute("SHOW max_prepared_transactions").fetchone()[0])
    if limit == 0:
        raise SinkError(
            f"PostgreSQL at {safe(url)} has max_prepared_transactions = 0, so it "
            "cannot prepare transactions: set it to at least twice the number of "
            "write tasks per batch in postgresql.conf and restart the server "
            "(or use commitMode=idempotent, which needs no prepared transactions)"
        )


def claim(engine: sa.Engine, target: TargetTable, context: SinkContext, where: str) -> None:
    """Record the sink id in ``eoskit_sinks`` (refusing one another query owns)."""
    try:
        claim_sink_id(engine, target.schema, context, where)
    except sa.exc.DBAPIError as exc:
        raise SinkError(
            f"cannot record sink id {context.sink_id!r} in {where}: "
            f"{str(exc.orig).strip().splitlines()[0]} (the user needs CREATE on the schema "
            "once, then SELECT and INSERT on eoskit_sinks)"
        ) from None


def create_marker_table(conn: psycopg.Connection, target: TargetTable, settings: SqlSinkSettings) -> None:
    """The idempotent mode's progress markers, in the target's schema."""
    try:
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (sink_id text NOT NULL, batch bigint NOT NULL, "
            "task_partition integer NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (sink_id, batch, task_partition))"
        ).format(in_schema(target, settings.marker_table)))
    except psycopg.Error as exc:
        raise SinkError(f"cannot create the marker table {settings.marker_table}: "
                        f"{exc.diag.message_primary or exc}") from None


def session_reaping(conn: psycopg.Connection, url: URL) -> str | None:
    """Why this server would keep a vanished client's session (and its
    locks) for hours, or None: the per-session keepalives the sink asks for
    (``connectors/sql/network.py``) read back as 0 where the server cannot
    set them (a Unix socket, a pooler's session in between)."""
    idle = conn.execute("SHOW tcp_keepalives_idle").fetchone()[0]
    if str(idle).strip() in ("0", "0s"):
        return (f"PostgreSQL at {safe(url)} ignores the sink's per-session TCP keepalives "
                "(tcp_keepalives_idle reads 0): a task whose host vanishes mid-write keeps its "
                "session and locks until the operating system gives up on it (about two hours "
                "by default). Connect over TCP directly to the server, or set "
                "tcp_keepalives_idle/interval/count in postgresql.conf")
    return None
