"""What the MySQL sink checks on the driver before any data moves, each
refusal with the statement that fixes it.

Privileges are tested with ``EXPLAIN`` of the very statements the sink
will run: the server checks the rights of an explained statement without
running it, which covers roles, wildcards and column grants that reading
``SHOW GRANTS`` would have to reimplement.
"""

from __future__ import annotations

import logging

import pymysql
import sqlalchemy as sa
from sqlalchemy.engine import URL

from eoskit.connectors.mysql.dialect import error_code as _code
from eoskit.connectors.mysql.dialect import error_text as _text
from eoskit.connectors.mysql.dialect import qualified as _qualified
from eoskit.connectors.mysql.dialect import quote as _quote
from eoskit.connectors.mysql.dialect import server_version
from eoskit.connectors.sql.deadletter import COLUMNS as DEAD_LETTER_COLUMNS
from eoskit.connectors.sql.deadletter import DeadLetterTable
from eoskit.connectors.sql.registry import REGISTRY_TABLE, claim_sink_id
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.tables import TargetTable
from eoskit.connectors.sql.sink import safe
from eoskit.twophase.contract import SinkContext, SinkError

log = logging.getLogger(__name__)

#: Server errors that mean "not allowed": table, column, database, global.
ACCESS_DENIED = frozenset({1142, 1143, 1044, 1045, 1227, 1370})
TRANSACTIONAL_ENGINES = frozenset({"INNODB"})


def _one(conn: pymysql.connections.Connection, statement: str, args: tuple = ()) -> object:
    with conn.cursor() as cursor:
        cursor.execute(statement, args or None)
        row = cursor.fetchone()
    return row[0] if row else None


def account(conn: pymysql.connections.Connection, url: URL) -> str:
    """The account the server matched, as a GRANT names it: 'user'@'host'."""
    try:
        current = str(_one(conn, "SELECT CURRENT_USER()"))
        user, _, host = current.rpartition("@")
        return f"'{user}'@'{host}'"
    except pymysql.MySQLError:
        return f"'{url.username}'@'%'"


def _database(conn: pymysql.connections.Connection, target: TargetTable) -> str:
    return target.schema or str(_one(conn, "SELECT DATABASE()"))


def check_engine(conn: pymysql.connections.Connection, target: TargetTable,
                 settings: SqlSinkSettings) -> None:
    """MyISAM, Aria, MEMORY, ... write through at once: a rollback or an
    XA PREPARE cannot hold their rows back. at_least_once takes any engine."""
    if settings.commit_mode == "at_least_once":
        return
    engine = _one(conn, "SELECT ENGINE FROM information_schema.TABLES "
                        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                  (_database(conn, target), target.name))
    if engine is not None and str(engine).upper() not in TRANSACTIONAL_ENGINES:
        raise SinkError(
            f"table {target.qualified} uses the {engine} storage engine, which has no "
            f"transactions: commitMode={settings.commit_mode} needs InnoDB, so that a batch's "
            f"rows stay invisible until it commits. Convert it: ALTER TABLE "
            f"{_qualified(target.schema, target.name)} ENGINE=InnoDB "
            "(or use commitMode=at_least_once)"
        )


def _denied(conn: pymysql.connections.Connection, statement: str) -> bool:
    """Whether the server refuses ``EXPLAIN statement`` for lack of rights."""
    try:
        with conn.cursor() as cursor:
            cursor.execute("EXPLAIN " + statement)
            cursor.fetchall()
    except pymysql.MySQLError as exc:
        if _code(exc) in ACCESS_DENIED:
            return True
        log.debug("EXPLAIN %s failed (%s); the write will tell", statement, _text(exc))
    return False


def check_privileges(conn: pymysql.connections.Connection, target: TargetTable,
                     settings: SqlSinkSettings, url: URL, who: str, columns: list[str]) -> None:
    if not columns:
        return
    table = _qualified(target.schema, target.name)
    nulls = ", ".join("NULL" for _ in columns)
    missing = []
    if _denied(conn, f"INSERT INTO {table} ({', '.join(map(_quote, columns))}) VALUES ({nulls})"):
        missing.append("INSERT")
    if settings.mode == "upsert":
        column = next((c for c in columns if c not in settings.key), columns[0])
        if _denied(conn, f"UPDATE {table} SET {_quote(column)} = NULL"):
            missing.append("UPDATE")
    if missing:
        rights = ", ".join(missing)
        grant_on = _qualified(_database(conn, target), target.name)
        raise SinkError(
            f"user {url.username!r} lacks {rights} on {target.qualified}: "
            f"GRANT {rights} ON {grant_on} TO {who}"
        )


