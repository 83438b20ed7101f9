"""Whether a restart can fix what a failed query died of.

The cause itself is the innermost Python error in Spark's chain, or else the
innermost JVM message (``spark_errors.root_cause``). What a task raised
reaches the driver as text, a type name and a line, so the verdict is the
error class's own: eoskit's errors declare ``transient`` (a class
attribute: may a restart fix it?). A bad option, a missing table, an
orphaned transaction, a refused replay, refused credentials say False and
end the job at once; a service that did not answer (``ServiceUnavailableError``,
raised by the sinks when ``eoskit.connectors.failures`` calls a service
lost) says True. An eoskit ``ValueError`` that does not say is bad input
(False). Anything else (a lost executor, a timeout, a foreign error, an
error nobody classified) goes to the restart strategy, as Flink treats
every failure as recoverable unless it is marked otherwise.

A class is looked up by its name only in eoskit's own modules and in
modules the driver has already imported: a plug-in's error raised in an
executor is restartable unless its module is loaded here too.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from eoskit.runtime.spark_errors import root_cause


@dataclass(frozen=True)
class Failure:
    message: str  # the cause, on one line
    type: str | None  # its Python type, qualified; None for a JVM error
    permanent: bool

    def line(self) -> str:
        return self.message


def _error_class(qualified: str) -> type | None:
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


def transient(error_class: type) -> bool:
    """May a restart fix an error of this class? Its ``transient`` if it
    declares one; else False for eoskit's bad input (a ``ValueError``) and
    True for everything else."""
    declared = getattr(error_class, "transient", None)
    if isinstance(declared, bool):
        return declared
    return not (error_class.__module__.startswith("eoskit.") and issubclass(error_class, ValueError))


def classify(error: BaseException | str) -> Failure:
    cause = root_cause(Exception(error) if isinstance(error, str) else error)
    found = _error_class(cause.type) if cause.type else None
    return Failure(str(cause), cause.type, found is not None and not transient(found))
