"""The listener seam: what happens in a run, told to whoever listens.

Spark tells a ``StreamingQueryListener`` about each batch's progress; eoskit's
run loop adds its own events (a restart and its cause, a savepoint, in-doubt
transactions a sink's recovery settled, the end of the run). ``Listeners`` registers one Spark listener per query and fans
both out to ``RunListener`` parts, each in charge of one view:

- ``ProgressPrinter`` (``runtime/job/progress.py``): a line per batch, a bar
  toward the caught-up offsets, the run's summary;
- ``PrometheusMetrics``: an endpoint for a monitoring system to scrape
  (``eoskit run --metrics-port``);
- ``StatusFile``: the run's state as a JSON file (``--status-file``).

Spark calls its listener from another thread; every part takes the events
it is given and guards its own state.
"""

from __future__ import annotations

import json
import os
import platform
import threading
import time
from abc import ABC, abstractmethod
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from eoskit.runtime.job.lag import lag_by_topic_partition, lag_per_partition


class RunListener:
    """A part of the seam: override what it cares about. Never raises into the run."""

    def on_start(self, job: str, checkpoint: str) -> None: ...

    def on_progress(self, progress: dict[str, Any]) -> None: ...

    def on_restart(self, count: int, cause: str, delay: float) -> None: ...

    def on_savepoint(self, path: str, batch: int) -> None: ...

    def on_in_doubt_settled(self, committed: int, rolled_back: int) -> None:
        """A sink's start-up sweep settled in-doubt (prepared) transactions left
        by an earlier run or attempt: these many committed, these rolled back."""

    def on_end(self, failed: str | None) -> None: ...


class Listeners(RunListener):
    """The parts, called in order; one that raises is reported once and dropped."""

    def __init__(self, *parts: RunListener) -> None:
        self.parts = list(parts)
        self._lock = threading.Lock()
        self._last_batch: dict[Any, int] = {}  # runId -> the last batchId passed on

    def _each(self, method: str, *args: Any) -> None:
        with self._lock:
            for part in list(self.parts):
                try:
                    getattr(part, method)(*args)
                except Exception as exc:  # noqa: BLE001 - a view must never stop the job
                    print(f"eoskit: listener {type(part).__name__} failed and is switched off: "
                          f"{exc}", flush=True)
                    self.parts.remove(part)

    def on_start(self, job: str, checkpoint: str) -> None:
        self._each("on_start", job, checkpoint)

    def on_progress(self, progress: dict[str, Any]) -> None:
        """Each batch of each run of the query once: Spark's listener and the
        runner's read of ``recentProgress`` at the end (for events still
        queued when the query ended) may both bring it. Both bring a run's
        batches in order, so the last batch id per run is all it keeps (a
        run a restart, not a batch: a job of months keeps a few)."""
        run, batch = progress.get("runId"), progress.get("batchId")
        if isinstance(batch, int):
            with self._lock:
                if batch <= self._last_batch.get(run, -1):
                    return
                self._last_batch[run] = batch
        self._each("on_progress", progress)

    def on_restart(self, count: int, cause: str, delay: float) -> None:
        self._each("on_restart", count, cause, delay)

    def on_savepoint(self, path: str, batch: int) -> None:
        self._each("on_savepoint", path, batch)

    def on_in_doubt_settled(self, committed: int, rolled_back: int) -> None:
        self._each("on_in_doubt_settled", committed, rolled_back)

    def on_end(self, failed: str | None) -> None:
        self._each("on_end", failed)

    def spark_listener(self, query_name: str) -> StreamingQueryListener:
        """The Spark listener feeding this seam with one query's progress."""
        return _SparkListener(self, query_name)


class _SparkListener(StreamingQueryListener):
    """Spark's listener for one run: the ``on...`` methods run in this
    process, in a py4j callback thread, each called by the JVM's listener bus
    thread, which waits for it to return. The bus delivers a query's events in
    order, its ``QueryTerminatedEvent`` last, on its own time: behind the
    query, which ``wait_ended`` lets the run loop catch up with."""

    def __init__(self, listeners: Listeners, query_name: str) -> None:
        self.listeners = listeners
        self.query_name = query_name
        self._ended: set[str] = set()  # runIds whose end was delivered, not yet waited for
        self._delivered = threading.Condition()

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        if progress.get("name") == self.query_name:
            self.listeners.on_progress(progress)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._delivered:
            self._ended.add(str(event.runId))
            self._delivered.notify_all()

    def wait_ended(self, run_id: str, timeout: float) -> bool:
        """Wait until the bus has delivered the end of the query's run
        ``run_id`` (``StreamingQuery.runId``) here, up to ``timeout`` seconds;
        False if it did not in time. Runs on the driver, in the run loop.

        Once it has, every earlier event of that run was delivered and its
        callback has returned to the JVM; of this one's callback only py4j's
        reply is left. So the listener can be removed, and the process end,
        without the JVM inside a callback into a process that is gone (a
        ``Py4JException`` from ``StreamingQueryListenerBus``)."""
        with self._delivered:
            ended = self._delivered.wait_for(lambda: run_id in self._ended, timeout)
            self._ended.discard(run_id)  # a run ends once: its restarts do not pile up here
            return ended


