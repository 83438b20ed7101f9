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

A server restart or a ``KILL`` ends sessions under the sink's feet: a
cached session is pinged before it is handed out and replaced if dead, and
``eoskit.connectors.failures`` tells the errors of a lost session from the
server's answers (``mysql/failures.py``), so that the sink's callers can
connect again and retry where that is safe (``eoskit.connectors.sql.sink``).

Every session is pinned the same way, after PyMySQL's ``SET NAMES
utf8mb4`` (``init_command``): ``time_zone`` ``+00:00`` (Spark's timestamps
are UTC and are written as UTC, so a ``TIMESTAMP`` column stores the right
instant and a ``DATETIME`` column holds UTC), ``sql_mode`` without
``NO_BACKSLASH_ESCAPES`` and the lock-wait timeout of
``LOCK_WAIT_TIMEOUT_S``. Then ``connect`` reads the session back and refuses
it unless ``character_set_client`` and ``character_set_connection`` are
``utf8mb4`` and ``sql_mode`` lacks ``NO_BACKSLASH_ESCAPES``: the literals of
``literals.py`` are UTF-8 bytes escaped with backslashes, which is only
safe under exactly that. Read as GBK, BIG5, SJIS or CP932, the UTF-8 bytes
of a value such as ``縗'`` swallow the escaping backslash and the quote ends
the literal: the value's text runs as SQL. Nothing the server does at
login (``init_connect``, a default ``character_set_client``) can undo the
pin, because it comes later; the read-back proves it.

The URL's query keys (``?ssl_ca=...``) are PyMySQL arguments, so they are
checked against an allow-list of keys that cannot change how the server
reads statement text (``check_url``); ``charset``, ``init_command``,
``sql_mode``, ``read_default_file`` and the rest are refused by name.
"""

from __future__ import annotations

import atexit
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

import pymysql
from pymysql.constants import SERVER_STATUS
from sqlalchemy.engine import URL

from eoskit.core.options import OptionError, parse_bool
from eoskit.connectors.sql.network import SessionLimits
from eoskit.connectors.sql.sink import safe
from eoskit.twophase.contract import SinkError

#: How long a statement waits for a row lock before failing: a longer wait
#: is two tasks of one batch writing the same key (see transactions.py).
LOCK_WAIT_TIMEOUT_S = 60
#: The only character set the sink's statements are written in.
CHARSET = "utf8mb4"

_SESSION_SETUP = (
    "SET time_zone = '+00:00', "
    f"innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT_S}, "
    "sql_mode = TRIM(BOTH ',' FROM REPLACE(CONCAT(',', @@sql_mode, ','), "
    "',NO_BACKSLASH_ESCAPES,', ','))"
)
_SESSION_CHECK = "SELECT @@character_set_client, @@character_set_connection, @@sql_mode"


def _seconds(text: str) -> float:
    """Messages name no value: some query values are secrets."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 31_536_000:
        raise ValueError("expected a number of seconds above 0")
    return value


def _port(text: str) -> int:
    value = int(text) if text.strip().isdigit() else 0
    if not 0 < value < 65_536:
        raise ValueError("expected a TCP port")
    return value


#: URL query keys passed to PyMySQL, with their types: where and how to
#: connect, never what the session does with the text it is sent.
URL_KEYS: Mapping[str, Callable[[str], Any]] = {
    "port": _port,
    "unix_socket": str,
    "bind_address": str,
    "program_name": str,
    "connect_timeout": _seconds,
    "read_timeout": _seconds,
    "write_timeout": _seconds,
    "ssl_ca": str,
    "ssl_cert": str,
    "ssl_key": str,
    "ssl_key_password": str,
    "ssl_verify_cert": parse_bool,
    "ssl_verify_identity": parse_bool,
    "ssl_disabled": parse_bool,
}

_CHARSET_WHY = ("the sink pins the session's character set to utf8mb4 (charset=utf8mb4 is "
                "accepted, any other is not): its statements are UTF-8, and read in another "
                "character set (gbk, big5, sjis, ...) a value's bytes can swallow an escaping "
                "backslash and end its own literal")
