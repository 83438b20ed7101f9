"""What a failure means, in one vocabulary that every caller reads.

An error is given one of five verdicts:

==============  ==============================================  =========  ========  =========
verdict         meaning                                         retried    restart   exit code
==============  ==============================================  =========  ========  =========
``LOST``        a service is gone for now: the connection was   yes        yes       3
                refused, reset or closed, the server ended the
                session while restarting, no broker is up
``REFUSED``     a service answered and refused who we are:      no         no        3
                credentials, access rights, a TLS handshake
``BAD_INPUT``   what eoskit was given is at fault: an option,   no         no        2
                a setting, a job file, a sink id, a plug-in
``PERMANENT``   anything else a restart cannot fix: a sink      no         no        1
                refused a write or a table, the protocol
                cannot proceed, offsets are gone
``RECOVERABLE`` a restart may fix it, and what an error nobody  no         yes       1
                classified gets (a lost executor, a timeout,
                a foreign library's error, a user's UDF)
==============  ==============================================  =========  ========  =========

"Retried" is the SQL sinks' reconnecting calls (``connectors/sql/sink.py``):
they try again on a new connection for ``LOST`` only. "Restart" is the
runtime's restart strategy (``runtime/job/failures.py``): a failure whose
verdict is not ``restartable`` ends the job at once, whatever the strategy;
the others go to it, as Flink treats every failure as recoverable unless it
is marked otherwise. The exit code is the CLI's (``runtime/cli/errors.py``).

Who says what:

- an error class of eoskit's own (or a plug-in's) declares its verdict once,
  with a class attribute ``verdict`` (``SinkError``: ``PERMANENT``,
  ``ServiceUnavailableError``: ``LOST``, ``KafkaAuthenticationError``:
  ``REFUSED``); a subclass inherits it or declares its own;
- :func:`verdict_of` reads it, and holds the rules for a class that does not
  say: any ``ConnectionError`` is ``LOST``; an eoskit ``ValueError`` is
  ``BAD_INPUT`` (``OptionError``, ``InvalidSinkIdError``, ``JobFileError``,
  ``UsageError``), a foreign one is not (a ``ValueError`` in a user's UDF is
  a failed job); everything else is ``RECOVERABLE``;
- a client library's errors cannot declare anything: the connector of that
  service sorts them into ``LOST`` and ``REFUSED`` by their codes
  (``connectors/<name>/failures.py``, asked through
  ``eoskit.connectors.failures.service_failure``).

The runtime sees what a task raised only as a type name and a line of text,
so the verdict is always the class's, never the instance's.

:func:`first_line` is the one line an error is reported by, everywhere.

Imports nothing but the standard library: the CLI's light verbs, the
connectors' classifiers and the twophase error classes all import it.
"""

from __future__ import annotations

from enum import Enum


class Verdict(Enum):
    """What a failure means; see the module's table."""

    #: A service is gone for now: a retry on a new connection, or a restart, may succeed.
    LOST = "lost"
    #: A service refused who we are: the same options are refused again.
    REFUSED = "refused"
    #: An option, setting, job file, argument or plug-in is at fault: the user must change it.
    BAD_INPUT = "bad input"
    #: Anything else a restart cannot fix; the message says what to do.
    PERMANENT = "permanent"
    #: A restart may fix it; also every error nobody classified.
    RECOVERABLE = "recoverable"

    @property
    def restartable(self) -> bool:
        """May restarting the query from its checkpoint fix it?"""
        return self in (Verdict.LOST, Verdict.RECOVERABLE)

    @property
    def about_a_service(self) -> bool:
        """Does it say a service is gone or refused us (rather than anything about the work)?"""
        return self in (Verdict.LOST, Verdict.REFUSED)


def verdict_of(error: BaseException | type[BaseException]) -> Verdict:
    """The verdict of an error or an error class: its class's declared
    ``verdict`` if it has one; else ``LOST`` for a ``ConnectionError``,
    ``BAD_INPUT`` for an eoskit ``ValueError`` and ``RECOVERABLE`` for
    anything else. Pure: runs wherever it is asked, imports nothing."""
    error_class = error if isinstance(error, type) else type(error)
    declared = getattr(error_class, "verdict", None)
    if isinstance(declared, Verdict):
        return declared
    if issubclass(error_class, ConnectionError):
        return Verdict.LOST
    if error_class.__module__.startswith("eoskit.") and issubclass(error_class, ValueError):
        return Verdict.BAD_INPUT
    return Verdict.RECOVERABLE


def first_line(error: BaseException | str) -> str:
    """The first non-blank line of an error's message (or of a text), stripped;
    an error with no message is named by its type."""
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__ if isinstance(error, BaseException) else ""