class RunStatus(RunListener, ABC):
    """The run's state as one JSON document, written at every event by
    ``_write`` into the subclass's ``_store``."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {"state": "starting", "restarts": 0, "batches": 0,
                                      "in_doubt_settled": 0, "in_doubt_committed": 0,
                                      "in_doubt_rolled_back": 0}
        self._writing = threading.Lock()

    def _write(self) -> None:
        # Spark's listener thread and the run loop (settlements, flushes) both
        # write: one at a time, each a copy (a dict's copy is one step under
        # the GIL; the values are replaced, never changed in place).
        with self._writing:
            self.state["updated"] = time.time()
            self._store(dict(self.state))

    @abstractmethod
    def _store(self, state: dict[str, Any]) -> None:
        """Keep ``state`` (where: the subclass's). Called one at a time."""

    def on_start(self, job: str, checkpoint: str) -> None:
        self.state.update(job=job, checkpoint=checkpoint, state="running", pid=os.getpid())
        self._write()

    def on_progress(self, progress: dict[str, Any]) -> None:
        self._count(progress)
        self._write()

    def _count(self, progress: dict[str, Any]) -> None:
        """The batch's progress into the state."""

        lag = lag_per_partition(progress)
        self.state.update(
            state="running", batches=self.state["batches"] + 1, last_batch=progress.get("batchId"),
            last_checkpoint=progress.get("timestamp"),
            input_rows_per_second=progress.get("inputRowsPerSecond"),
            processed_rows_per_second=progress.get("processedRowsPerSecond"),
            batch_ms=(progress.get("durationMs") or {}).get("triggerExecution"),
            lag=lag, total_lag=sum(lag.values()) if lag else None)

    def on_restart(self, count: int, cause: str, delay: float) -> None:
        self.state.update(state="restarting", restarts=count, last_failure=cause)
        self._write()

    def on_savepoint(self, path: str, batch: int) -> None:
        self.state.update(last_savepoint={"path": path, "batch": batch, "at": time.time()})
        self._write()

    def on_in_doubt_settled(self, committed: int, rolled_back: int) -> None:
        s = self.state
        s.update(in_doubt_committed=s["in_doubt_committed"] + committed,
                 in_doubt_rolled_back=s["in_doubt_rolled_back"] + rolled_back,
                 in_doubt_settled=s["in_doubt_settled"] + committed + rolled_back)
        self._write()

    def on_end(self, failed: str | None) -> None:
        self.state.update(state="failed" if failed else "finished", failure=failed)
        self._write()


class StatusFile(RunStatus):
    """The run's state in a local JSON file, replaced atomically at every
    event (``eoskit run --status-file``)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def _store(self, state: dict[str, Any]) -> None:
        temporary = f"{self.path}.tmp"
        with open(temporary, "w") as handle:
            json.dump(state, handle, sort_keys=True)
        os.replace(temporary, self.path)


class CheckpointStatus(RunStatus):
    """The run's state kept beside the checkpoint (``eoskit/control/status.json``,
    on any file system the checkpoint is on), for ``eoskit status`` and
    ``eoskit list``. Every run writes it. Progress is written at most every
    ``EVERY_S`` seconds (a store such as S3 pays a request per write); a
    change of state (start, restart, savepoint, end) at once. Progress held
    back by that bound is written by ``flush``, which the run loop calls as
    it polls: a job gone idle after two quick batches must not show the
    first of them for good."""

    EVERY_S = 1.0

    def __init__(self, control: Any) -> None:
        super().__init__()
        self.control = control
        self._last = 0.0
        #: Progress counted and not yet written. Set after the count and
        #: cleared before the write's copy, so a count is never dropped.
        self._pending = False

    def _store(self, state: dict[str, Any]) -> None:
        self._last = state["updated"]
        self.control.write_status(state)

    def on_progress(self, progress: dict[str, Any]) -> None:
        self._count(progress)
        self._pending = True
        self.flush()

    def flush(self) -> None:
        """Write progress held back, once ``EVERY_S`` has passed since the
        last write. Runs on the driver: the run loop, and Spark's listener."""
        if self._pending and time.time() - self._last >= self.EVERY_S:
            self._pending = False
            self._write()


