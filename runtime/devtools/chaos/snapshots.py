"""Where a chaos run's output first differs, and the fault before that.

The outputs are compared once both runs are over; that says *what*
differs, not *when*. So while the reference and the chaos run go, a thread
reads each one's scratch target after each commit it sees (``Snapshots``),
and remembers, for each row, the batch by which each of its copies was
there. Then:

- a copy the chaos run holds beyond the reference's (a duplicate, an
  unexpected or a changed row) was first seen by the chaos run's batch E:
  the fault that caused it came before that read;
- a copy the chaos run lacks was in the reference by its batch E: batch E
  of the chaos run committed without it, so the fault came before the chaos
  run's commit of batch E.

The earliest such batch is the first difference, and the last fault
injected before that moment is the one the report names. A read lands
after a commit but may overlap the next one, so the batch is the newest
committed when the read ended: at worst one batch late, never early. Reads
stop once an output holds more than :data:`LIMIT` rows (a note says so):
each costs a full read of the scratch target.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from eoskit.runtime.devtools.chaos.compare import canonical
from eoskit.runtime.job.components import Scratch

#: Beyond this many rows in an output, it is no longer read after each commit.
LIMIT = 200_000

Row = tuple[Any, ...]
#: When a copy of a row was first seen: (batch, time of the read's end).
Seen = tuple[int, datetime]


@dataclass
class Snapshots:
    """Reads of one run's scratch target after its commits, in a thread of
    its own (:meth:`start`, :meth:`stop`); ``committed`` says which batches
    the run has committed so far."""

    scratch: Scratch
    committed: Callable[[], list[int]]
    #: Each row's columns as the scratch's reader names them.
    columns: tuple[str, ...] = ()
    #: Raw row -> when each of its copies was first seen.
    seen: dict[Row, list[Seen]] = field(default_factory=dict)
    #: The rows of the last read (after the run ended: its output).
    last: Counter[Row] = field(default_factory=Counter)
    #: Why the reads stopped before the end (too many rows), or None.
    gave_up: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _last: int = -1

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="eoskit-chaos-snapshots", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop reading; one last read once the run is over."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._read(final=True)

    def cancel(self) -> None:
        """Stop reading, without a last read (the run was cut short)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._read()
            self._stop.wait(0.05)

    def _read(self, final: bool = False) -> None:
        if self.gave_up is not None:
            return
        batches = self.committed()
        if not batches or (batches[-1] <= self._last and not final):
            return
        try:
            columns, rows, _ = self.scratch.rows()
        except Exception:  # noqa: BLE001 - a server stopped by a fault: the next commit reads again
            return
        batches = self.committed() or batches
        if len(rows) > LIMIT:
            self.gave_up = f"its output holds more than {LIMIT:,} rows, too many to read after each commit"
            return
        self.columns = tuple(columns)
        self._last = batches[-1]
        now = datetime.now(timezone.utc)
        self.last = Counter(tuple(canonical(v) for v in row) for row in rows)
        for row, count in self.last.items():
            copies = self.seen.setdefault(row, [])
            copies.extend([(self._last, now)] * (count - len(copies)))

    def rows(self, keep: Sequence[int] | None = None) -> tuple[dict[Row, list[Seen]], Counter[Row]]:
        """``(seen, last)`` with each row cut down to the columns ``keep``
        (None: all): rows that become equal pool their copies, earliest first."""
        if keep is None:
            return self.seen, self.last
        seen: dict[Row, list[Seen]] = {}
        for row, copies in self.seen.items():
            seen.setdefault(tuple(row[i] for i in keep), []).extend(copies)
        last: Counter[Row] = Counter()
        for row, count in self.last.items():
            last[tuple(row[i] for i in keep)] += count
        return {row: sorted(copies) for row, copies in seen.items()}, last


def first_difference(reference: tuple[dict[Row, list[Seen]], Counter[Row]],
                     chaos: tuple[dict[Row, list[Seen]], Counter[Row]],
                     chaos_commits: dict[int, datetime]) -> Seen | None:
    """The earliest (batch, moment) by which the chaos output differed from
    the reference (see the module's docstring), or None if the outputs
    agree. Each run is given as :meth:`Snapshots.rows` returns it; only
    rows whose copies differ in the end count (a row an upsert replaced
    later may have been read in one run and not the other).
    ``chaos_commits``: when the chaos run committed each batch."""
    (ref_seen, ref_last), (chaos_seen, chaos_last) = reference, chaos
    found: list[Seen] = []
    for row in (chaos_last - ref_last):  # copies beyond the reference's
        copies = chaos_seen.get(row, [])
        if len(copies) > ref_last[row]:
            found.append(copies[ref_last[row]])
    for row in (ref_last - chaos_last):  # copies the chaos run lacks
        copies = ref_seen.get(row, [])
        if len(copies) > chaos_last[row] and copies[chaos_last[row]][0] in chaos_commits:
            batch = copies[chaos_last[row]][0]
            found.append((batch, chaos_commits[batch]))
    return min(found) if found else None

