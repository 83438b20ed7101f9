"""What travels from a task to the driver: the task's ack, a typed committable.

Spark pickles each to the driver's commit process. Only a
``PreparedTransaction`` asks anything of the driver (commit it by id); the
others report what the task already did, for progress and checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql.datasource import WriterCommitMessage


@dataclass(frozen=True)
class TaskAck(WriterCommitMessage):
    """A task attempt's ack: which task, and what it wrote. ``rows`` counts
    every row the task was given; ``dead_letters`` those of them it sent to
    the sink's dead-letter destination, in the same transaction.
    ``state_file``: where the attempt's operator state snapshot was written
    (``KeepsOperatorState``; relative to the sink's folder, empty if the
    writer keeps none), for the coordinator to name in the decision."""

    batch: int
    partition: int
    attempt: int
    rows: int = 0
    bytes: int = 0
    dead_letters: int = field(default=0, kw_only=True)
    state_file: str = field(default="", kw_only=True)


@dataclass(frozen=True)
class PreparedTransaction(TaskAck):
    """Two-phase: the task prepared ``txn_id``; the coordinator commits it once
    the batch is decided. ``evidence``: what tells whether it committed once
    it is no longer prepared (``ProvesOutcomes``; empty for other sinks)."""

    txn_id: str = ""
    evidence: str = ""


@dataclass(frozen=True)
class CommittedByTask(TaskAck):
    """The task committed its rows itself (marked or at-least-once commit)."""


@dataclass(frozen=True)
class NothingToCommit(TaskAck):
    """The task has nothing for the driver: an empty partition, or a replay
    (``replay``) of a batch already decided, or whose marker was committed."""

    replay: bool = False


def prepared_ids(messages: object) -> list[str]:
    """The ids a batch's acks ask the coordinator to commit."""
    return [m.txn_id for m in messages or () if isinstance(m, PreparedTransaction)]


def evidence_of(messages: object) -> dict[str, str]:
    """The prepared ids' evidence (``ProvesOutcomes``), where a task left any."""
    return {m.txn_id: m.evidence for m in messages or ()
            if isinstance(m, PreparedTransaction) and m.evidence}


def dead_letters(messages: object) -> int:
    """How many records a batch's acks set aside as dead letters."""
    return sum(m.dead_letters for m in messages or () if isinstance(m, TaskAck))