class PrometheusMetrics(RunListener):
    """Metrics on ``http://<address>:<port>/metrics`` (prometheus-client),
    served by the ``eoskit run`` process (the Spark driver) from a thread of
    its own; ``address`` 127.0.0.1 by default (``eoskit run --metrics-host``).

    Named as Prometheus's guidelines say (https://prometheus.io/docs/practices/naming/):
    an ``eoskit_`` prefix, base units (seconds), counters ending in ``_total``
    (prometheus-client adds it to a ``Counter``'s name), rates left to
    ``rate()`` over counters rather than exported as gauges. Every series
    carries the job's name as ``eoskit_job``, not ``job``: ``job`` is the
    label Prometheus gives every scrape target, which would rename eoskit's
    to ``exported_job`` unless the scrape config said ``honor_labels``. The
    metrics live in a ``CollectorRegistry`` of this listener's own, so two
    runs in one process (tests, a notebook) do not clash in the global one."""

    #: Batch-duration buckets to 10 minutes: a first batch on a cold JVM, or
    #: one a slow database holds, takes longer than the library's default 10 s.
    BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

    def __init__(self, port: int, address: str = "127.0.0.1") -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.registry = CollectorRegistry()
        self._declare(self.registry)
        self.server, self.thread = start_http_server(port, addr=address, registry=self.registry)
        self.job = "?"

    def _declare(self, registry: Any) -> None:
        """The metrics, each labelled by ``eoskit_job`` (see the class)."""
        from prometheus_client import Counter, Gauge, Histogram, Info

        job = ["eoskit_job"]
        self.build = Info("eoskit_build", "eoskit, PySpark and Python versions of the run (value 1)",
                          job, registry=registry)
        self.rows = Counter("eoskit_input_rows", "Rows the sources gave completed batches "
                            "(Spark's numInputRows); rate() of it is the input rate", job,
                            registry=registry)
        self.batches = Counter("eoskit_batches", "Completed batches (checkpoints)", job,
                               registry=registry)
        self.lag = Gauge("eoskit_lag_offsets", "Offsets not yet read when the last batch was "
                         "planned, per topic and partition", job + ["topic", "partition"],
                         registry=registry)
        self.batch_seconds = Histogram("eoskit_batch_duration_seconds",
                                       "Whole micro-batch (trigger) duration", job,
                                       registry=registry, buckets=self.BUCKETS)
        self.commit_seconds = Histogram("eoskit_commit_duration_seconds",
                                        "The batch's write and commit (Spark's addBatch)",
                                        job, registry=registry, buckets=self.BUCKETS)
        self.restarts = Counter("eoskit_restarts", "Restarts by the restart strategy", job,
                                registry=registry)
        self.in_doubt_settled = Counter(
            "eoskit_in_doubt_transactions_settled",
            "In-doubt transactions a sink's recovery settled, by outcome",
            job + ["outcome"], registry=registry)
        self.last_checkpoint = Gauge("eoskit_last_checkpoint_timestamp_seconds",
                                     "When the last batch completed", job, registry=registry)
        self.last_savepoint = Gauge("eoskit_last_savepoint_timestamp_seconds",
                                    "When the last savepoint was taken", job, registry=registry)

    def on_start(self, job: str, checkpoint: str) -> None:
        self.job = job
        self.build.labels(job).info(build_versions())
        for outcome in ("committed", "rolled_back"):
            self.in_doubt_settled.labels(job, outcome)  # shown as 0 until a sweep settles any
        for counter in (self.restarts, self.batches, self.rows):
            counter.labels(job)  # 0 from the start, so that the first increase is seen by rate()

    def on_progress(self, progress: dict[str, Any]) -> None:
        job, durations = self.job, progress.get("durationMs") or {}
        self.rows.labels(job).inc(int(progress.get("numInputRows") or 0))
        self.batches.labels(job).inc()
        for (topic, partition), behind in lag_by_topic_partition(progress).items():
            self.lag.labels(job, topic, str(partition)).set(behind)
        if "triggerExecution" in durations:
            self.batch_seconds.labels(job).observe(durations["triggerExecution"] / 1000)
        if "addBatch" in durations:
            self.commit_seconds.labels(job).observe(durations["addBatch"] / 1000)
        self.last_checkpoint.labels(job).set(time.time())

    def on_restart(self, count: int, cause: str, delay: float) -> None:
        self.restarts.labels(self.job).inc()

    def on_savepoint(self, path: str, batch: int) -> None:
        self.last_savepoint.labels(self.job).set(time.time())

    def on_in_doubt_settled(self, committed: int, rolled_back: int) -> None:
        self.in_doubt_settled.labels(self.job, "committed").inc(committed)
        self.in_doubt_settled.labels(self.job, "rolled_back").inc(rolled_back)

    def on_end(self, failed: str | None) -> None:
        """Stop serving and free the port (a later run in this process may take it)."""
        self.server.shutdown()
        self.server.server_close()


def build_versions() -> dict[str, str]:
    """The ``eoskit_build_info`` labels: eoskit's installed version, PySpark's
    and Python's (the driver's; executors run what the deploy shipped)."""
    from importlib.metadata import PackageNotFoundError, version

    import pyspark

    try:
        eoskit = version("eoskit")
    except PackageNotFoundError:  # run from a source tree, not installed
        eoskit = "unknown"
    return {"version": eoskit, "pyspark_version": pyspark.__version__,
            "python_version": platform.python_version()}
