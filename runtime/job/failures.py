"""Whether a restart can fix what a failed query died of.

The cause itself is the innermost Python error in Spark's chain, or else the
innermost JVM message (``spark_errors.root_cause``). What a task raised
reaches the driver as text, a type name and a line, so the verdict is the
error class's own (``eoskit.twophase.verdicts.verdict_of``), and only a
restartable one goes to the restart strategy: a bad option, a missing
table, an orphaned transaction, a refused replay, refused credentials
(``BAD_INPUT``, ``PERMANENT``, ``REFUSED``) end the job at once; a service
that did not answer (``LOST``: ``ServiceUnavailableError``, raised by the
sinks when ``eoskit.connectors.failures`` calls a service lost), a lost
executor, a timeout, a foreign error or an error nobody classified
(``RECOVERABLE``) go to the restart strategy, as Flink treats every failure
as recoverable unless it is marked otherwise.

A class is looked up by its name only in eoskit's own modules and in
modules the driver has already imported: a plug-in's error raised in an
executor is ``RECOVERABLE`` unless its module is loaded here too.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from eoskit.runtime.spark.errors import root_cause
from eoskit.twophase.verdicts import Verdict, verdict_of


@dataclass(frozen=True)
class Failure:
    message: str  # the cause, on one line
    type: str | None  # its Python type, qualified; None for a JVM error
    #: What the cause means (its class's verdict); ``RECOVERABLE`` when its class is unknown here.
    verdict: Verdict = Verdict.RECOVERABLE

    @property
    def permanent(self) -> bool:
        """A restart cannot fix it: the job ends at once, whatever the restart strategy."""
        return not self.verdict.restartable

    def line(self) -> str:
        return self.message


def error_class(qualified: str) -> type[BaseException] | None:
    """The error class named ``module.Name``, if eoskit's own (imported to
    ask) or in a module this process has already imported; else None."""
    module, _, name = qualified.rpartition(".")
    if not module:
        return None
    if module not in sys.modules:
        if not module.startswith("eoskit."):
            return None
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - an unknown type is restartable
            return None
    found = getattr(sys.modules[module], name, None)
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def classify(error: BaseException | str) -> Failure:
    """The root cause of ``error`` (a Spark error or its text) and its verdict."""
    cause = root_cause(Exception(error) if isinstance(error, str) else error)
    found = error_class(cause.type) if cause.type else None
    return Failure(str(cause), cause.type, Verdict.RECOVERABLE if found is None else verdict_of(found))
