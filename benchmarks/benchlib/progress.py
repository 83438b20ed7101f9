"""Every batch's progress of a benchmark's query, not only Spark's last 100.

Spark keeps a query's last ``spark.sql.streaming.numRecentProgressUpdates``
(100 by default) progress reports in ``StreamingQuery.recentProgress``, so a
run of more than 100 batches (the growth curves' 10,000-row batches over
1M records) lost its first batches, the first batch among them, when the
benchmarks read that window. :func:`recording` registers a
``StreamingQueryListener`` before the query starts; it keeps every
``onQueryProgress`` of the session's queries, keyed by run, and
:meth:`ProgressLog.batches` gives one query's once the listener bus has
delivered its end.

Where it runs: in the benchmark's driver process. The JVM's listener bus
calls the listener through a py4j callback, in a thread of its own, some
time after each event (never inside the batch: the bus does not hold the
query up). Every benchmark reads its progress here: ``benchlib.spark``
(``run_stream``), ``spark_peer.run_available_now`` (the Spark runners and
the plain script), ``fixed_cost.py`` and ``latency.py``.

A batch seen only by ``recentProgress`` (the bus late past the wait) is
merged in; whatever still misses between the first batch and the last is
an error naming the batches, never a figure taken over fewer batches.
Imports PySpark only in :func:`recording`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

#: How long to wait for the listener bus to deliver a query's end, after
#: the query has ended; the bus is behind the query by milliseconds.
DRAIN_S = 30.0


class ProgressLost(RuntimeError):
    """A query's progress misses batches between its first and its last."""


class ProgressLog:
    """Each run's progress reports (Spark's JSON, as dicts), in the order
    delivered, and which runs have ended. Fed by :class:`_Listener` (or
    by hand, in tests); read by the benchmark's thread."""

    def __init__(self) -> None:
        self._reports: dict[str, list[dict[str, Any]]] = {}
        self._ended: set[str] = set()
        self._changed = threading.Condition()

    def add(self, progress: dict[str, Any]) -> None:
        with self._changed:
            self._reports.setdefault(str(progress.get("runId")), []).append(progress)
            self._changed.notify_all()

    def end(self, run_id: str) -> None:
        with self._changed:
            self._ended.add(str(run_id))
            self._changed.notify_all()

    def count_with_rows(self, run_id: str) -> int:
        """The batches with rows delivered so far: to poll a running query by."""
        with self._changed:
            return len(with_rows(self._reports.get(str(run_id), [])))

    def wait_ended(self, run_id: str, timeout: float = DRAIN_S) -> bool:
        """Wait until the bus delivered the end of run ``run_id``: every
        earlier report of that run is here then. False after ``timeout``."""
        with self._changed:
            return self._changed.wait_for(lambda: str(run_id) in self._ended, timeout)

    def batches(self, query: Any, first_batch: int = 0, timeout: float = DRAIN_S) -> list[dict[str, Any]]:
        """The ended ``query``'s reports of batches with rows, one per batch,
        in batch order: the listener's, and ``query.recentProgress``'s where
        the bus was late. ``first_batch``: the run's first batch id (0 on a
        fresh checkpoint). ProgressLost names the batches that are in neither."""
        run_id = str(query.runId)
        self.wait_ended(run_id, timeout)
        with self._changed:
            delivered = list(self._reports.get(run_id, []))
        return complete(delivered + list(query.recentProgress), first_batch, run_id)


def with_rows(reports: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in reports if p.get("numInputRows", 0) > 0]


def complete(reports: list[dict[str, Any]], first_batch: int, run_id: str) -> list[dict[str, Any]]:
    """One report per batch id (the one with rows, where a batch id has an
    idle report too), in batch order, the batches with rows; ProgressLost
    when a batch id from ``first_batch`` to the last is missing."""
    by_batch: dict[int, dict[str, Any]] = {}
    for report in reports:
        batch = int(report["batchId"])
        if batch not in by_batch or report.get("numInputRows", 0) > by_batch[batch].get("numInputRows", 0):
            by_batch[batch] = report
    if not by_batch:
        return []
    missing = sorted(set(range(first_batch, max(by_batch) + 1)) - set(by_batch))
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        raise ProgressLost(f"run {run_id}: no progress for {len(missing)} batch(es) ({shown}) of "
                           f"{first_batch}..{max(by_batch)}: neither the listener nor recentProgress "
                           "has them, and a figure over fewer batches would be wrong")
    return with_rows(by_batch[b] for b in sorted(by_batch))


def _listener_class() -> type:
    from pyspark.sql.streaming import StreamingQueryListener

    class _Listener(StreamingQueryListener):
        """Spark's listener feeding a ProgressLog (see the module's docstring)."""

        def __init__(self, log: ProgressLog) -> None:
            self.log = log

        def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's names
            pass

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            self.log.add(json.loads(event.progress.json))

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            self.log.end(str(event.runId))

    return _Listener


@contextmanager
def recording(spark: Any) -> Iterator[ProgressLog]:
    """A ProgressLog of ``spark``'s queries started inside the block: its
    listener is added first and removed at the end (after the block has read
    its query's batches, so the bus is in no callback into this process)."""
    log = ProgressLog()
    listener = _listener_class()(log)
    spark.streams.addListener(listener)
    try:
        yield log
    finally:
        spark.streams.removeListener(listener)
