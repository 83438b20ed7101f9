"""How long the SQL sinks wait on the network, declared once, and what each
bound becomes on a session.

Every call a SQL sink makes has a bounded time, on a live link and on a
dead one:

- ``connectTimeout``: opening a session.
- ``networkTimeout``: how long a cut link, a vanished server or a vanished
  client goes unnoticed on an open session, *on both sides*. The client
  sends TCP keepalives and gives unacknowledged data that long
  (``TCP_USER_TIMEOUT``), so a statement whose reply never comes fails
  instead of waiting forever; PostgreSQL's server is asked, per session, for
  keepalives and a TCP user timeout of its own, and MySQL's for
  ``net_read_timeout`` / ``net_write_timeout``, so a session whose client
  vanished behind a partition (a job's host gone while it was inside
  ``COPY``) is ended with its locks, instead of after the operating
  system's two hours (or fifteen minutes of retransmissions). A
  statement that runs long on a live link is not cut: keepalives are
  answered by the peer's kernel (``queryTimeout`` bounds statements).
- ``sessionIdleTimeout``: how long the server keeps a session of the sink
  idle inside a transaction (PostgreSQL's
  ``idle_in_transaction_session_timeout``) or idle at all (MySQL's and
  MariaDB's ``wait_timeout``, their only per-session reaper of a client
  that vanished between statements). A prepared transaction survives its
  session: only unprepared work, which the protocol redoes, is lost.
- ``reconnectWithin``: how long the driver's calls (commit, roll back and
  list by id) keep trying to reach a database that went away, before the
  batch fails (and the job's restart strategy takes over).

Each dialect turns ``SessionLimits`` into what its driver and server take
(``postgres/connection.py``, ``mysql/connection.py``); a key the URL
already gives wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping

from eoskit.core.options import Option, parse_positive_int

CONNECT_TIMEOUT = Option(
    "connectTimeout", parse_positive_int, 10,
    "Seconds to wait for a new session to the database.")
NETWORK_TIMEOUT = Option(
    "networkTimeout", parse_positive_int, 30,
    "Seconds a cut link or a vanished peer may go unnoticed on an open session, on both "
    "sides: the sink's TCP keepalives and TCP user timeout fail a statement whose reply "
    "cannot come, and PostgreSQL's server is asked, per session, for keepalives that end "
    "a session whose client vanished (with its locks). A statement that runs long on a "
    "live link is not cut (see `queryTimeout`).")
SESSION_IDLE_TIMEOUT = Option(
    "sessionIdleTimeout", parse_positive_int, 300,
    "Seconds the server keeps one of the sink's sessions idle inside a transaction "
    "(PostgreSQL's `idle_in_transaction_session_timeout`) or idle at all (MySQL's and "
    "MariaDB's `wait_timeout`) before ending it: the bound on how long a vanished task "
    "holds its locks where keepalives cannot reach. Prepared transactions survive it.")
RECONNECT_WITHIN = Option(
    "reconnectWithin", parse_positive_int, 60,
    "Seconds the driver's commit, rollback and listing of prepared transactions keep "
    "trying to reach a database that went away (a restart, a partition) before the batch "
    "fails and the job's restart strategy takes over.")

OPTIONS = (CONNECT_TIMEOUT, NETWORK_TIMEOUT, SESSION_IDLE_TIMEOUT, RECONNECT_WITHIN)


@dataclass(frozen=True)
class SessionLimits:
    """The network bounds of one sink's sessions, in seconds."""

    connect: int = CONNECT_TIMEOUT.default or 10
    network: int = NETWORK_TIMEOUT.default or 30
    idle: int = SESSION_IDLE_TIMEOUT.default or 300
    reconnect: int = RECONNECT_WITHIN.default or 60

    @classmethod
    def read(cls, raw: Mapping[str, str]) -> "SessionLimits":
        return cls(CONNECT_TIMEOUT.read(raw), NETWORK_TIMEOUT.read(raw),
                   SESSION_IDLE_TIMEOUT.read(raw), RECONNECT_WITHIN.read(raw))

    def keepalive(self) -> tuple[int, int, int]:
        """(idle, interval, count) of TCP keepalives that notice a dead peer
        within ``network`` seconds: a third of it idle, then three probes."""
        idle = max(1, self.network // 3)
        interval = max(1, (self.network - idle) // 3)
        return idle, interval, 3
