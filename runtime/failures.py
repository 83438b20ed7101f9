"""What a failed query died of, and whether a restart can fix it.

Spark wraps an error raised in a Python data source or UDF in layers of
its own (``StreamingQueryException``, a Java stack, a Python traceback as
text). The cause a user needs is the innermost Python exception: eoskit's
``SinkError: table orders does not exist ...``, not "Writing job failed".

A restart from the checkpoint cannot fix a bad option, a missing table, an
orphaned transaction or a refused replay: those end the job at once. Anything
else (a service that did not answer, a lost executor, a timeout, an unknown
error) goes to the restart strategy, as Flink treats every failure as
recoverable unless it is marked otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Exception names a restart cannot fix (the last part of the qualified name).
PERMANENT = frozenset({
    "OptionError", "SettingError", "JobFileError", "SinkError", "OrphanedTransactions",
    "ReplayMismatch", "InvalidSinkId", "PluginError", "CoordinatorError", "ControlError",
    "AnalysisException", "SavepointError", "CheckpointError", "StateError",
})
#: Subclasses of a permanent one that are not.
TRANSIENT = frozenset({"ServiceUnavailable", "LostPreparedTransaction"})

_RAISED = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Transactions|Mismatch|"
                     r"Unavailable|SinkId|Exit)): (?P<message>.+)$")


@dataclass(frozen=True)
class Failure:
    type: str  # the exception's class name
    message: str  # its message: the cause, on one line
    permanent: bool

    def line(self) -> str:
        return f"{self.type}: {self.message}"


def classify(text: str) -> Failure:
    """The innermost Python exception in ``text`` (Spark's message, or a
    plain exception), preferring eoskit's own; else the first line."""
    found: list[tuple[str, str]] = []
    for raw in text.splitlines():
        match = _RAISED.match(raw.strip())
        if match:
            found.append((match["type"], match["message"].strip()))
    ours = [f for f in found if f[0].startswith("eoskit.")]
    if ours or found:
        qualified, message = (ours or found)[-1]
    else:
        qualified, message = "Error", (text.strip().splitlines() or ["unknown error"])[0]
    name = qualified.rsplit(".", 1)[-1]
    permanent = name in PERMANENT and name not in TRANSIENT
    return Failure(name, message, permanent)
