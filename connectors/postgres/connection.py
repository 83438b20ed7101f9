"""psycopg connections from a SQLAlchemy URL, one per process and URL.

Executors reuse their connection across tasks and batches (a prepared
transaction frees the session at once), so a micro-batch costs no connect.
"""

from __future__ import annotations

import atexit
from typing import Any

import psycopg
from sqlalchemy.engine import URL

_connections: dict[str, psycopg.Connection] = {}


def connect_kwargs(url: URL) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "host": url.host, "port": url.port, "user": url.username,
        "password": url.password, "dbname": url.database,
    }
    kwargs.update({k: v for k, v in url.query.items() if isinstance(v, str)})
    return {k: v for k, v in kwargs.items() if v is not None}


def cached_connection(url: URL) -> psycopg.Connection:
    """An idle autocommit connection; a broken one is replaced."""
    key = url.render_as_string(hide_password=False)
    conn = _connections.get(key)
    if conn is not None and (conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE):
        drop_connection(url)
        conn = None
    if conn is None:
        conn = psycopg.connect(**connect_kwargs(url), autocommit=True)
        _connections[key] = conn
    return conn


def drop_connection(url: URL) -> None:
    conn = _connections.pop(url.render_as_string(hide_password=False), None)
    if conn is not None:
        try:
            conn.close()
        except psycopg.Error:
            pass


@atexit.register
def _close_all() -> None:
    for conn in list(_connections.values()):
        try:
            conn.close()
        except psycopg.Error:
            pass
    _connections.clear()
