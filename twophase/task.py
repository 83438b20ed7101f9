"""What one Spark task does with its rows, on an executor, per commit mode.

Two-phase (``TwoPhaseCommitting``):
1. The decision log already holds the batch: a replay, write nothing.
2. Roll back prepared leftovers of earlier attempts of this very task (a
   retry would wait on their locks; Spark never acks them).
3. Open the transaction named by the task, write every Arrow batch, prepare.
4. Check the log again: a batch decided without this id, or aborted,
   meanwhile means nobody will commit it: roll it back. Then ack the id.

Marked commit (``MarkedCommitting``):
1. Open the task's transaction and claim its marker. A committed marker
   means a replay: write nothing (after checking that the replay has the
   rows the committed attempt had, where the sink recorded them).
2. Write every Arrow batch, commit rows and marker atomically, ack.

At-least-once (``DirectCommitting``): write, commit, ack.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from eoskit.core import crash
from eoskit.core import timings
from eoskit.twophase.contract import (
    CommitMode,
    CommittingWriter,
    DirectCommitting,
    Marker,
    MarkedCommitting,
    Sink,
    SinkError,
    TaskWriter,
    TwoPhaseCommitting,
)
from eoskit.twophase.decision_log import DecisionLog
from eoskit.twophase.messages import (
    CommittedByTask,
    NothingToCommit,
    PreparedTransaction,
    TaskAck,
)
from eoskit.twophase.txn_id import TxnId, task_prefix


class TaskIdentityError(RuntimeError):
    """The task runs outside a streaming micro-batch (no batch id)."""


class ReplayMismatchError(SinkError):
    """A replayed task's rows differ from those its committed attempt wrote."""


def task_identity() -> tuple[int, int, int]:
    """(batch id, partition, attempt) from Spark's task context."""
    from pyspark import TaskContext

    context = TaskContext.get()
    batch = context.getLocalProperty("streaming.sql.batchId") if context else None
    if context is None or batch is None:
        raise TaskIdentityError(
            "eoskit transactional sinks write from streaming micro-batches only "
            "(no streaming.sql.batchId in the task's local properties)"
        )
    return int(batch), context.partitionId(), context.attemptNumber()


def write_task(
    sink: Sink,
    decisions: DecisionLog,
    commit_mode: CommitMode,
    batches: Iterator[pa.RecordBatch],
    identity: tuple[int, int, int] | None = None,
) -> TaskAck:
    batch, partition, attempt = identity or task_identity()
    with timings.span("task", batch, partition):
        if timings.enabled():
            batches = _timed_input(batches)
        if commit_mode is CommitMode.TWOPHASE:
            assert isinstance(sink, TwoPhaseCommitting)
            return _two_phase(sink, decisions, batches, batch, partition, attempt)
        marker = Marker(decisions.sink_id, batch, partition)
        if commit_mode is CommitMode.IDEMPOTENT:
            assert isinstance(sink, MarkedCommitting)
            return _marked(sink, marker, attempt, batches)
        assert isinstance(sink, DirectCommitting)
        return _direct(sink.begin_direct(marker, attempt), marker, attempt, batches)


