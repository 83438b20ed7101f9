"""The checkpoint coordinator: turns task acks into one durable decision per batch.

The commit of batch n, on the driver (``commit``):

1. If batch n has no decision yet, check that every acked transaction is
   still prepared, and, for writers that keep operator state with
   parallelism k, that there is exactly one ack per partition 0..k-1 (else
   some instance's state would be lost or doubled: the batch fails,
   PERMANENT). Then write "batch n commits ids [...]" to the decision log,
   with the evidence each task's prepare left (sinks that prove outcomes)
   and the operator state (``{"parallelism": k, "files": {p: file}}``,
   the acked attempts' snapshots only), in one atomic write. Safe here:
   nothing is committed yet, so a crash before this step leaves only
   prepared transactions that the next start rolls back and snapshot files
   no decision names, and Spark replays the batch, whose tasks restore the
   same state again; after it, rows and state are decided together.
2. Commit each decided id. An id that is gone was committed by an earlier
   try (a commit whose reply was lost, a crash or a repeated commit call
   between steps 2 and 4), or rolled back by someone else: a sink that
   proves outcomes settles which from the decision's evidence, and only
   "committed" goes on. Without evidence, a gone id is taken as committed
   only when an earlier call wrote the decision (the protocol never rolls
   back a decided id); in the call that wrote it, it is an error, never
   silently skipped.
3. Roll back every other prepared id of batch n: losing and speculative
   attempts, attempts of a crashed run. Safe: the decision excludes them.
   Then the committer's ``decision_applied`` hook (e.g. the files sink's batch
   manifest): idempotent, since a crash before step 4 runs it again.
4. Mark the decision done. Every ``PRUNE_EVERY`` batches, forget the done
   decisions of batches Spark can no longer replay (older than its offset
   log's first entry), and their evidence: no commit, abort or sweep will
   ever ask for them. The newest decision with operator state stays, since
   the next batch restores from it; snapshot files no decision names go.

``abort`` rolls back every prepared id of an undecided batch; a decided batch
is rolled forward instead, since its decision may already be half applied.
It first records the abort, so that a cancelled task still running on an
executor (Spark does not wait for it) rolls back what it prepares late.

``sweep`` runs when a batch is planned, before its tasks start, and resolves
every prepared id of the sink by the decision log: listed in its batch's
decision -> commit; otherwise -> roll back. Batches newer than the one being
planned are left alone. A prepared id with no decision log at all stops the
query (``OrphanedTransactionsError``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

from eoskit.core import crash
from eoskit.core import timings
from eoskit.twophase.contract import Committer, Outcome, ProvesOutcomes
from eoskit.twophase.decision_log import DecidedState, Decision, DecisionLog, prune_due
from eoskit.twophase.messages import TaskAck, evidence_of, prepared_ids
from eoskit.twophase.txn_id import TxnId, batch_prefix, sink_prefix
from eoskit.twophase.verdicts import Verdict

log = logging.getLogger(__name__)


class CoordinatorError(RuntimeError):
    """The protocol cannot proceed without losing or duplicating data."""

    #: eoskit.twophase.verdicts: a restart cannot fix it.
    verdict: ClassVar[Verdict] = Verdict.PERMANENT


class LostPreparedTransactionError(CoordinatorError):
    """An acked transaction is no longer prepared before the decision."""

    #: eoskit.twophase.verdicts: a restart (a replay of the batch) may fix it.
    verdict: ClassVar[Verdict] = Verdict.RECOVERABLE


class OrphanedTransactionsError(CoordinatorError):
    """Prepared transactions of a sink whose decision log is gone."""

    def __init__(self, committer: Committer, sink_id: str, ids: list[str], location: str) -> None:
        self.ids = ids
        super().__init__(
            f"{len(ids)} prepared transaction(s) of sink id {sink_id!r} in {committer.describe()} "
            f"have no decision log under {location} (was the checkpoint deleted?): "
            f"{', '.join(ids[:10])}{' ...' if len(ids) > 10 else ''}. Nothing can tell whether "
            "they should commit. Inspect them with `eoskit txn list`, then settle them with "
            "`eoskit txn resolve --rollback-orphans` (or --commit-orphans if you know their "
            "batches were complete), or choose another sinkId."
        )


class Coordinator:
    """Drives one sink's two-phase commit from the driver, through its
    committer. ``parallelism``: the sink option ``operatorStateParallelism``,
    for writers that keep operator state (None: they keep none)."""

    def __init__(self, committer: Committer, decisions: DecisionLog, parallelism: int | None = None) -> None:
        self.committer = committer
        self.decisions = decisions
        self.sink_id = decisions.sink_id
        self.parallelism = parallelism

    def commit(self, messages: Sequence[TaskAck | None], batch: int) -> Decision:
        with timings.span("commit.read_decision", batch):
            decision = self.decisions.get(batch)
        if decision is not None and decision.done:
            return decision  # Spark repeated the commit of a finished batch.
        wrote_decision = decision is None
        if decision is None:
            # Step 1: the decision, with the operator state, durable before any commit.
            state = self._operator_state(messages, batch)
            acked = prepared_ids(messages)
            with timings.span("commit.list_prepared", batch):
                prepared = set(self.committer.in_doubt(batch_prefix(self.sink_id, batch)))
            missing = [txn for txn in acked if txn not in prepared]
            if missing:
                raise LostPreparedTransactionError(
                    f"batch {batch}: acked transactions are no longer prepared in "
                    f"{self.committer.describe()}: {', '.join(missing)}; the batch is not "
                    "committed and will be replayed"
                )
            rows = sum(m.rows for m in messages if m is not None)
            with timings.span("commit.decide", batch):
                decision = self.decisions.decide(batch, acked, rows, evidence_of(messages), state)
            crash.crash_point(crash.DRIVER_AFTER_DECISION, batch)
        self._apply(decision, first_time=wrote_decision)
        return decision

    def _operator_state(self, messages: Sequence[TaskAck | None], batch: int) -> DecidedState | None:
        """Step 1's check of the acks of writers that keep operator state:
        one per partition 0..k-1, each naming its snapshot."""
        if self.parallelism is None:
            return None
        k = self.parallelism
        acks = [m for m in messages if m is not None]
        partitions = sorted(m.partition for m in acks)
        if partitions != list(range(k)):
            raise CoordinatorError(
                f"sink {self.sink_id} keeps operator state with parallelism {k}, batch {batch} ran "
                f"{len(acks)} tasks: repartition({k}) before the sink")
        unnamed = [m.partition for m in acks if not m.state_file]
        if unnamed:
            raise CoordinatorError(
                f"sink {self.sink_id} keeps operator state with parallelism {k}, but the acks of batch "
                f"{batch}'s task(s) {', '.join(map(str, unnamed))} name no snapshot file")
        return DecidedState(batch, k, {m.partition: m.state_file for m in acks})

    def _apply(self, decision: Decision, first_time: bool) -> None:
        batch = decision.batch
        # Step 2: commit every decided id.
        with timings.span("commit.commit_prepared", batch):
            for index, txn in enumerate(decision.commit):
                if not self.committer.commit(txn):
                    self._gone(decision, txn, first_time)
                if index == 0 and len(decision.commit) > 1:
                    crash.crash_point(crash.DRIVER_AFTER_SOME_COMMITS, batch)
        crash.crash_point(crash.DRIVER_AFTER_ALL_COMMITS, batch)
        # Step 3: roll back everything else of this batch.
        with timings.span("commit.roll_back_others", batch):
            decided = set(decision.commit)
            for txn in self.committer.in_doubt(batch_prefix(self.sink_id, batch)):
                if txn not in decided:
                    log.info("batch %d: rolling back %s (not in the decision)", batch, txn)
                    self.committer.roll_back(txn)
        # Step 3b: the sink's per-batch work (idempotent: a crash before step 4 repeats it).
        with timings.span("commit.decision_applied", batch):
            self.committer.decision_applied(self.sink_id, batch, decision.commit)
        # Step 4: done.
        with timings.span("commit.mark_done", batch):
            self.decisions.mark_done(decision)
            if prune_due(batch):
                kept_from = self.decisions.prune(batch)
                if isinstance(self.committer, ProvesOutcomes):
                    self.committer.forget_evidence(self.sink_id, kept_from)

    def _gone(self, decision: Decision, txn: str, first_time: bool) -> None:
        """Step 2 found a decided id no longer prepared: go on only if it committed."""
        batch = decision.batch
        token = decision.evidence.get(txn)
        if isinstance(self.committer, ProvesOutcomes) and token:
            outcome = self.committer.outcome(txn, token)
            if outcome is Outcome.COMMITTED:
                log.warning("batch %d: %s was committed by an earlier try whose reply was lost "
                            "(evidence %s)", batch, txn, token)
                return
            said = ("was rolled back: its rows are missing" if outcome is Outcome.ROLLED_BACK
                    else "cannot say whether it committed: its rows may be missing")
            raise CoordinatorError(
                f"batch {batch}: transaction {txn} is no longer prepared in {self.committer.describe()}, "
                f"and the server {said} (evidence {token!r}). Something other than this job ended "
                "it (a ROLLBACK by hand, `eoskit txn resolve --rollback-orphans`); the batch "
                "cannot be completed exactly once")
        if first_time:
            raise CoordinatorError(
                f"batch {batch}: transaction {txn} vanished between the decision and "
                f"its commit in {self.committer.describe()}; it was rolled back by someone "
                "else, and its rows are missing"
            )

    def abort(self, batch: int) -> None:
        decision = self.decisions.get(batch)
        if decision is not None:
            if not decision.done:
                log.warning("batch %d was decided before the abort: completing its commit", batch)
                self._apply(decision, first_time=False)
            return
        self.decisions.mark_aborted(batch)
        for txn in self.committer.in_doubt(batch_prefix(self.sink_id, batch)):
            self.committer.roll_back(txn)

    def sweep(self, planned_batch: int | None) -> dict[str, list[str]]:
        """Resolve every prepared id of this sink up to the batch being planned."""
        with timings.span("sweep.clear_aborted"):
            self.decisions.clear_aborted()
        with timings.span("sweep.list_prepared"):
            prepared = self.committer.in_doubt(sink_prefix(self.sink_id))
        if not prepared:
            return {"committed": [], "rolled_back": []}
        if not self.decisions.exists():
            raise OrphanedTransactionsError(self.committer, self.sink_id, sorted(prepared),
                                       self.decisions.root)
        committed, rolled_back = [], []
        cache: dict[int, Decision | None] = {}
        for txn in sorted(prepared):
            parsed = TxnId.parse(txn)
            if parsed is None:
                continue
            if planned_batch is not None and parsed.batch > planned_batch:
                log.warning("leaving %s alone: its batch is newer than the one planned", txn)
                continue
            if parsed.batch not in cache:
                cache[parsed.batch] = self.decisions.get(parsed.batch)
            decision = cache[parsed.batch]
            if decision is not None and txn in decision.commit:
                if not self.committer.commit(txn):  # listed a moment ago: a lost reply
                    self._gone(decision, txn, first_time=False)
                committed.append(txn)
            else:
                self.committer.roll_back(txn)
                rolled_back.append(txn)
        for batch, decision in cache.items():
            if decision is not None and not decision.done:
                self._apply(decision, first_time=False)
        if committed or rolled_back:
            log.warning("in-doubt transactions settled: committed %s, rolled back %s",
                        committed, rolled_back)
        return {"committed": committed, "rolled_back": rolled_back}
