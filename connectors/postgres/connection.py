"""psycopg connections from a SQLAlchemy URL, one per process and URL.

Every session speaks UTF-8 (``client_encoding`` is pinned): the sink sends
Arrow's UTF-8 text in COPY data, and a URL key such as
``client_encoding=LATIN1`` (or ``options=-c client_encoding=...``) would
make the server read those bytes as another encoding and store other
characters without an error. Such keys are refused (``check_url``).

Executors reuse their connection across tasks and batches (a prepared
transaction frees the session at once), so a micro-batch costs no connect.
A cached connection the server dropped (a restart, ``pg_terminate_backend``)
looks idle until it is used; the first statement on it fails, which
``eoskit.connectors.failures`` calls lost (``postgres/failures.py``), and
the sink's callers drop it and connect again (``eoskit.connectors.sql.sink``).
"""

from __future__ import annotations

import atexit
from typing import Any

import psycopg
from sqlalchemy.engine import URL

from eoskit.connectors.sql.network import SessionLimits
from eoskit.core.options import OptionError

#: The session's encoding, which no URL key changes.
CLIENT_ENCODING = "UTF8"

_connections: dict[str, psycopg.Connection] = {}

def check_url(url: URL) -> None:
    """Refuse (``OptionError``, naming the key, never the URL) a query key
    that sets another client encoding than UTF-8, directly or in
    ``options``."""
    for key, value in url.query.items():
        values = value if isinstance(value, tuple) else (value,)
        if key == "client_encoding" and any(
                v.replace("-", "").replace("_", "").upper() not in ("UTF8", "UNICODE") for v in values):
            raise OptionError("option 'url': the PostgreSQL sink refuses the query key "
                              "'client_encoding' unless it is UTF8: the sink sends UTF-8 text, "
                              "which the server would read as another encoding")
        if key == "options" and any("client_encoding" in v for v in values):
            raise OptionError("option 'url': the PostgreSQL sink refuses 'client_encoding' in "
                              "the query key 'options': the sink's sessions speak UTF-8")


def with_limits(url: URL, limits: SessionLimits) -> URL:
    """``url`` with the network bounds of ``connectors/sql/network.py`` as
    libpq's keys (a key the URL gives wins): ``connect_timeout``, client
    keepalives and ``tcp_user_timeout``; and, through ``options``, the
    server's per-session keepalives (a client gone quiet) and
    ``tcp_user_timeout`` (a client that stopped acknowledging what the server
    sends: keepalives wait while data is unacknowledged), and
    ``idle_in_transaction_session_timeout`` (each only where the URL's
    ``options`` does not set it already)."""
    idle, interval, count = limits.keepalive()
    client = {"connect_timeout": limits.connect, "keepalives": 1, "keepalives_idle": idle,
              "keepalives_interval": interval, "keepalives_count": count,
              "tcp_user_timeout": limits.network * 1000}
    given = url.query.get("options") or ""
    given = given if isinstance(given, str) else " ".join(given)
    server = {"tcp_keepalives_idle": idle, "tcp_keepalives_interval": interval,
              "tcp_keepalives_count": count, "tcp_user_timeout": limits.network * 1000,
              "idle_in_transaction_session_timeout": limits.idle * 1000}
    options = " ".join([given, *(f"-c {k}={v}" for k, v in server.items() if k not in given)]).strip()
    return url.update_query_dict({**{k: str(v) for k, v in client.items() if k not in url.query},
                                  "options": options})


def connect_kwargs(url: URL) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "host": url.host, "port": url.port, "user": url.username,
        "password": url.password, "dbname": url.database,
    }
    kwargs.update({k: v for k, v in url.query.items() if isinstance(v, str)})
    kwargs["client_encoding"] = CLIENT_ENCODING
    return {k: v for k, v in kwargs.items() if v is not None}


def cached_connection(url: URL, limits: SessionLimits = SessionLimits()) -> psycopg.Connection:
    """An idle autocommit connection, its network bounds set (``with_limits``);
    a broken one is replaced."""
    key = _key(url, limits)
    conn = _connections.get(key)
    if conn is not None and (conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE):
        drop_connection(url, limits)
        conn = None
    if conn is None:
        conn = psycopg.connect(**connect_kwargs(with_limits(url, limits)), autocommit=True)
        _connections[key] = conn
    return conn


def _key(url: URL, limits: SessionLimits) -> str:
    return f"{url.render_as_string(hide_password=False)} {limits}"


def drop_connection(url: URL, limits: SessionLimits = SessionLimits()) -> None:
    conn = _connections.pop(_key(url, limits), None)
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