def check_xa_support(conn: pymysql.connections.Connection, url: URL) -> None:
    """A prepared XA transaction must survive the disconnect of the session
    that prepared it (the task closes it right away, see connection.py):
    MariaDB 10.5 and MySQL 5.7.7 made it so; older servers roll it back."""
    mariadb, version = server_version(conn.get_server_info())
    needed = (10, 5) if mariadb else (5, 7, 7)
    if version < needed:
        name = "MariaDB" if mariadb else "MySQL"
        raise SinkError(
            f"{name} {'.'.join(map(str, version))} at {safe(url)} rolls back a prepared XA "
            f"transaction when its session disconnects, so commitMode=twophase cannot work "
            f"there: upgrade to {name} {'.'.join(map(str, needed))} or later, or use "
            "commitMode=idempotent"
        )


def xa_rights_message(exc: BaseException, url: URL, who: str | None = None) -> str:
    return (
        f"user {url.username!r} may not run XA RECOVER in MySQL at {safe(url)} "
        f"({_text(exc)}); eoskit needs it to find and settle its prepared transactions. "
        f"MySQL 8 needs the XA_RECOVER_ADMIN privilege: GRANT XA_RECOVER_ADMIN ON *.* TO "
        f"{who or repr(url.username) + '@<host>'} (or use commitMode=idempotent, which needs no XA)"
    )


def check_xa_rights(conn: pymysql.connections.Connection, url: URL, who: str) -> None:
    try:
        with conn.cursor() as cursor:
            cursor.execute("XA RECOVER")
            cursor.fetchall()
    except pymysql.MySQLError as exc:
        raise SinkError(xa_rights_message(exc, url, who)) from None


def claim(engine: sa.Engine, target: TargetTable, context: SinkContext, where: str,
          url: URL, who: str) -> None:
    """The shared sink-id registry (``eoskit_sinks``), with MySQL's errors
    turned into what to grant."""
    try:
        claim_sink_id(engine, target.schema, context, where)
    except sa.exc.DBAPIError as exc:
        table = _qualified(target.schema, REGISTRY_TABLE)
        if _code(exc.orig) in ACCESS_DENIED:
            raise SinkError(
                f"user {url.username!r} cannot use eoskit's sink-id registry {table} "
                f"({_text(exc.orig)}): GRANT CREATE, SELECT, INSERT ON {table} TO "
                f"{who} (it records which query owns sink id "
                f"{context.sink_id!r})"
            ) from None
        raise SinkError(f"cannot register sink id {context.sink_id!r} in {table}: "
                        f"{_text(exc.orig)}") from None


def create_marker_table(conn: pymysql.connections.Connection, target: TargetTable,
                        settings: SqlSinkSettings, url: URL, who: str) -> None:
    """The marker table: the idempotent mode's markers, one row per (sink,
    batch, task), committed with the task's rows; and the two-phase mode's
    evidence, one row per XA transaction, there once it committed."""
    table = _qualified(target.schema, settings.marker_table)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (sink_id VARCHAR(64) NOT NULL, "
                "batch BIGINT NOT NULL, task_partition INT NOT NULL, "
                "committed_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, "
                "PRIMARY KEY (sink_id, batch, task_partition)) ENGINE=InnoDB"
            )
    except pymysql.MySQLError as exc:
        grant = (f" GRANT CREATE ON {_qualified(_database(conn, target), settings.marker_table)} "
                 f"TO {who}, or create it yourself" if _code(exc) in ACCESS_DENIED else "")
        raise SinkError(f"cannot create the marker table {table} (option 'markerTable'), "
                        f"which commitMode={settings.commit_mode} needs: {_text(exc)}.{grant}") from None
    check_engine(conn, TargetTable(target.schema, settings.marker_table, {}), settings)
    if _denied(conn, f"INSERT IGNORE INTO {table} (sink_id, batch, task_partition) "
                     "VALUES ('', 0, 0)") or _denied(conn, f"DELETE FROM {table} WHERE batch < 0"):
        raise SinkError(
            f"user {url.username!r} lacks INSERT or DELETE on the marker table {table} "
            f"(option 'markerTable'): GRANT SELECT, INSERT, DELETE ON "
            f"{_qualified(_database(conn, target), settings.marker_table)} TO {who}"
        )


def check_dead_letter_table(conn: pymysql.connections.Connection, table: DeadLetterTable,
                            settings: SqlSinkSettings, url: URL, who: str) -> None:
    """The dead-letter table takes its rows in the task's transaction: it
    must be InnoDB, and the user must be allowed to insert into it."""
    check_engine(conn, TargetTable(table.schema, table.name, {}), settings)
    values = ", ".join("NULL" for _ in DEAD_LETTER_COLUMNS)
    if _denied(conn, f"INSERT INTO {table.sql_name} ({', '.join(DEAD_LETTER_COLUMNS)}) "
                     f"VALUES ({values})"):
        grant_on = _qualified(_database(conn, TargetTable(table.schema, table.name, {})),
                              table.name)
        raise SinkError(
            f"user {url.username!r} lacks INSERT on the dead-letter table {table.qualified} "
            f"(option 'deadLetterTable'): GRANT INSERT ON {grant_on} TO {who}"
        )