#: Why the PyMySQL arguments a URL could name are refused.
REFUSED_URL_KEYS: Mapping[str, str] = {
    "charset": _CHARSET_WHY,
    "collation": _CHARSET_WHY,
    "init_command": "the sink sets every session up itself (time_zone, sql_mode, lock wait)",
    "sql_mode": "the sink's literals need backslash escapes, so it keeps the server's "
                "sql_mode minus NO_BACKSLASH_ESCAPES",
    "read_default_file": "an option file can set the character set, host and user "
                         "behind the URL's back",
    "read_default_group": "an option file can set the character set, host and user "
                          "behind the URL's back",
    "autocommit": "the sink runs its transactions itself",
    "local_infile": "it would let the server read the client's files",
    "client_flag": "client flags can turn on multi-statements and LOCAL INFILE",
    "defer_connect": "the session setup would never run",
    "use_unicode": "the sink reads text results as str",
    "binary_prefix": "the sink writes bytes as hex literals",
    "conv": "converters are not a URL setting",
    "cursorclass": "cursor classes are not a URL setting",
    "auth_plugin_map": "plugin maps are not a URL setting",
    "server_public_key": "a key is not a URL setting",
    "ssl": "give ssl_ca, ssl_cert, ssl_key, ... instead",
    "max_allowed_packet": "it only limits LOCAL INFILE, which the sink never uses",
    **dict.fromkeys(("host", "user", "password", "passwd", "database", "db"),
                    "give it in the URL itself (user:password@host:port/database)"),
    "compress": "PyMySQL does not support it",
    "named_pipe": "PyMySQL does not support it",
}


def _url_options(url: URL) -> dict[str, Any]:
    """The URL's query keys, each checked and typed (see ``check_url``)."""
    options: dict[str, Any] = {}
    for key, value in url.query.items():
        if key == "charset" and isinstance(value, str) and value.strip().lower() == CHARSET:
            continue  # what SQLAlchemy's docs write in MySQL URLs, and the pin anyway
        if key not in URL_KEYS:
            why = REFUSED_URL_KEYS.get(key)
            reason = f": {why}" if why else (
                "; the sink accepts " + ", ".join(sorted(URL_KEYS)))
            raise OptionError(f"option 'url': the MySQL sink refuses the query key {key!r}{reason}")
        if not isinstance(value, str):
            raise OptionError(f"option 'url': the query key {key!r} is given more than once")
        try:
            options[key] = URL_KEYS[key](value)
        except (ValueError, TypeError) as exc:
            raise OptionError(
                f"option 'url': the query key {key!r} has a bad value ({exc})") from None
    return options


def check_url(url: URL) -> None:
    """Refuse (``OptionError``, naming the query key, never its value or the
    URL) any query key outside ``URL_KEYS`` but ``charset=utf8mb4``, the
    pinned character set itself: a key such as ``charset``,
    ``init_command`` or ``read_default_file`` could make the server read the
    sink's literals in a way they were not escaped for."""
    _url_options(url)


#: What no URL can change, in every session of the sink (see the module doc).
_PINNED: Mapping[str, Any] = {
    "charset": CHARSET, "collation": None, "sql_mode": None, "init_command": _SESSION_SETUP,
    "read_default_file": None, "read_default_group": None, "local_infile": False,
    "defer_connect": False, "use_unicode": True, "binary_prefix": False,
}

_connections: dict[str, pymysql.connections.Connection] = {}

def connect_kwargs(url: URL) -> dict[str, Any]:
    """PyMySQL's arguments for a SQLAlchemy URL: its host, port, user,
    password and database, and its query keys once ``check_url`` accepts
    them (typed: ``?ssl_disabled=false`` is False, not a true string)."""
    kwargs: dict[str, Any] = {
        "host": url.host or "localhost", "port": url.port or 3306,
        "user": url.username, "password": url.password or "", "database": url.database,
    }
    kwargs.update(_url_options(url))
    return {k: v for k, v in kwargs.items() if v is not None}


def engine_connect_args(url: URL) -> dict[str, Any]:
    """``connect_args`` for a SQLAlchemy engine on ``url``: the URL checked,
    its query keys typed (SQLAlchemy passes ``?ssl_disabled=false`` on as a
    true string) and the session pinned as the sink's own sessions are.
    SQLAlchemy's statements bind values through PyMySQL's escaping, which
    follows the session's character set and sql_mode, so the read-back of
    ``connect`` is not needed there."""
    return {**_url_options(url), **_PINNED}


