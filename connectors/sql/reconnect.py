"""Riding out a lost database connection, for both SQL sinks: trying a
call again on a new connection, for a bounded time, remembering whether a
lost try may have taken effect.

Where it is used, and why repeating is safe there:

- on the driver, the committer's calls (``SqlCommitter``: commit, roll back,
  list prepared ids, read an outcome): a database restart between the
  decision and ``COMMIT PREPARED`` / ``XA COMMIT`` delays the commit instead
  of failing the batch;
- on executors, opening a task's transaction (``SqlWriter._open``): nothing
  of it exists until the server has answered, and the server rolls back an
  unprepared transaction whose session is gone, so a lost try leaves
  nothing behind.

Never around a task's writes or its prepare: what a lost connection did to
those is the protocol's business (the task fails, Spark retries it with a
new attempt id, and the retry or the next sweep rolls back whatever the
lost attempt prepared).

The one subtle case is a statement whose connection drops after it was
sent and before the reply: it may have been applied. A call wraps the
statement in ``attempt.sending()``, so that the next try knows
(``Attempt.maybe_applied``) and the committer settles the outcome from
evidence (``sql/committer.py``).

Which errors mean "the connection is lost" is each driver's own business:
each sink passes its classifier (``lost`` in its ``failures.py``).
Anything else is raised at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from eoskit.connectors.sql.network import RECONNECT_WITHIN
from eoskit.twophase.contract import ServiceUnavailableError
from eoskit.twophase.verdicts import first_line

T = TypeVar("T")

log = logging.getLogger(__name__)

#: How long a call keeps trying to get a connection back by default (the
#: sink's option ``reconnectWithin``): long enough for a database restart
#: (seconds to tens of seconds), short enough that a database that stays
#: away fails the batch while someone is looking.
RECONNECT_WITHIN_S = float(RECONNECT_WITHIN.default or 60)
#: Backoff between tries: doubling from the first to the last, then flat.
FIRST_DELAY_S = 0.1
MAX_DELAY_S = 2.0

#: Servers this process has talked to: only a connection that was working
#: is waited for. A server that never answered (a wrong address, a database
#: that is down when a command starts) fails at once, unless the caller
#: knows it answered another process of the same job (``reached``): a
#: running query's start-up check reached it, and a Python worker the query
#: starts while the server restarts (a task's, the commit's) must wait too.
_reached: set[str] = set()


class ConnectionLostError(ServiceUnavailableError):
    """The database could not be reached (again within ``RECONNECT_WITHIN_S``)."""


class Attempt:
    """What one try of a call knows about the tries before it."""

    def __init__(self, lost: Callable[[BaseException], bool]) -> None:
        self._lost = lost
        #: How many tries failed on a lost connection before this one.
        self.retries = 0
        #: An earlier try lost its connection while its statement was on
        #: the wire (inside ``sending``): the statement may have taken effect.
        self.maybe_applied = False

    @contextmanager
    def sending(self) -> Iterator[None]:
        """Wrap the statement whose effect matters: if the connection is
        lost inside, the statement counts as maybe applied from then on."""
        try:
            yield
        except BaseException as exc:
            if self._lost(exc):
                self.maybe_applied = True
            raise


def reconnecting(
    action: Callable[[Attempt], T],
    *,
    lost: Callable[[BaseException], bool],
    drop: Callable[[], None],
    what: str,
    server: str | None = None,
    reached: bool = False,
    within: float = RECONNECT_WITHIN_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``action(attempt)``, tried again after each error that ``lost``
    calls a lost connection, for ``within`` seconds, if this process has
    reached ``server`` before or ``reached`` says another process of the job
    did. ``drop`` forgets the process's cached
    connection before each new try, so that the action's next "get the
    cached connection" connects anew. ``what`` names the call (with the
    server, never a password) for the log and the final error."""
    attempt = Attempt(lost)
    deadline = clock() + within
    delay = FIRST_DELAY_S
    server = server or what
    while True:
        try:
            result = action(attempt)
            _reached.add(server)
            return result
        except Exception as exc:
            if not lost(exc):
                raise
            drop()
            if not reached and server not in _reached:
                raise ConnectionLostError(f"{what}: cannot reach the database ({first_line(exc)})") from exc
            now = clock()
            if now >= deadline:
                raise ConnectionLostError(
                    f"{what}: the connection to the database was lost and no new one could be "
                    f"made within {within:.0f} s (last error: {first_line(exc)}). Nothing is "
                    "lost: once the database is reachable from this host again, start the job "
                    "again and its next batch settles what is in doubt (the option "
                    "reconnectWithin waits longer)"
                ) from None
            if attempt.retries == 0:
                log.warning("%s: connection lost (%s); reconnecting for up to %.0f s",
                            what, first_line(exc), within)
            attempt.retries += 1
            sleep(min(delay, max(0.0, deadline - now)))
            delay = min(delay * 2, MAX_DELAY_S)
