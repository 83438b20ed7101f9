"""Whether a restart can fix what a failed query died of.

The cause itself is the innermost Python error in Spark's chain, or else the
innermost JVM message (``spark_errors.root_cause``). A restart from the
checkpoint cannot fix a bad option, a missing table, an orphaned
transaction or a refused replay: those end the job at once. Anything else (a
service that did not answer, a lost executor, a timeout, an error nobody
classified) goes to the restart strategy, as Flink treats every failure as
recoverable unless it is marked otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from eoskit.runtime.spark_errors import root_cause

#: Exception names a restart cannot fix (the last part of the qualified name).
PERMANENT = frozenset({
    "OptionError", "SettingError", "JobFileError", "SinkError", "OrphanedTransactions",
    "ReplayMismatch", "InvalidSinkId", "PluginError", "CoordinatorError", "ControlError",
    "SavepointError", "CheckpointError",
    # Kafka refused the credentials (or the TLS handshake failed): the same
    # options will be refused again.
    "AuthenticationFailed",
})
#: Subclasses of a permanent one that a restart may fix.
TRANSIENT = frozenset({"ServiceUnavailable", "LostPreparedTransaction"})


@dataclass(frozen=True)
class Failure:
    message: str  # the cause, on one line
    type: str | None  # its Python type, qualified; None for a JVM error
    permanent: bool

    def line(self) -> str:
        return self.message


def classify(error: BaseException | str) -> Failure:
    cause = root_cause(Exception(error) if isinstance(error, str) else error)
    name = (cause.type or "").rsplit(".", 1)[-1]
    return Failure(str(cause), cause.type, name in PERMANENT and name not in TRANSIENT)
