"""The driver's part of the marked-commit protocol (commit mode ``idempotent``).

Each task of batch n has already committed its rows together with its
progress marker (sink id, n, partition) in one transaction; a replayed task
finds its marker and writes nothing. What is left for the driver, in Spark's
commit call for batch n (``commit``; Spark may repeat it after a crash):

1. The sink's ``tasks_committed`` hook records what a restart needs (the
   Kafka sink: how many task partitions exist, so that the next start fences
   every one of them). Safe to repeat: it only ever widens what it recorded.
2. Every ``PRUNE_EVERY`` batches, the sink forgets the markers of batches
   older than the oldest one Spark may still replay (the first entry of its
   offset log; ``decision_log.oldest_replayable``). Safe: Spark replays only
   the batches its offset log holds, and a task asks only for the marker of
   the batch it runs, so no task can ask for a forgotten marker. A crash
   between steps 1 and 2 leaves the markers for the next due batch.

This is what keeps a marker table flat over a job's weeks: about
``minBatchesToRetain`` x partitions rows, whatever the batch count.
"""

from __future__ import annotations

from collections.abc import Sequence

from eoskit.core import timings
from eoskit.twophase.contract import MarkedCommitting
from eoskit.twophase.decision_log import DecisionLog, oldest_replayable, prune_due
from eoskit.twophase.messages import TaskAck


def commit(sink: MarkedCommitting, decisions: DecisionLog, batch: int,
           acks: Sequence[TaskAck]) -> None:
    """Finish batch ``batch`` of a marked-commit sink on the driver."""
    # Step 1: what a restart needs.
    with timings.span("commit.tasks_committed", batch):
        sink.tasks_committed(decisions, batch, acks)
    # Step 2: forget markers no replay can ask for.
    if prune_due(batch):
        with timings.span("commit.forget_markers", batch):
            sink.forget_markers(decisions.sink_id,
                                oldest_replayable(decisions.checkpoint_location, batch))