def verify_session(conn: pymysql.connections.Connection, url: URL) -> None:
    """Refuse a session whose server would read the sink's literals in
    another way than they are written (see the module doc)."""
    with conn.cursor() as cursor:
        cursor.execute(_SESSION_CHECK)
        client, connection, sql_mode = (str(v) for v in cursor.fetchone())
    wrong = [f"{name} is {value!r}" for name, value in
             (("character_set_client", client), ("character_set_connection", connection))
             if value.lower() != CHARSET]
    if "NO_BACKSLASH_ESCAPES" in sql_mode.upper().split(","):
        wrong.append("sql_mode has NO_BACKSLASH_ESCAPES")
    if wrong:
        raise SinkError(
            f"MySQL at {safe(url)}: the session eoskit set up to utf8mb4 without "
            f"NO_BACKSLASH_ESCAPES has {' and '.join(wrong)}; the sink writes nothing "
            "through a session that could read its values as SQL. Something on the "
            "server changes the session after login: look at its init_connect and triggers"
        )


def connect(url: URL, limits: SessionLimits = SessionLimits()) -> pymysql.connections.Connection:
    """A new autocommit session, pinned and verified (see the module doc),
    within the network bounds of ``limits`` (``apply_limits``)."""
    kwargs = {"connect_timeout": limits.connect, **connect_kwargs(url), **_PINNED,
              "autocommit": True, "client_flag": 0}
    conn = pymysql.connect(**kwargs)
    try:
        apply_limits(conn, limits)
        verify_session(conn, url)
    except BaseException:
        close_quietly(conn)
        raise
    return conn


def apply_limits(conn: pymysql.connections.Connection, limits: SessionLimits) -> None:
    """The network bounds of ``connectors/sql/network.py`` on a new session:
    TCP keepalives and ``TCP_USER_TIMEOUT`` on its socket (PyMySQL has no
    option for them), so that a reply that cannot come fails the call within
    ``limits.network`` seconds; and the session's ``wait_timeout``, the
    server's only per-session reaper of a client that vanished between
    statements (MySQL and MariaDB have no per-session keepalives), with
    ``net_read_timeout`` and ``net_write_timeout`` for one that vanished
    inside a statement."""
    sock = conn._sock  # noqa: SLF001 - PyMySQL's socket, the only handle on it
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        idle, interval, count = limits.keepalive()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count),
                            ("TCP_USER_TIMEOUT", limits.network * 1000)):
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    with conn.cursor() as cursor:
        # The server's side: a client idle that long is ended, and one that
        # stops sending or taking a statement's packets midway after networkTimeout.
        cursor.execute("SET SESSION wait_timeout = %s, net_read_timeout = %s, net_write_timeout = %s",
                       (limits.idle, limits.network, limits.network))


def _key(url: URL, limits: SessionLimits) -> str:
    return f"{url.render_as_string(hide_password=False)} {limits}"


#: A cached session idle longer than this is pinged before it is handed out
#: (a server restart or a KILL while it sat idle); a session used a moment
#: ago is not: the call itself finds out, and every caller that repeats a
#: call over a lost session (``sql/sink.py``'s ``reconnecting``) does so.
PING_AFTER_IDLE_S = 2.0
_handed_out: dict[str, float] = {}


def _usable(conn: pymysql.connections.Connection, idle_s: float) -> bool:
    """Open, alive and not inside a transaction someone left behind."""
    if not conn.open or conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS:
        return False
    if idle_s < PING_AFTER_IDLE_S:
        return True
    try:
        conn.ping(reconnect=False)  # a reconnect would lose the session setup
    except pymysql.MySQLError:
        return False
    return True


def cached_connection(url: URL, limits: SessionLimits = SessionLimits()) -> pymysql.connections.Connection:
    """This process's idle autocommit session for ``url``; a broken one is
    replaced. Never use it for an XA transaction (see the module doc)."""
    key, now = _key(url, limits), time.monotonic()
    conn = _connections.get(key)
    if conn is not None and not _usable(conn, now - _handed_out.get(key, 0.0)):
        drop_connection(url, limits)
        conn = None
    if conn is None:
        conn = connect(url, limits)
        _connections[key] = conn
    _handed_out[key] = now
    return conn


def close_quietly(conn: pymysql.connections.Connection | None) -> None:
    if conn is None:
        return
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a broken socket
        pass


def drop_connection(url: URL, limits: SessionLimits = SessionLimits()) -> None:
    close_quietly(_connections.pop(_key(url, limits), None))


@atexit.register
def _close_all() -> None:
    for conn in list(_connections.values()):
        close_quietly(conn)
    _connections.clear()
