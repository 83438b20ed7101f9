"""Which psycopg errors mean PostgreSQL is gone for now, or refused us
(``eoskit.connectors.failures``).

A cached connection the server dropped (a restart, ``pg_terminate_backend``)
looks idle until it is used; the first statement on it fails with one of
these, and the sink's callers drop it and connect again
(``eoskit.connectors.sql.sink``).
"""

from __future__ import annotations

import psycopg

from eoskit.connectors.failures import ServiceFailure
from eoskit.twophase.verdicts import Verdict, first_line

#: SQLSTATEs of a session the server ended: administrator command (fast
#: shutdown, ``pg_terminate_backend``), crash of another backend, a server
#: starting up or shutting down, and the session's own time limits (idle in
#: a transaction, which the sink sets: ``sessionIdleTimeout``; idle).
SESSION_ENDED = frozenset({"57P01", "57P02", "57P03", "57P05", "25P03"})


def classify(exc: BaseException) -> ServiceFailure | None:
    """Connection failures carry no SQLSTATE (refused, reset, closed, timed
    out; psycopg reports a refused login while connecting so too) or one of
    class 08; a session the server ended says so with 57P01-57P03: ``LOST``.
    Class 28 (invalid authorization) on a live session: ``REFUSED``. Every
    other error (a statement refused, a lock timeout, a cancelled query) is
    an answer from a live server: None."""
    if isinstance(exc, psycopg.Error) and exc.sqlstate in SESSION_ENDED:
        return ServiceFailure(Verdict.LOST, first_line(exc))
    if not isinstance(exc, psycopg.OperationalError):
        return None
    state = exc.sqlstate
    if state is None or state.startswith("08") or state in SESSION_ENDED:
        return ServiceFailure(Verdict.LOST, first_line(exc))
    if state.startswith("28"):
        return ServiceFailure(Verdict.REFUSED, first_line(exc))
    return None


def lost(exc: BaseException) -> bool:
    """Did ``exc`` end the session, or come from trying to make one? What
    the sink's reconnecting calls retry (``eoskit.connectors.sql.sink``)."""
    failure = classify(exc)
    return failure is not None and failure.verdict is Verdict.LOST
