"""Running a Pipeline: the loop that starts its query, watches it, restarts it
by the restart strategy, and answers the commands addressed to it.

One run, step by step:

1. Claim the checkpoint (``control.py``): a second job on the same
   checkpoint directory is refused, naming the first, and so is a
   checkpoint an interrupted ``eoskit state rescale`` left half-rewritten. With
   ``--from-savepoint``, restore the savepoint into the (empty) checkpoint
   first, once the job's query is found to match the savepoint's
   (``fingerprint.py``: source, sinks, stateful operators).
2. Start the query from the checkpoint, with the job's settings (trigger
   interval, retained batches, exactly-once or at-least-once). The first
   start fails the run at once; a restart's start that fails for a cause a
   restart can fix (a service still coming back) is a failure of step 4.
3. Watch it: heartbeat the run record, pass Spark's progress to the
   listeners (``listeners.py``), and after each batch the in-doubt
   transactions the sinks' start-up sweep settled (noted in their decision
   logs by Spark's planning process), take a savepoint when asked (a copy of the
   last committed batch, safe while the next one runs: nothing of a
   committed batch changes), fail a batch that outlives the checkpoint
   timeout, and stop at a batch boundary on SIGINT/SIGTERM or ``eoskit stop``
   (with the source holding the next batch's planning: ``core/stop_gate.py``).
   Once the query has ended, wait for Spark's listener bus to tell the
   listener so (it runs behind the query), before going on.
4. When the query fails: a cause a restart cannot fix (``failures.py``) ends
   the run at once; up to ``tolerable_failures`` consecutive failures are
   restarted at once; beyond that the restart strategy says how long to
   wait, or gives up. Every restart starts from the checkpoint, where the
   sinks' recovery settles whatever the failed attempt left in doubt, so a
   restart never duplicates or loses a record.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from typing import TYPE_CHECKING, TextIO

from pyspark.errors import PySparkException, StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from eoskit.core.stop_gate import StopGate
from eoskit.runtime.job import fingerprint
from eoskit.runtime.job.components import Gated
from eoskit.runtime.job.control import ControlDir, LocalRuns, Request
from eoskit.runtime.spark.executors import ExecutorCheckError
from eoskit.runtime.job.failures import Failure, classify
from eoskit.runtime.job.listeners import CheckpointStatus, Listeners, RunListener
from eoskit.runtime.job.progress import ProgressPrinter, RunSummary
from eoskit.runtime.job.settings import JobSettings
from eoskit.runtime.job.signals import BoundaryStop, StopRequest
from eoskit.runtime.state.checkpoints import Checkpoint
from eoskit.runtime.state.rescale import refuse_unfinished
from eoskit.runtime.state.savepoints import create_savepoint, restore_savepoint
from eoskit.twophase.decision_log import settlements

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from eoskit.runtime.job.pipeline import Pipeline

POLL_S = 0.5
STOP_POLL_S = 0.05
#: How long an ended query's last events may take to reach the Spark listener.
LISTENER_DRAIN_S = 10.0


class PipelineError(RuntimeError):
    """The job could not start, or ended with an error.

    The message is one line: the pipeline's name and the root cause, the
    error a data source, sink or UDF raised in Python when there is one (a
    ``SinkError``, an ``OptionError``...), else Spark's innermost message
    (``spark_errors``); then what the runtime did about it. ``cause_type``
    names the root cause's Python type (``eoskit.twophase.contract.SinkError``),
    None for a JVM error; ``__cause__`` is Spark's exception, with every trace.
    """

    def __init__(self, message: str, cause_type: str | None = None) -> None:
        super().__init__(message)
        self.cause_type = cause_type


class _Finished:
    """The query ended by itself (caught up) or was stopped on request."""


FINISHED = _Finished()


class Runner:
    def __init__(self, pipeline: "Pipeline", checkpoint: str, spark: SparkSession,
                 settings: JobSettings, out: TextIO | None = None, until_caught_up: bool = False,
                 listeners: tuple[RunListener, ...] = (), from_savepoint: str | None = None,
                 allow_non_restored_state: bool = False, print_summary: bool = True) -> None:
        self.pipeline = pipeline
        self.print_summary = print_summary
        self.checkpoint = checkpoint
        self.spark = spark
        self.settings = settings
        self.until_caught_up = until_caught_up
        self.from_savepoint = from_savepoint
        self.allow_non_restored_state = allow_non_restored_state
        self.printer = ProgressPrinter(pipeline.name, out, bar=until_caught_up)
        self.control = ControlDir(checkpoint)
        # Every run keeps its status beside the checkpoint (eoskit status, eoskit list).
        self.status = CheckpointStatus(self.control)
        self.listeners = Listeners(self.printer, self.status, *listeners)
        self.spark_listener = self.listeners.spark_listener(pipeline.name)
        self.stop = StopRequest()
        #: Where a stop holds the next batch's planning (core/stop_gate.py), made by ``run``.
        self.gate: StopGate | None = None
        self.stop_savepoint: Request | None = None
        self.started_at = time.time()
        self._settled_seen: set[str] = set()
        self._stops_seen: set[str] = set()  # each counts once, however long it stays pending

    @property
    def summary(self) -> RunSummary:
        return self.printer.summary

    def run(self) -> RunSummary:
        # Step 1: restore a savepoint into the (empty) checkpoint, if this
        # job's query is the savepoint's; claim the checkpoint.
        self.started_at = time.time()
        if self.from_savepoint:
            restore_savepoint(self.from_savepoint, self.checkpoint, job_name=self.pipeline.name,
                              expect=fingerprint.of_pipeline(self.pipeline, self.spark),
                              allow_non_restored_state=self.allow_non_restored_state)
            self.summary.last_restore = self.from_savepoint
        if self.until_caught_up and self.settings.min_pause:
            self.printer.out.write(f"[{self.pipeline.name}] min_pause is not applied to a run "
                                   "until caught up: it reads what is there and ends\n")
        refuse_unfinished(self.checkpoint)  # a rescale killed half-way: `eoskit state rescale` settles it
        context = self.spark.sparkContext
        app = {"id": context.applicationId, "master": context.master}
        record = self.control.claim(self.pipeline.name, app)
        registered = LocalRuns().add(self.control.checkpoint, self.pipeline.name, app)  # None: unwritable
        failed: str | None = None
        self.spark.streams.addListener(self.spark_listener)
        self.gate = gate = StopGate(tempfile.mkdtemp(prefix="eoskit-stop-"))
        try:
            self.listeners.on_start(self.pipeline.name, self.checkpoint)
            with self.stop.installed():
                self._loop(record)
        except PipelineError as exc:
            failed = str(exc)
            raise
        finally:
            self.spark.streams.removeListener(self.spark_listener)
            self.summary.ended = time.monotonic()
            self.listeners.on_end(failed)
            record.release()
            shutil.rmtree(gate.directory, ignore_errors=True)
            if registered:
                LocalRuns.remove(registered)
        if self.print_summary:
            self.printer.out.write(self.summary.render(self.pipeline.name) + "\n")
            self.printer.out.flush()
        return self.summary

    def _loop(self, record) -> None:
        tracker = self.settings.strategy().tracker()
        restarts = consecutive = 0
        while True:
            # Step 2: start from the checkpoint.
            batches_before = self.summary.batches
            if self.gate is not None:
                self.gate.release()
            try:
                query = self.pipeline.start(self.spark, self.checkpoint, self.until_caught_up, self.settings,
                                            stop_gate=None if self.gate is None else self.gate.directory)
            except PySparkException as exc:
                cause = classify(exc)
                # The first start fails at once, whatever the cause: the
                # settings may be wrong. A restart's start that fails for a
                # cause a restart can fix (the broker still coming back) is
                # one more failure for the restart strategy to weigh.
                if restarts == 0 or cause.permanent:
                    raise PipelineError(f"pipeline {self.pipeline.name} could not start: "
                                         f"{cause.line()}", cause.type) from exc
                outcome: Failure | _Finished = cause
            except ExecutorCheckError as exc:
                raise PipelineError(f"pipeline {self.pipeline.name} could not start: {exc}",
                                     "eoskit.runtime.spark.executors.ExecutorCheckError") from exc
            else:
                if restarts == 0 and self.pipeline.chained:
                    self.printer.out.write(f"[{self.pipeline.name}] chained: {self.pipeline.source.describe()}'s "
                                           f"tasks run the transform and write to {self.pipeline.sink.describe()} "
                                           "(operator_chaining)\n")
                # Step 3: watch it.
                outcome = self._watch(query, record)
            if outcome is FINISHED:
                return
            # Step 4: restart, or give up.
            assert isinstance(outcome, Failure)
            if self.summary.batches > batches_before:
                consecutive = 0
            name = self.pipeline.name
            if outcome.permanent:
                raise PipelineError(f"pipeline {name} failed: {outcome.line()}", outcome.type)
            if consecutive < self.settings.tolerable_failures:
                consecutive += 1
                delay: float | None = 0.0
            else:
                delay = tracker.on_failure(time.monotonic())
            if delay is None:
                gave_up = ("" if restarts == 0 else f" (the restart strategy gave up after "
                           f"{restarts} restart(s): {self.settings.strategy().describe()})")
                raise PipelineError(f"pipeline {name} failed: {outcome.line()}{gave_up}",
                                     outcome.type)
            restarts += 1
            self.listeners.on_restart(restarts, outcome.line(), delay)
            if self._sleep(delay, record):
                return  # stopped while waiting: the checkpoint is consistent

    def _sleep(self, seconds: float, record) -> bool:
        """Wait, heartbeating; True if a stop was asked for meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            record.beat(force=False)
            self._read_requests()
            if self.stop.requested:
                return True
            time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
        return self.stop.requested

    def _read_requests(self) -> list[Request]:
        savepoints = []
        for request in self.control.pending():
            if request.kind == "stop":
                if request.id in self._stops_seen:
                    continue  # a stop with a savepoint is answered when the savepoint is taken
                self._stops_seen.add(request.id)
                self.stop.count += 1
                self.stop_savepoint = request
                if not request.target:
                    self.control.answer(request, status="stopping")
            elif request.kind == "cancel":
                # eoskit cancel (Flink's cancel): stop now, the batch in flight
                # too; the next start replays it from the offset log, and the
                # sinks' sweep settles what it left prepared.
                self.stop.count = max(self.stop.count, 2)
                self.status.state["cancelled"] = True
                self.control.answer(request, status="cancelling")
            elif request.kind == "savepoint":
                savepoints.append(request)
            else:
                self.control.answer(request, status="error", error=f"unknown request {request.kind!r}")
        return savepoints

    def _savepoint(self, request: Request) -> None:
        try:
            manifest = create_savepoint(self.checkpoint, request.target, job_name=self.pipeline.name,
                                        job=fingerprint.of_pipeline(self.pipeline))
        except Exception as exc:  # noqa: BLE001 - answered to the command that asked
            self.control.answer(request, status="error", error=classify(str(exc)).line())
            return
        self.listeners.on_savepoint(request.target, manifest.batch)
        self.control.answer(request, status="done", path=request.target, batch=manifest.batch)

    def _report_settled(self) -> None:
        """Tell the listeners of in-doubt transactions settled since the last
        look: the sweeps of this run noted in the sinks' decision logs."""
        try:
            found = settlements(self.checkpoint, since=self.started_at)
        except OSError as exc:  # a view of the run must never stop it
            log.warning("eoskit: cannot read the settled in-doubt transactions: %s", exc)
            return
        new = [s for s in found if s.key not in self._settled_seen]
        if new:
            self._settled_seen.update(s.key for s in new)
            self.listeners.on_in_doubt_settled(sum(s.committed for s in new),
                                               sum(s.rolled_back for s in new))

    def _await_listener(self, query: StreamingQuery) -> None:
        """Let Spark's listener bus catch up with the ended ``query``: wait,
        up to ``LISTENER_DRAIN_S``, until it has delivered the query's end to
        this run's Spark listener. Runs on the driver, in the run loop.

        The bus calls the listener from a JVM thread of its own, through a
        py4j callback into this process, some time after the event. A run
        until caught up that ends soon after the query did would otherwise
        remove the listener and end the process while the bus is inside a
        callback: the JVM, which outlives this process by a moment, then
        prints a ``Py4JException`` from ``StreamingQueryListenerBus`` after the
        run's summary. A bus that never delivers it costs the wait, no more:
        the views get the batches from ``recentProgress``."""
        if not self.spark_listener.wait_ended(str(query.runId), LISTENER_DRAIN_S):
            log.warning("eoskit: Spark's listener was not told of the query's end within %g s; "
                        "going on", LISTENER_DRAIN_S)

    def _newest_planned(self) -> int | None:
        """The newest batch in the offset log; None when there is none yet,
        or it cannot be read (the stop then goes on as if nothing were logged)."""
        try:
            planned = Checkpoint(self.checkpoint).batch_ids()
        except (OSError, ValueError):  # CheckpointError among them
            return None
        return planned[-1] if planned else None

    def _close_gate(self) -> StopGate | None:
        """core/stop_gate.py, step 1, when the source was given the gate:
        the gate, closed; None when there is none or it could not close."""
        if self.gate is None or not isinstance(self.pipeline.source, Gated):
            return None
        return self.gate if self.gate.close() else None

    def _at_boundary(self, query: StreamingQuery, boundary: BoundaryStop, last_done: int | None,
                     closed: StopGate | None) -> bool:
        """Whether a requested stop can stop the query now without cutting a
        logged batch short (a second request: at once)."""
        if self.stop.forced:
            return True
        if closed is not None:
            # core/stop_gate.py, step 3: the next planning is held, or no
            # trigger runs (one starting after the gate closed is held).
            return closed.held() or not query.status["isTriggerActive"]
        # A source without a gate (or a gate that could not close): watch the offset log (signals.BoundaryStop).
        if not boundary.ready(last_done, query.status["isTriggerActive"], self._newest_planned):
            return False
        if boundary.gave_up:
            log.warning("eoskit: batches kept starting back to back; stopped in batch %s, "
                        "which the next start replays", boundary.after + 1)
        return True

    def _watch(self, query: StreamingQuery, record) -> Failure | _Finished:
        boundary: BoundaryStop | None = None
        closed: StopGate | None = None
        reported: int | None = None
        # When the batch in flight started (as seen by this loop), and after
        # which completed batch: the timeout is per batch, however many run
        # back to back.
        trigger_since: float | None = None
        timed_after: int | None = None
        timeout = self.settings.checkpoint_timeout
        while query.isActive:
            record.beat(force=False)
            self.status.flush()  # progress its write bound held back
            for request in self._read_requests():
                self._savepoint(request)
            progress = query.lastProgress
            last_done = progress.get("batchId") if progress else None
            if last_done != reported:  # a batch completed: its planning swept
                reported = last_done
                self._report_settled()
            if self.stop.requested:
                if boundary is None:
                    # The batch in flight when the stop came must finish first.
                    boundary = BoundaryStop(-1 if last_done is None else last_done)
                    closed = self._close_gate()
                if self._at_boundary(query, boundary, last_done, closed):
                    query.stop()
                    if self.gate is not None:
                        self.gate.release()  # step 4
                    break
            if timeout is not None:
                if query.status["isTriggerActive"]:
                    if trigger_since is None or timed_after != last_done:
                        trigger_since, timed_after = time.monotonic(), last_done
                    if time.monotonic() - trigger_since > timeout:
                        query.stop()
                        self._await_listener(query)  # a failure may end the run
                        batch = 0 if last_done is None else last_done + 1
                        return Failure(f"batch {batch} ran longer than checkpoint_timeout "
                                       f"({timeout:g} s)", None)
                else:
                    trigger_since = None
            time.sleep(STOP_POLL_S if self.stop.requested else POLL_S)
        try:
            query.awaitTermination()
        except StreamingQueryException:
            pass  # read below, from query.exception()
        self._await_listener(query)
        # Spark's listener events may have been dropped (a full queue): every
        # listener (the status file, the metrics) gets each batch, once.
        for progress in query.recentProgress:
            self.listeners.on_progress(json.loads(progress.json) if hasattr(progress, "json")
                                       else dict(progress))
        self._report_settled()
        error = query.exception()
        if error is not None and not self.stop.requested:
            return classify(error)
        if self.stop_savepoint is not None and self.stop_savepoint.target:
            self._savepoint(self.stop_savepoint)
        return FINISHED
