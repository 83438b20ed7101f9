"""Live progress of a running query, read from Spark's progress reports.

Spark publishes one ``StreamingQueryProgress`` per micro-batch; lag comes
from the source's reported latest offsets against the batch's end offsets,
so it is the number of offsets not yet read, per topic-partition.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, TextIO

from eoskit.runtime.job.lag import lag_per_partition
from eoskit.runtime.job.listeners import RunListener

#: The summary's batch-duration percentiles are over this many last batches.
DURATIONS_KEPT = 10_000


@dataclass
class RunSummary:
    """What a run did, printed at its end."""

    batches: int = 0
    rows: int = 0
    first_batch: int | None = None
    last_batch: int | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    lag: int | None = None
    last_commit: str | None = None
    #: Flink's checkpoint statistics, in Spark terms: batches completed and
    #: failed (a failure fails the batch in flight), restarts, the last restore.
    failed_batches: int = 0
    restarts: int = 0
    last_restore: str | None = None
    #: Durations of the last ``DURATIONS_KEPT`` batches: a job runs for weeks.
    batch_ms: deque[int] = field(default_factory=lambda: deque(maxlen=DURATIONS_KEPT))
    #: In-doubt transactions the sinks' recovery settled during the run.
    in_doubt_committed: int = 0
    in_doubt_rolled_back: int = 0

    @property
    def seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    def render(self, name: str) -> str:
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        span = "" if self.first_batch is None else f" (batches {self.first_batch}..{self.last_batch})"
        lag = "unknown" if self.lag is None else str(self.lag)
        return (
            f"[{name}] done: {self.batches} batches{span}, {self.rows} rows in "
            f"{self.seconds:.1f}s ({rate:,.0f} rows/s), lag {lag}, "
            f"last commit {self.last_commit or 'none'}\n"
            f"[{name}] checkpoints: {self.batches} completed, {self.failed_batches} failed, "
            f"{self.restarts} restart(s), last restore {self.last_restore or 'none'}, "
            f"batch duration {self.percentiles()}{self._of_last()}, in-doubt transactions settled "
            f"{self.in_doubt_committed + self.in_doubt_rolled_back} ({self.in_doubt_committed} "
            f"committed, {self.in_doubt_rolled_back} rolled back)"
        )

    def to_json(self, name: str, checkpoint: str | None = None) -> dict[str, Any]:
        """The summary as ``eoskit run --json`` prints it (the keys of
        ``eoskit status --json``'s run state where they are the same)."""
        ordered = sorted(self.batch_ms)
        cuts = statistics.quantiles(ordered, n=100, method="inclusive") if len(ordered) > 1 else None
        durations = None if not ordered else {
            "p50": cuts[49] if cuts else ordered[0], "p90": cuts[89] if cuts else ordered[0],
            "p99": cuts[98] if cuts else ordered[0], "max": ordered[-1], "batches": len(ordered)}
        return {
            "job": name, "checkpoint": checkpoint, "batches": self.batches, "rows": self.rows,
            "first_batch": self.first_batch, "last_batch": self.last_batch,
            "seconds": round(self.seconds, 3),
            "rows_per_second": round(self.rows / self.seconds, 3) if self.seconds > 0 else 0.0,
            "lag": self.lag, "last_commit": self.last_commit, "failed_batches": self.failed_batches,
            "restarts": self.restarts, "last_restore": self.last_restore, "batch_ms": durations,
            "in_doubt_committed": self.in_doubt_committed,
            "in_doubt_rolled_back": self.in_doubt_rolled_back,
        }

    def _of_last(self) -> str:
        kept = len(self.batch_ms)
        return f" (last {kept} batches)" if kept == self.batch_ms.maxlen and kept < self.batches else ""

    def percentiles(self) -> str:
        if not self.batch_ms:
            return "n/a"
        ordered = sorted(self.batch_ms)
        if len(ordered) == 1:
            return f"{ordered[0]} ms"
        cuts = statistics.quantiles(ordered, n=100, method="inclusive")
        return f"p50 {cuts[49]:.0f} ms, p90 {cuts[89]:.0f} ms, p99 {cuts[98]:.0f} ms, max {ordered[-1]} ms"


class ProgressPrinter(RunListener):
    """One line per completed batch: batch id, rows, rows/s, lag, and toward
    a caught-up end a bar; a line per restart and savepoint."""

    def __init__(self, name: str, out: TextIO | None = None, bar: bool = False) -> None:
        self.name = name
        self.bar = bar
        self.out = out or sys.stderr
        self.summary = RunSummary()
        self._last_batch: int | None = None  # batch ids only grow: nothing per batch is kept

    def observe(self, progress: dict[str, Any] | None) -> None:
        if not progress:
            return
        batch = progress.get("batchId")
        if not isinstance(batch, int) or (self._last_batch is not None and batch <= self._last_batch):
            return
        self._last_batch = batch
        rows = int(progress.get("numInputRows") or 0)
        rate = float(progress.get("processedRowsPerSecond") or 0.0)
        lag = lag_per_partition(progress)
        s = self.summary
        s.batches += 1
        s.rows += rows
        s.first_batch = batch if s.first_batch is None else s.first_batch
        s.last_batch = batch
        s.lag = sum(lag.values()) if lag else s.lag
        s.last_commit = progress.get("timestamp")
        duration = (progress.get("durationMs") or {}).get("triggerExecution")
        if isinstance(duration, int):
            s.batch_ms.append(duration)
        worst = ", ".join(f"{tp}={n}" for tp, n in sorted(lag.items(), key=lambda kv: -kv[1])[:3] if n)
        self.out.write(
            f"[{self.name}] batch {batch}: {rows} rows, {rate:,.0f} rows/s, "
            f"lag {s.lag if s.lag is not None else '?'}"
            + (f" ({worst})" if worst else "")
            + (f"  {self._bar(s.lag)}" if self.bar and s.lag is not None else "")
            + "\n"
        )
        self.out.flush()

    def _bar(self, lag: int) -> str:
        done = self.summary.rows
        share = 1.0 if done + lag == 0 else done / (done + lag)
        filled = int(share * 20)
        return f"[{'#' * filled}{'.' * (20 - filled)}] {share:4.0%} caught up"

    def on_progress(self, progress: dict[str, Any]) -> None:
        self.observe(progress)

    def on_restart(self, count: int, cause: str, delay: float) -> None:
        self.summary.restarts = count
        self.summary.failed_batches += 1
        self.summary.last_restore = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + delay))
        self.out.write(f"[{self.name}] restart {count} in {delay:.1f}s after: {cause}\n")
        self.out.flush()

    def on_savepoint(self, path: str, batch: int) -> None:
        self.out.write(f"[{self.name}] savepoint of batch {batch}: {path}\n")
        self.out.flush()

    def on_in_doubt_settled(self, committed: int, rolled_back: int) -> None:
        self.summary.in_doubt_committed += committed
        self.summary.in_doubt_rolled_back += rolled_back
        self.out.write(f"[{self.name}] recovery settled {committed + rolled_back} in-doubt "
                       f"transaction(s): {committed} committed, {rolled_back} rolled back\n")
        self.out.flush()
