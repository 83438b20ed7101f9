"""PyMySQL connections from a SQLAlchemy URL, and how the sink uses them.

Two kinds, because of how MySQL and MariaDB treat a prepared XA transaction:

- **A task's XA connection is its own and is closed right after
  ``XA PREPARE``** (``connect``). A session that prepared an XA
  transaction stays attached to it until the transaction ends or the
  session disconnects: while attached, the session can run nothing that
  touches a table (XAER_RMFAIL) and, worse, *no other session can commit
  it* (``XA COMMIT`` from the driver answers XAER_NOTA, "unknown XID",
  although ``XA RECOVER`` lists it). Only a disconnect detaches it; the
  prepared transaction survives that (MariaDB >= 10.5, MySQL >= 5.7.7).
  So an XA connection serves exactly one task attempt and is never cached.
  The detach happens a moment after the client closes the socket, which
  is why ``MySQLTransactions`` retries a commit that meets XAER_NOTA while
  ``XA RECOVER`` still lists the id.
- **Everything else uses one cached connection per process and URL**
  (``cached_connection``): the driver's ``XA COMMIT`` / ``XA ROLLBACK`` /
  ``XA RECOVER``, the checks, and the local transactions of the
  ``idempotent`` and ``at_least_once`` modes (which end with ``COMMIT``
  and leave the session idle), so a micro-batch costs no connect there.

Every session is set up the same way (``init_command``): ``time_zone``
``+00:00`` (Spark's timestamps are UTC and are written as UTC, so a
``TIMESTAMP`` column stores the right instant and a ``DATETIME`` column
holds UTC), ``sql_mode`` without ``NO_BACKSLASH_ESCAPES`` (the literal
encoder in ``literals.py`` escapes with backslashes) and the lock-wait
timeout of ``LOCK_WAIT_TIMEOUT_S``.
"""

from __future__ import annotations

import atexit
from typing import Any

import pymysql
from pymysql.constants import SERVER_STATUS
from sqlalchemy.engine import URL

#: How long a statement waits for a row lock before failing: a longer wait
#: is two tasks of one batch writing the same key (see transactions.py).
LOCK_WAIT_TIMEOUT_S = 60

_SESSION_SETUP = (
    "SET time_zone = '+00:00', "
    f"innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}, "
    "sql_mode = TRIM(BOTH ',' FROM REPLACE(CONCAT(',', @@sql_mode, ','), "
    "',NO_BACKSLASH_ESCAPES,', ','))"
)

_connections: dict[str, pymysql.connections.Connection] = {}


def connect_kwargs(url: URL) -> dict[str, Any]:
    """PyMySQL's arguments for a SQLAlchemy URL (query items pass through,
    e.g. ``?unix_socket=...`` or ``?ssl_ca=...``)."""
    kwargs: dict[str, Any] = {
        "host": url.host or "localhost", "port": url.port or 3306,
        "user": url.username, "password": url.password or "", "database": url.database,
    }
    kwargs.update({k: v for k, v in url.query.items() if isinstance(v, str)})
    if "port" in url.query:
        kwargs["port"] = int(kwargs["port"])
    return {k: v for k, v in kwargs.items() if v is not None}


def connect(url: URL) -> pymysql.connections.Connection:
    """A new autocommit session, set up for the sink (see the module doc)."""
    kwargs = {"charset": "utf8mb4", "connect_timeout": 30, **connect_kwargs(url)}
    return pymysql.connect(**kwargs, autocommit=True, init_command=_SESSION_SETUP)


def _key(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _usable(conn: pymysql.connections.Connection) -> bool:
    """Open, alive and not inside a transaction someone left behind."""
    if not conn.open or conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS:
        return False
    try:
        conn.ping(reconnect=False)  # a reconnect would lose the session setup
    except pymysql.MySQLError:
        return False
    return True


def cached_connection(url: URL) -> pymysql.connections.Connection:
    """This process's idle autocommit session for ``url``; a broken one is
    replaced. Never use it for an XA transaction (see the module doc)."""
    conn = _connections.get(_key(url))
    if conn is not None and not _usable(conn):
        drop_connection(url)
        conn = None
    if conn is None:
        conn = connect(url)
        _connections[_key(url)] = conn
    return conn


def close_quietly(conn: pymysql.connections.Connection | None) -> None:
    if conn is None:
        return
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a broken socket
        pass


def drop_connection(url: URL) -> None:
    close_quietly(_connections.pop(_key(url), None))


@atexit.register
def _close_all() -> None:
    for conn in list(_connections.values()):
        close_quietly(conn)
    _connections.clear()
