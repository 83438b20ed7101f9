"""The contracts a sink plug-in implements, one per commit capability.

A sink has three roles, as Flink's Sink V2 splits them:

- the declaration (``Sink``), checked on the driver before data moves: where
  it writes, what it refuses, what it creates;
- a writer per task attempt (``TaskWriter`` and its kinds), on an executor:
  it writes a task's Arrow batches and ends them by the capability's rule;
- for two-phase sinks, a committer (``Committer``), on the driver: it ends
  prepared transactions by id and lists those in doubt. What travels from
  writer to committer is typed: the task's ack (``twophase/messages.py``)
  carries the transaction id and the writer's evidence.

The capabilities, one per commit mode:

- ``TwoPhaseCommitting``: a task prepares its transaction; the driver's
  committer commits or rolls it back by id once the batch is decided
  (commit mode ``twophase``; PostgreSQL, MySQL/MariaDB, files).
- ``MarkedCommitting``: a task commits its own transaction, and inside that
  same atomic commit records a progress marker (sink id, batch, partition);
  a replayed task finds its marker and writes nothing (commit mode
  ``idempotent``; Kafka, and the SQL sinks where prepared transactions are
  not allowed). Its driver side is bookkeeping, two optional hooks on the
  declaration, not a committer: the rows are committed by then.
- ``DirectCommitting``: a task commits by itself, nothing more (commit mode
  ``at_least_once``).

A two-phase sink's committer may also prove outcomes (``ProvesOutcomes``):
tell, once a transaction is no longer prepared, whether it committed. A
commit whose reply was lost (a timeout, a connection cut with the statement
on the wire) may have committed, and its retry hears "no such transaction";
with this capability the coordinator settles that from evidence, never a
guess.

A two-phase sink's writer may also keep operator state
(``KeepsOperatorState``): per-instance state across batches (part counters,
sequence numbers, dedup windows), checkpointed in the batch's decision and
handed to the next batch's writers, as Flink's list and union state.

A sink implements the capabilities of the modes it supports and nothing
else; ``commit_modes`` derives the allowed ``commitMode`` values from them.
There is no method that raises NotImplementedError. No two capabilities
share a method name: a sink has several of them at once, and a shared name
with different arguments would resolve to one of them for both callers.

Where things run: eoskit pickles the sink to executors (the ``begin_*``
methods and the writers they return run there, once per task attempt) and to
the driver's planning and commit processes (``check``, ``committer()`` and
the marked hooks). Everything a method needs must therefore be in the
sink's own attributes (built from the data source options); connections are
opened lazily and may be cached per process.

Transaction ids are opaque strings made by eoskit (``eoskit.twophase.txn_id``),
at most 64 bytes of ASCII, unique per task attempt.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, ClassVar, Literal

import pyarrow as pa
from pyspark.sql.types import StructType

from eoskit.core.state_split import KINDS
from eoskit.twophase.verdicts import Verdict

if TYPE_CHECKING:
    from eoskit.twophase.decision_log import DecisionLog
    from eoskit.twophase.messages import TaskAck


class SinkError(RuntimeError):
    """A sink refused a write or a setting; the message says what to change.
    A restart does not fix it (the runtime's restart strategy does not retry it)."""

    #: eoskit.twophase.verdicts: a restart cannot fix it.
    verdict: ClassVar[Verdict] = Verdict.PERMANENT


class ServiceUnavailableError(SinkError, ConnectionError):
    """The sink's service did not answer (unreachable, restarting, timed out):
    a restart may well fix it."""

    #: eoskit.twophase.verdicts: the service is gone for now; a restart may fix it.
    verdict: ClassVar[Verdict] = Verdict.LOST


class CommitMode(str, Enum):
    """How a sink's tasks end their transactions. A ``str`` so that options,
    logs and JSON carry the plain name."""

    TWOPHASE = "twophase"
    IDEMPOTENT = "idempotent"
    AT_LEAST_ONCE = "at_least_once"

    @property
    def exactly_once(self) -> bool:
        return self is not CommitMode.AT_LEAST_ONCE

    def __str__(self) -> str:
        return self.value


#: The ``commitMode`` value that asks for the sink's preferred exactly-once
#: mode (two-phase where the sink has it, else marked commit); also what the
#: runtime's job-wide ``exactly_once`` mode sets.
EXACTLY_ONCE = "exactly_once"


@dataclass(frozen=True)
class SinkContext:
    """What a sink learns about the query when it is checked (driver side)."""

    sink_id: str
    checkpoint_location: str
    commit_mode: CommitMode


@dataclass(frozen=True)
class Marker:
    """A task's progress marker: this task's rows of this batch are committed.
    Stored by the sink in the same atomic commit as the rows."""

    sink_id: str
    batch: int
    partition: int


class TaskWriter(ABC):
    """One task attempt's writes. Runs on an executor.

    eoskit calls ``write`` for every Arrow batch of the task, then the ending
    of the writer's capability (``prepare`` or ``commit``) or ``abort``.
    Raising from ``write`` or the ending fails the task; eoskit then calls
    ``abort``, which must not raise for a transaction that is already gone.

    eoskit counts the task's rows itself (``twophase/task.py``), from the
    batches it hands to ``write``. ``bytes`` is what the writer sent, for
    metrics (0 if it does not count them); ``dead_letters`` the rows it set
    aside as dead letters in the same transaction (a sink with a dead-letter
    destination; 0 otherwise).
    """

    bytes: int = 0
    dead_letters: int = 0

    @abstractmethod
    def write(self, batch: pa.RecordBatch) -> None:
        """Add the batch's rows to the transaction (not visible to readers)."""

    @abstractmethod
    def abort(self) -> None:
        """Roll back what is not prepared or committed; a no-op if nothing is open."""


class PreparingWriter(TaskWriter):
    """A task's writer of a two-phase sink.

    ``evidence``, set by ``prepare`` in a sink that ``ProvesOutcomes``: what
    tells later, once the transaction is no longer prepared, whether it
    committed (PostgreSQL: its transaction id; MySQL: the name of a marker
    row written in it). Carried to the driver in the ack and written into
    the batch's decision before any commit."""

    evidence: str = ""

    @abstractmethod
    def prepare(self) -> None:
        """Make the transaction durable and committable by its id from any
        process, while still invisible (PREPARE TRANSACTION, XA PREPARE, a
        closed staging file). After it returns, only its sink's committer
        (``Committer.commit`` or ``roll_back``) may end it."""


@dataclass(frozen=True)
class StateSpec:
    """One operator state a writer keeps: its name (the key of ``restore``'s
    and ``snapshot``'s mappings) and how the next batch's writers share it:

    - ``list``: redistributed. With the same parallelism, instance p gets
      what instance p left; otherwise the parts are concatenated in instance
      order and split evenly (contiguous runs whose sizes differ by at most
      one);
    - ``union``: every instance gets the whole concatenation.
    """

    name: str
    kind: Literal["list", "union"]

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("an operator state needs a name")
        if self.kind not in KINDS:
            raise ValueError(f"operator state {self.name!r}: kind {self.kind!r}, expected one of "
                             f"{', '.join(KINDS)}")


class KeepsOperatorState(ABC):
    """A capability a ``PreparingWriter`` may add: state of one writer
    instance (task partition p of ``operatorStateParallelism`` k) that
    outlives its task, checkpointed with the batch's decision
    (``twophase/task.py``, ``twophase/coordinator.py``).

    Both methods run on the executor, in the task attempt's process, on the
    writer ``begin_prepared`` returned:

    - ``restore`` once, before the first ``write`` (also when the task has
      no rows), with this instance's share of what the newest decided batch
      with operator state left: every declared name, an empty list where
      nothing was left (the first batch);
    - ``snapshot`` once, after the last ``write`` and before ``prepare``
      (also with no rows): what this instance leaves for the next batch.
      Names it leaves out are empty; a name it does not declare is refused.

    A task of a batch already decided (a replay) opens no writer: neither is
    called, since the decision holds that batch's state. Elements are bytes
    the author serialises; keep them small: every instance reads every part
    when it restores, and the state is checkpointed once per batch.

    Raising from either fails the task, as raising from ``write`` does:
    eoskit calls ``abort``, Spark retries the task, and nothing of the
    attempt's state is decided.
    """

    #: The states this writer keeps, declared once on the class.
    operator_state: ClassVar[tuple[StateSpec, ...]]

    @abstractmethod
    def restore(self, state: Mapping[str, Sequence[bytes]]) -> None:
        """Take this instance's share of the state (see the class doc)."""

    @abstractmethod
    def snapshot(self) -> Mapping[str, Sequence[bytes]]:
        """What this instance leaves for the next batch, by state name."""


class CommittingWriter(TaskWriter):
    """A task's writer that commits by itself."""

    @abstractmethod
    def commit(self) -> None:
        """Make the task's rows visible, atomically."""


class MarkedWriter(CommittingWriter):
    """A task's writer of a marked-commit sink: ``claim`` is called first,
    before any ``write``; ``commit`` commits the rows and the marker at once."""

    #: Set by ``claim`` when it returns False, if the sink recorded it: the row
    #: count of the attempt that committed the marker. eoskit refuses a replay
    #: whose row count differs (the transformation or partitioning changed).
    committed_rows: int | None = None

    @abstractmethod
    def claim(self) -> bool:
        """Take this task's marker in the transaction and return True, or
        return False if the marker is already committed (this task's rows of
        this batch are in: write nothing). If another open transaction holds
        the same marker, fence or wait for it: that is what keeps two attempts
        of one task from both committing."""


class Sink(ABC):
    """What every sink provides, whatever its capabilities. Picklable."""

    #: Short name used in messages, e.g. ``postgres``.
    kind: str = "sink"

    @abstractmethod
    def check(self, schema: StructType, context: SinkContext) -> None:
        """On the driver, before any data moves in a batch: refuse, with a
        ``SinkError`` that says what to change, anything that would fail later
        (missing table, incompatible columns, missing rights, settings, a sink
        id already used by another query), and create what the mode needs
        (e.g. the marker table of the idempotent mode)."""

    def describe(self) -> str:
        """Where the sink writes, without secrets, for messages and logs."""
        return self.kind

    def dead_letter_destination(self) -> str | None:
        """Where the sink sends the records it cannot write (a table, a
        topic), for the driver's log; None if it sends none there (a refused
        record fails its batch)."""
        return None

    def close(self) -> None:
        """Release connections held by this process (optional)."""


class Committer(ABC):
    """The driver's half of a two-phase sink: it ends prepared transactions
    by id and lists them. Made by ``TwoPhaseCommitting.committer()``;
    picklable. The coordinator (``twophase/coordinator.py``) calls it on the
    driver; a task calls ``roll_back`` and ``in_doubt`` on an executor too,
    for its own earlier attempts (``twophase/task.py``)."""

    @abstractmethod
    def commit(self, txn_id: str) -> bool:
        """Commit a prepared transaction. Return False if no prepared
        transaction has this id (already committed or rolled back); eoskit
        decides from its decision log whether that is fine. Raising fails
        the batch's commit, which is repeated."""

    @abstractmethod
    def roll_back(self, txn_id: str) -> bool:
        """Roll back a prepared transaction; False if there is none."""

    @abstractmethod
    def in_doubt(self, prefix: str) -> list[str]:
        """Ids of every prepared transaction whose id starts with ``prefix``,
        sorted."""

    def describe(self) -> str:
        """Where it commits, without secrets, for messages."""
        return type(self).__name__

    def decision_applied(self, sink_id: str, batch: int, txn_ids: Sequence[str]) -> None:
        """On the driver, after every id of ``batch``'s decision (``txn_ids``,
        possibly none) is committed and every other prepared id of the batch
        rolled back, before the decision is marked done. Optional: for work
        that needs the whole batch (the files sink writes the batch's
        manifest here). A crash before the decision is marked done calls it
        again, so it must be idempotent; raising fails the batch's commit,
        and the decision is applied again later."""


class Outcome(str, Enum):
    """What became of a transaction that is no longer prepared."""

    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"
    #: The evidence is gone (pruned, too old for the server to tell).
    UNKNOWN = "unknown"


class ProvesOutcomes(Committer):
    """A committer that tells the fate of an id that is gone."""

    @abstractmethod
    def outcome(self, txn_id: str, evidence: str) -> Outcome:
        """On the driver, for an id ``commit`` found no longer prepared:
        whether it committed, read from ``evidence`` (what its writer's
        ``prepare`` left, ``PreparingWriter.evidence``). Never a guess:
        ``UNKNOWN`` when the evidence cannot tell. Raising (the server
        unreachable) fails the batch's commit, which is repeated."""

    def forget_evidence(self, sink_id: str, below_batch: int) -> None:
        """On the driver, now and then: drop the evidence of ``sink_id``'s
        batches below ``below_batch``, whose decisions are forgotten (no
        commit will ask for it again). Optional: evidence that costs nothing
        to keep (a transaction id) has nothing to drop."""


class TwoPhaseCommitting(Sink):
    """Capability ``twophase``: tasks prepare (the writer), the driver
    commits or rolls back by id once the batch is decided (the committer)."""

    @abstractmethod
    def begin_prepared(self, txn_id: str) -> PreparingWriter:
        """On an executor: open the transaction a task writes into."""

    @abstractmethod
    def committer(self) -> Committer:
        """The committer of this sink's prepared transactions (cheap: it
        connects on first use). On the driver, and on an executor for a
        task's own earlier attempts."""


class MarkedCommitting(Sink):
    """Capability ``idempotent``: tasks commit with a progress marker."""

    @abstractmethod
    def begin_marked(self, marker: Marker, attempt: int) -> MarkedWriter:
        """On an executor: open the transaction of ``marker``'s task."""

    def tasks_committed(self, decisions: "DecisionLog", batch: int, acks: Sequence["TaskAck"]) -> None:
        """On the driver, once every task of ``batch`` committed (Spark's
        commit call; it may be repeated after a crash): record what a restart
        needs in the sink's metadata beside the checkpoint
        (``decisions.write_meta``). Optional; idempotent; raising fails the
        query, although the batch's rows are committed."""

    def forget_markers(self, sink_id: str, below_batch: int) -> None:
        """On the driver, now and then (``eoskit.twophase.marked``): delete
        the markers of ``sink_id``'s batches below ``below_batch``. Spark can
        no longer replay those batches, so no task will ask for their
        markers. Optional: a sink whose markers do not grow with batches
        (the Kafka sink keeps one per task partition) has nothing to forget.
        Raising fails the batch's commit call, although its rows are
        committed; the next due call forgets them instead."""


class DirectCommitting(Sink):
    """Capability ``at_least_once``: tasks commit by themselves."""

    @abstractmethod
    def begin_direct(self, marker: Marker, attempt: int) -> CommittingWriter:
        """On an executor: open a task's transaction (``marker`` names the
        task; nothing records it)."""


_CAPABILITIES: tuple[tuple[CommitMode, type[Sink]], ...] = (
    (CommitMode.TWOPHASE, TwoPhaseCommitting),
    (CommitMode.IDEMPOTENT, MarkedCommitting),
    (CommitMode.AT_LEAST_ONCE, DirectCommitting),
)


def commit_modes(sink_type: type[Sink]) -> tuple[CommitMode, ...]:
    """The commit modes a sink supports, preferred exactly-once mode first."""
    return tuple(mode for mode, capability in _CAPABILITIES if issubclass(sink_type, capability))


def resolve_commit_mode(sink_type: type[Sink], requested: str | None) -> CommitMode:
    """The ``commitMode`` option as a mode this sink has; ``None`` and
    ``exactly_once`` mean the sink's preferred exactly-once mode."""
    supported = commit_modes(sink_type)
    allowed = ", ".join([EXACTLY_ONCE, *(m.value for m in supported)])
    text = (requested or EXACTLY_ONCE).strip().lower()
    if text == EXACTLY_ONCE:
        for mode in supported:
            if mode.exactly_once:
                return mode
        raise SinkError(f"{sink_type.kind} has no exactly-once commit mode; "
                        f"option 'commitMode' must be one of: {allowed}")
    for mode in supported:
        if mode.value == text:
            return mode
    raise SinkError(f"option 'commitMode' = {requested!r}: {sink_type.kind} supports {allowed}")


__all__ = [
    "CommitMode", "Committer", "CommittingWriter", "DirectCommitting", "EXACTLY_ONCE", "KeepsOperatorState",
    "MarkedCommitting",
    "MarkedWriter", "Marker", "Outcome", "PreparingWriter", "ProvesOutcomes", "ServiceUnavailableError",
    "Sink", "SinkContext",
    "SinkError", "StateSpec",
    "TaskWriter", "TwoPhaseCommitting", "commit_modes", "resolve_commit_mode",
]
