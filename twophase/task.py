"""What one Spark task does with its rows, on an executor.

Two-phase: check the decision log (a decided batch is a replay: write
nothing), roll back leftovers of earlier attempts of this very task, open a
transaction named by the task, write every Arrow batch, prepare, check the
log again (a batch decided or aborted meanwhile: roll back), ack.
At-least-once: write and commit directly.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from eoskit.twophase import crash
from eoskit.twophase.contract import Marker, TransactionalSink
from eoskit.twophase.decision_log import DecisionLog
from eoskit.twophase.messages import PreparedMessage
from eoskit.twophase.txn_id import TxnId, task_prefix

TWOPHASE = "twophase"
IDEMPOTENT = "idempotent"
AT_LEAST_ONCE = "at_least_once"
COMMIT_MODES = (TWOPHASE, IDEMPOTENT, AT_LEAST_ONCE)


class TaskIdentityUnavailable(RuntimeError):
    """The task runs outside a streaming micro-batch (no batch id)."""


def task_identity() -> tuple[int, int, int]:
    """(batch id, partition, attempt) from Spark's task context."""
    from pyspark import TaskContext

    context = TaskContext.get()
    batch = context.getLocalProperty("streaming.sql.batchId") if context else None
    if context is None or batch is None:
        raise TaskIdentityUnavailable(
            "eoskit transactional sinks write from streaming micro-batches only "
            "(no streaming.sql.batchId in the task's local properties)"
        )
    return int(batch), context.partitionId(), context.attemptNumber()


def write_task(
    sink: TransactionalSink,
    decisions: DecisionLog,
    commit_mode: str,
    batches: Iterator[pa.RecordBatch],
    identity: tuple[int, int, int] | None = None,
) -> PreparedMessage:
    batch, partition, attempt = identity or task_identity()
    txn_id = TxnId.new(decisions.sink_id, batch, partition, attempt)

    def ack(txn: str | None, rows: int = 0, size: int = 0, replay: bool = False) -> PreparedMessage:
        return PreparedMessage(batch, partition, attempt, txn, rows, size, replay)

    if commit_mode == TWOPHASE:
        if decisions.get(batch) is not None:
            return ack(None, replay=True)
        _roll_back_earlier_attempts(sink, decisions.sink_id, batch, partition, attempt)
    transaction = sink.begin(str(txn_id))
    try:
        if commit_mode == IDEMPOTENT and not transaction.claim(
            Marker(decisions.sink_id, batch, partition)
        ):
            transaction.abort()
            return ack(None, replay=True)
        for index, record_batch in enumerate(batches):
            if record_batch.num_rows:
                transaction.write(record_batch)
            if index == 0:
                crash.crash_point(crash.TASK_DURING_WRITE, batch)
        if commit_mode in (AT_LEAST_ONCE, IDEMPOTENT):
            transaction.commit()
            crash.crash_point(crash.TASK_AFTER_COMMIT, batch)
            return ack(None, transaction.rows, transaction.bytes)
        if transaction.rows == 0:
            transaction.abort()
            return ack(None)
        transaction.prepare()
    except BaseException:
        transaction.abort()
        raise
    crash.crash_point(crash.TASK_AFTER_PREPARE, batch)
    if _settled_without(decisions, batch, str(txn_id)):
        sink.rollback_prepared(str(txn_id))
        return ack(None, replay=True)
    return ack(str(txn_id), transaction.rows, transaction.bytes)


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
    sink: TransactionalSink, sink_id: str, batch: int, partition: int, attempt: int
) -> None:
    """A retried task would wait on the locks of its own failed attempt's
    prepared transaction; Spark will never ack that attempt, so release it.
    (Should a duplicate attempt's id have reached the driver anyway, the
    coordinator finds it gone before deciding and fails the batch.)"""
    if attempt == 0:
        return
    for txn in sink.list_prepared(task_prefix(sink_id, batch, partition)):
        parsed = TxnId.parse(txn)
        if parsed is not None and parsed.attempt < attempt:
            sink.rollback_prepared(txn)
