"""What one Spark task does with its rows, on an executor, per commit mode.

Two-phase (``TwoPhaseCommitting``):
1. A task of a sink that keeps operator state whose partition p is not
   below the declared parallelism k fails at once: its state would have no
   instance to go to. The decision log already holds the batch: a replay,
   write nothing (the decision holds the batch's operator state too, so
   nothing is restored or snapshotted).
2. Roll back prepared leftovers of earlier attempts of this very task (a
   retry would wait on their locks; Spark never acks them).
3. Open the transaction named by the task. A writer that keeps operator
   state (``KeepsOperatorState``) restores its share of the newest decided
   state below this batch, before the first write: decisions below the
   batch never change, so every attempt and replay restores the same.
   Write every Arrow batch. The writer snapshots its state, written
   atomically to ``opstate/<n>/<p>-<attempt>.arrow`` (a file of its own per
   attempt: only the decision makes one of them state). Prepare; a task
   with no rows prepares nothing but still acks its snapshot.
4. Check the log again: a batch decided without this id, or aborted,
   meanwhile means nobody will commit it: roll it back. Then ack the id
   and the snapshot file.

Marked commit (``MarkedCommitting``; a writer keeping operator state is
refused: no driver decision holds it):
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
    KeepsOperatorState,
    Marker,
    MarkedCommitting,
    Sink,
    SinkError,
    StateSpec,
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
from eoskit.twophase.operator_state import (
    OperatorStateError,
    checked_snapshot,
    read_parts,
    share,
    write_snapshot,
)
from eoskit.twophase.sink_options import OPERATOR_STATE_PARALLELISM
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
    parallelism: int | None = None,
) -> TaskAck:
    """One task's rows into ``sink`` by ``commit_mode``'s protocol (the
    module doc). ``parallelism``: the sink option
    ``operatorStateParallelism``, the number of writer instances of a sink
    whose writers keep operator state (None: they keep none)."""
    batch, partition, attempt = identity or task_identity()
    with timings.span("task", batch, partition):
        if timings.enabled():
            batches = _timed_input(batches)
        if commit_mode is CommitMode.TWOPHASE:
            assert isinstance(sink, TwoPhaseCommitting)
            return _two_phase(sink, decisions, batches, batch, partition, attempt, parallelism)
        marker = Marker(decisions.sink_id, batch, partition)
        if commit_mode is CommitMode.IDEMPOTENT:
            assert isinstance(sink, MarkedCommitting)
            return _marked(sink, marker, attempt, batches)
        assert isinstance(sink, DirectCommitting)
        writer = sink.begin_direct(marker, attempt)
        try:
            _refuse_operator_state(sink, writer, commit_mode)
        except BaseException:
            writer.abort()
            raise
        return _direct(writer, marker, attempt, batches)


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
               batch: int, partition: int, attempt: int, parallelism: int | None) -> TaskAck:
    # Step 1: a task beyond the declared parallelism fails; a decided batch is a replay.
    if parallelism is not None and partition >= parallelism:
        raise OperatorStateError(
            f"{sink.describe()} (sink id {decisions.sink_id!r}) keeps operator state with parallelism "
            f"{parallelism} (option '{OPERATOR_STATE_PARALLELISM.name}'), but batch {batch} runs a task "
            f"{partition}: repartition({parallelism}) before the sink")
    with timings.span("task.read_decision"):
        decided = decisions.get(batch) is not None
    if decided:
        return NothingToCommit(batch, partition, attempt, replay=True)
    # Step 2: release this task's earlier attempts.
    _roll_back_earlier_attempts(sink, decisions.sink_id, batch, partition, attempt)
    # Step 3: restore, write, snapshot, prepare.
    txn_id = str(TxnId.new(decisions.sink_id, batch, partition, attempt))
    writer = sink.begin_prepared(txn_id)
    try:
        specs = _operator_state(sink, writer, parallelism)
        if specs:
            assert parallelism is not None and isinstance(writer, KeepsOperatorState)
            with timings.span("task.restore_state"):
                decided = decisions.state_before(batch)
                parts = read_parts(decisions, decided) if decided is not None else []
                writer.restore(share(specs, parts, parallelism, partition))
        rows = _write_all(writer, batches, batch)
        state_file = ""
        if specs:
            assert isinstance(writer, KeepsOperatorState)
            with timings.span("task.snapshot_state"):
                elements = checked_snapshot(specs, writer.snapshot(), type(writer).__name__)
                state_file = write_snapshot(decisions, batch, partition, attempt, specs, elements)
        if rows == 0:
            writer.abort()
            return NothingToCommit(batch, partition, attempt, state_file=state_file)
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
                               writer.evidence, dead_letters=writer.dead_letters, state_file=state_file)


def _operator_state(sink: Sink, writer: TaskWriter, parallelism: int | None) -> tuple[StateSpec, ...]:
    """The states ``writer`` keeps (none: an empty tuple), checked against
    the sink option that declares their parallelism: either both or neither."""
    option = OPERATOR_STATE_PARALLELISM.name
    if not isinstance(writer, KeepsOperatorState):
        if parallelism is not None:
            raise OperatorStateError(f"option '{option}' is set, but the writers of {sink.describe()} "
                                     "keep no operator state: remove the option")
        return ()
    specs = tuple(writer.operator_state)
    if parallelism is None:
        raise OperatorStateError(
            f"the writers of {sink.describe()} keep operator state "
            f"({', '.join(f'{s.name} ({s.kind})' for s in specs)}): set the sink option '{option}' to "
            "their number, and repartition to it before the sink")
    return specs


def _refuse_operator_state(sink: Sink, writer: TaskWriter, mode: CommitMode) -> None:
    """Operator state is checkpointed in a two-phase batch's decision; the
    other modes have none (docs/design/broadcast-and-operator-state.md, 2.3)."""
    if isinstance(writer, KeepsOperatorState):
        raise OperatorStateError(f"the writers of {sink.describe()} keep operator state, which only "
                                 f"commitMode=twophase checkpoints (with the batch's decision); "
                                 f"commitMode={mode.value} has no decision to hold it")


def _marked(sink: MarkedCommitting, marker: Marker, attempt: int,
            batches: Iterator[pa.RecordBatch]) -> TaskAck:
    writer = sink.begin_marked(marker, attempt)
    try:
        _refuse_operator_state(sink, writer, CommitMode.IDEMPOTENT)
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
