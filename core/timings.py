"""Where a micro-batch's time goes: an opt-in span recorder, off by default.

eoskit's work for one batch is spread over several processes Spark starts:
the sink's planning process (check, sweep), the driver's commit process
(the coordinator), and the Python workers that run the tasks (the Kafka
source's read, the sink's write and prepare). Spark's own progress reports
time only its own phases (``durationMs``). With the environment variable
``EOSKIT_TIMINGS_DIR`` set to a directory, every process appends one JSON
line per span to its own file there (``<pid>.jsonl``)::

    {"batch": 3, "partition": 1, "phase": "task.prepare", "ms": 4.1, "pid": 812, "end": 1.7e9}

and ``benchmarks/kafka_to_postgres.py --breakdown`` sets the variable and
reads the files back (:func:`load`, :func:`per_batch`). Spark starts its
Python processes from the JVM, which inherits the environment of the
process that launched it, so the variable must be set before the Spark
session starts.

Off (the variable unset or empty), :func:`span` returns a shared no-op
context manager after one environment lookup: nothing is timed, nothing is
written. Spans only observe: they never raise into the code they time (a
failed write of a line is dropped), and they change no step of the protocol.

Spans nest: a span given ``batch``/``partition`` passes them to the spans
inside it; a span given none takes them from the enclosing span, or else,
inside a Spark task, from the task's context (batch id and partition).
"""

from __future__ import annotations

import contextvars
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TypeVar

ENV = "EOSKIT_TIMINGS_DIR"

_NOOP: AbstractContextManager[None] = nullcontext()
#: (batch, partition) of the enclosing span, for the spans nested in it.
_scope: contextvars.ContextVar[tuple[int | None, int | None]] = contextvars.ContextVar(
    "eoskit_timings_scope", default=(None, None))


T = TypeVar("T")

def directory() -> str | None:
    """Where spans go, or None when recording is off."""
    return os.environ.get(ENV) or None


def enabled() -> bool:
    return directory() is not None


def span(phase: str, batch: int | None = None,
         partition: int | None = None) -> AbstractContextManager[None]:
    """Time the ``with`` block as ``phase`` (a no-op unless recording is on)."""
    target = directory()
    if target is None:
        return _NOOP
    return _span(target, phase, batch, partition)


@contextmanager
def _span(target: str, phase: str, batch: int | None, partition: int | None) -> Iterator[None]:
    batch, partition = _identity(batch, partition)
    token = _scope.set((batch, partition))
    started = time.perf_counter()
    try:
        yield
    finally:
        elapsed_ms = (time.perf_counter() - started) * 1000
        _scope.reset(token)
        _append(target, phase, elapsed_ms, batch, partition)


def record(phase: str, ms: float, batch: int | None = None, partition: int | None = None) -> None:
    """Record a duration measured by the caller (e.g. the time a generator
    spent fetching, summed over its resumptions); a no-op when off."""
    target = directory()
    if target is None:
        return
    batch, partition = _identity(batch, partition)
    _append(target, phase, ms, batch, partition)


def time_inside(items: Iterable[T], done: Callable[[float], None]) -> Iterator[T]:
    """``items``, passed through; ``done(seconds)`` gets the time spent
    inside the iterator (not the consumer's time between items) once it
    ends, is closed or fails."""
    inside = 0.0
    iterator = iter(items)
    try:
        while True:
            started = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                inside += time.perf_counter() - started
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        done(inside)


def _identity(batch: int | None, partition: int | None) -> tuple[int | None, int | None]:
    if batch is None and partition is None:
        batch, partition = _scope.get()
    if batch is None and partition is None:
        batch, partition = _task_identity()
    return batch, partition


def _task_identity() -> tuple[int | None, int | None]:
    """(batch id, partition) of the Spark task this process runs, if any."""
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            return None, None
        batch = context.getLocalProperty("streaming.sql.batchId")
        return (int(batch) if batch is not None else None), context.partitionId()
    except Exception:  # noqa: BLE001 - an observer never fails the observed
        return None, None


def _append(target: str, phase: str, ms: float, batch: int | None, partition: int | None) -> None:
    line = json.dumps({"batch": batch, "partition": partition, "phase": phase,
                       "ms": round(ms, 3), "pid": os.getpid(), "end": time.time()})
    try:
        # Opened per line: a forked worker never shares a buffered handle
        # with its parent, and a reader may remove the files between queries.
        with open(os.path.join(target, f"{os.getpid()}.jsonl"), "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
    except OSError:
        pass


# ------------------------------------------------------------------ reading


@dataclass(frozen=True)
class Span:
    batch: int | None
    partition: int | None
    phase: str
    ms: float
    pid: int


def parse(lines: Iterable[str]) -> list[Span]:
    """Spans from JSON lines; a torn last line (a killed process) is skipped."""
    spans = []
    for line in lines:
        try:
            data = json.loads(line)
            spans.append(Span(data["batch"], data["partition"], data["phase"],
                              float(data["ms"]), int(data["pid"])))
        except (ValueError, KeyError, TypeError):
            continue
    return spans


def load(target: str, clear: bool = False) -> list[Span]:
    """Every span recorded under ``target``; ``clear`` removes the files read
    (processes reopen their file per line, so the next query starts empty)."""
    spans: list[Span] = []
    if not os.path.isdir(target):
        return spans
    for name in sorted(os.listdir(target)):
        if not name.endswith(".jsonl"):
            continue
        path = os.path.join(target, name)
        with open(path, encoding="utf-8") as handle:
            spans += parse(handle)
        if clear:
            os.remove(path)
    return spans


def per_batch(spans: Iterable[Span]) -> dict[int, dict[str, float]]:
    """Milliseconds per batch and phase: a phase's spans are summed per
    partition (a task's own time in it; the driver's spans have none), and
    the batch's value is its slowest partition's. Tasks run side by side,
    so that is the phase's share of the batch's wall time, not a CPU sum.
    Spans with no batch are left out."""
    sums: dict[tuple[int, str, int | None], float] = {}
    for s in spans:
        if s.batch is None:
            continue
        key = (s.batch, s.phase, s.partition)
        sums[key] = sums.get(key, 0.0) + s.ms
    out: dict[int, dict[str, float]] = {}
    for (batch, phase, _partition), ms in sums.items():
        phases = out.setdefault(batch, {})
        phases[phase] = max(phases.get(phase, 0.0), ms)
    return out


def medians(table: dict[int, dict[str, float]], batches: Iterable[int]) -> dict[str, float]:
    """The median of each phase over ``batches``, a batch without the phase
    counting as 0 ms (e.g. the sink's check, done once per process)."""
    chosen = list(batches)
    phases = sorted({p for b in chosen for p in table.get(b, {})})
    if not chosen:
        return {}
    return {p: statistics.median(table.get(b, {}).get(p, 0.0) for b in chosen) for p in phases}
