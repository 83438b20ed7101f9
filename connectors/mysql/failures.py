"""Which PyMySQL errors mean MySQL or MariaDB is gone for now, or refused
us (``eoskit.connectors.failures``).

A server restart or a ``KILL`` ends sessions under the sink's feet; these
verdicts tell the errors of a lost session from the server's answers, so
that the sink's callers can connect again and retry where that is safe
(``eoskit.connectors.sql.sink``).
"""

from __future__ import annotations

import pymysql

from eoskit.connectors.failures import ServiceFailure
from eoskit.twophase.verdicts import Verdict, first_line

#: Error numbers of a session that is gone or could not be made: the
#: client's own (2002 no socket, 2003 cannot connect, 2005 unknown host,
#: 2006 gone away, 2013 lost during a query, 2055 lost at a system call) and
#: the server's when it ends a session (1053 shutting down, 1927 MariaDB's
#: connection killed, 4031 MySQL's idle client disconnected).
LOST_CONNECTION = frozenset({2002, 2003, 2005, 2006, 2013, 2055, 1053, 1927, 4031})
#: Access denied: to a database (1044), for a user and password (1045), for
#: a user without a password where the server wants one (1698); the TLS
#: handshake failed (2026).
REFUSED = frozenset({1044, 1045, 1698, 2026})


def classify(exc: BaseException) -> ServiceFailure | None:
    """PyMySQL raises ``InterfaceError`` for a session it already closed
    after a lost connection: ``LOST``, like the numbers of
    ``LOST_CONNECTION``; ``REFUSED`` for those of ``REFUSED``. Every other
    error is the server's answer to a statement: None."""
    if isinstance(exc, pymysql.err.InterfaceError):
        return ServiceFailure(Verdict.LOST, _message(exc))
    if not isinstance(exc, pymysql.err.OperationalError) or not exc.args:
        return None
    code = exc.args[0]
    if code in LOST_CONNECTION:
        return ServiceFailure(Verdict.LOST, _message(exc))
    if code in REFUSED:
        return ServiceFailure(Verdict.REFUSED, _message(exc))
    return None


def _message(exc: pymysql.MySQLError) -> str:
    """PyMySQL's errors are ``(number, message)``; the message alone, or the type's name."""
    if len(exc.args) > 1 and str(exc.args[1]).strip():
        return first_line(str(exc.args[1]))
    return first_line(exc) if str(exc).strip() not in ("", "(0, '')") else type(exc).__name__


def lost(exc: BaseException) -> bool:
    """Did ``exc`` end the session, or come from trying to make one? What
    the sink's reconnecting calls retry (``eoskit.connectors.sql.sink``)."""
    failure = classify(exc)
    return failure is not None and failure.verdict is Verdict.LOST