def _timed_input(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The task's rows, with the time spent waiting for them recorded as
    ``task.input`` (Spark computing and handing over the Arrow batches), so
    that ``task.write`` is the sink's own time."""
    return timings.time_inside(batches, lambda waited: timings.record("task.input", waited * 1000))


def _write_all(writer: TaskWriter, batches: Iterator[pa.RecordBatch], batch: int) -> int:
    """Every Arrow batch into ``writer``; the rows written. eoskit counts
    them here, not the writer: the count is what the ack reports and what
    tells an empty task (nothing to prepare) from one with rows."""
    rows = 0
    for index, record_batch in enumerate(batches):
        if record_batch.num_rows:
            with timings.span("task.write"):
                writer.write(record_batch)
            rows += record_batch.num_rows
        if index == 0:
            crash.crash_point(crash.TASK_DURING_WRITE, batch)
    return rows


def _two_phase(sink: TwoPhaseCommitting, decisions: DecisionLog, batches: Iterator[pa.RecordBatch],
               batch: int, partition: int, attempt: int) -> TaskAck:
    # Step 1: a decided batch is a replay.
    with timings.span("task.read_decision"):
        decided = decisions.get(batch) is not None
    if decided:
        return NothingToCommit(batch, partition, attempt, replay=True)
    # Step 2: release this task's earlier attempts.
    _roll_back_earlier_attempts(sink, decisions.sink_id, batch, partition, attempt)
    # Step 3: write and prepare.
    txn_id = str(TxnId.new(decisions.sink_id, batch, partition, attempt))
    writer = sink.begin_prepared(txn_id)
    try:
        rows = _write_all(writer, batches, batch)
        if rows == 0:
            writer.abort()
            return NothingToCommit(batch, partition, attempt)
        crash.crash_point(crash.TASK_BEFORE_END, batch)
        with timings.span("task.prepare"):
            writer.prepare()
    except BaseException:
        writer.abort()
        raise
    crash.crash_point(crash.TASK_AFTER_PREPARE, batch)
    # Step 4: settled meanwhile without this id? Then nobody commits it.
    with timings.span("task.read_decision"):
        settled = _settled_without(decisions, batch, txn_id)
    if settled:
        sink.committer().roll_back(txn_id)
        return NothingToCommit(batch, partition, attempt, replay=True)
    return PreparedTransaction(batch, partition, attempt, rows, writer.bytes, txn_id,
                               writer.evidence, dead_letters=writer.dead_letters)


def _marked(sink: MarkedCommitting, marker: Marker, attempt: int,
            batches: Iterator[pa.RecordBatch]) -> TaskAck:
    writer = sink.begin_marked(marker, attempt)
    try:
        # Step 1: claim the marker; a committed one means a replay.
        with timings.span("task.claim"):
            claimed = writer.claim()
        if not claimed:
            expected = writer.committed_rows
            writer.abort()
            if expected is not None:
                _check_replay_rows(marker, expected, batches)
            return NothingToCommit(marker.batch, marker.partition, attempt, replay=True)
        # Step 2: rows and marker commit together.
        rows = _write_all(writer, batches, marker.batch)
        crash.crash_point(crash.TASK_BEFORE_END, marker.batch)
        with timings.span("task.commit"):
            writer.commit()
    except BaseException:
        writer.abort()
        raise
    crash.crash_point(crash.TASK_AFTER_COMMIT, marker.batch)
    crash.crash_point(crash.DRIVER_AFTER_TASK_COMMIT, marker.batch)
    return CommittedByTask(marker.batch, marker.partition, attempt, rows, writer.bytes,
                           dead_letters=writer.dead_letters)


def _direct(writer: CommittingWriter, marker: Marker, attempt: int,
            batches: Iterator[pa.RecordBatch]) -> TaskAck:
    try:
        rows = _write_all(writer, batches, marker.batch)
        crash.crash_point(crash.TASK_BEFORE_END, marker.batch)
        with timings.span("task.commit"):
            writer.commit()
    except BaseException:
        writer.abort()
        raise
    crash.crash_point(crash.TASK_AFTER_COMMIT, marker.batch)
    crash.crash_point(crash.DRIVER_AFTER_TASK_COMMIT, marker.batch)
    return CommittedByTask(marker.batch, marker.partition, attempt, rows, writer.bytes,
                           dead_letters=writer.dead_letters)


def _check_replay_rows(marker: Marker, expected: int, batches: Iterator[pa.RecordBatch]) -> None:
    """A replay is exactly-once only if each task gets the rows it had: a
    different count means the partitioning or the transformation changed,
    and writing would duplicate or lose rows. Refuse, saying so."""
    rows = sum(b.num_rows for b in batches)
    if rows != expected:
        raise ReplayMismatchError(
            f"batch {marker.batch} is being replayed, and its task {marker.partition} now has "
            f"{rows} rows where the committed attempt wrote {expected}: the query's "
            "partitioning or transformation changed between runs (a different parallelism, "
            "a non-deterministic transformation). Writing it again would duplicate or lose "
            "rows, so the replay is refused. Restore the original settings to finish this "
            "batch, then change them."
        )


def _settled_without(decisions: DecisionLog, batch: int, txn_id: str) -> bool:
    """Was the batch decided or aborted while this attempt prepared? Then
    nobody will ever commit ``txn_id``: a duplicate attempt lost the race, or
    Spark cancelled the task and called ``abort`` without waiting for it.
    Checked *after* preparing, which closes the race with the coordinator: it
    writes its decision or abort marker before listing the batch's prepared
    ids, so it either finds this transaction or this check finds its record."""
    decision = decisions.get(batch)
    if decision is not None:
        return txn_id not in decision.commit
    return decisions.is_aborted(batch)


def _roll_back_earlier_attempts(
    sink: TwoPhaseCommitting, sink_id: str, batch: int, partition: int, attempt: int
) -> None:
    """A retried task would wait on the locks of its own failed attempt's
    prepared transaction; Spark will never ack that attempt, so release it.
    (Should a duplicate attempt's id have reached the driver anyway, the
    coordinator finds it gone before deciding and fails the batch.)"""
    if attempt == 0:
        return
    committer = sink.committer()
    for txn in committer.in_doubt(task_prefix(sink_id, batch, partition)):
        parsed = TxnId.parse(txn)
        if parsed is not None and parsed.attempt < attempt:
            committer.roll_back(txn)
