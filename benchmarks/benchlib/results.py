"""What the benchmarks share about their data and their figures: the orders'
schema and tables, and the results of a plain loop and of a query."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from eoskit.core import timings

ORDER_SCHEMA = "order_id BIGINT, customer STRING, amount DECIMAL(12,2), created_at TIMESTAMP"
TABLE_DDL = "(order_id bigint, customer text, amount numeric(12,2), created_at timestamptz)"
COLUMNS = ("order_id", "customer", "amount", "created_at")
BASELINE_TABLE = "bench_baseline"
EOSKIT_TABLE = "bench_eoskit"
CONSUME_BATCH = 10_000
#: The baseline gives up when no record arrives for this long: a stuck read
#: must fail the benchmark, not hang it.
STALL_TIMEOUT_S = 60.0
#: Every produced record carries this timestamp (see produce_orders).
CREATED_AT = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)


@dataclass
class Timings:
    """Seconds spent per phase, accumulated with ``phase``."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


@dataclass
class BaselineResult:
    """A run outside Spark: the plain loop, or another contender."""

    rows: int
    wall_s: float
    phases: Timings
    #: A peer run in a process of its own: the JSON line it printed (its
    #: batches among them), kept for --json-out.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class StreamResult:
    """One availableNow query: wall time and what Spark's progress reports say."""

    rows: int
    wall_s: float
    batches: int
    batch_rows: list[int]  # numInputRows of each batch with data
    durations_ms: list[dict[str, int]]  # durationMs of each of those batches
    failed_tasks: int | None = None  # task attempts that failed (retried), None if unknown
    batch_ids: list[int] = field(default_factory=list)  # batchId of each of those batches
    #: eoskit's own spans (EOSKIT_TIMINGS_DIR), when the run recorded them
    spans: list[timings.Span] = field(default_factory=list)

    def batch_seconds(self, first: int = 0) -> float:
        """Sum of triggerExecution from batch ``first`` on: first=1 leaves out
        the one-off start-up (Python workers, the sink's first planning)."""
        return sum(d.get("triggerExecution", 0) for d in self.durations_ms[first:]) / 1000

    def batch_rows_from(self, first: int = 0) -> int:
        return sum(self.batch_rows[first:])


@dataclass
class TableStats:
    count: int
    distinct_ids: int
    amount: Decimal | None
    min_created: datetime | None
    max_created: datetime | None
    #: What the reader found wrong besides these numbers (e.g. a Kafka
    #: topic's open transactions, or a record whose fields are wrong).
    problems: tuple[str, ...] = ()
