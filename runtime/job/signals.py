"""SIGINT/SIGTERM during a run: the first asks for a stop at the next batch
boundary, a second stops at once (the batch in flight is then replayed from
the offset log on the next start).

Where the boundary is: a source that can hold the next batch's planning
(eoskit-kafka) is given a gate, and the runner stops the query while that
planning is held (``core/stop_gate.py``). For any other source,
``BoundaryStop`` watches the offset log: Spark's micro-batch loop plans the
next batch as soon as one ends when batches run back to back (a batch longer
than the trigger interval, or the no-data batches a stateful query runs), so
by the time the runner sees the batch in flight end, the next one may already
be in the offset log. Stopping then would cut that batch short: safe (it is
replayed from the offset log, as after a crash), but not the boundary the stop
promised. So the runner waits for that batch too, up to STOP_DRAIN_BATCHES of
them, and stops at once whenever the query is between triggers.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass

#: How many batches the query planned before the runner saw the previous one
#: end that a stop waits for, beyond the batch in flight when it came; after
#: that it stops the query anyway (the batch cut short is replayed).
STOP_DRAIN_BATCHES = 3


class StopRequest:
    """How many stop requests arrived (signals, or ``eoskit stop``)."""

    def __init__(self) -> None:
        self.count = 0

    @property
    def requested(self) -> bool:
        return self.count > 0

    @property
    def forced(self) -> bool:
        return self.count > 1

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1

    def installed(self) -> "_Installed":
        return _Installed(self)


class _Installed:
    def __init__(self, request: StopRequest) -> None:
        self.request = request
        self.previous: dict[int, object] = {}

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self.request._handle)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


@dataclass
class BoundaryStop:
    """A stop waiting for a batch boundary. ``after``: the newest batch
    complete when the stop came (-1: none yet); the batch after it is the
    one in flight, which finishes first."""

    after: int
    drained: int = 0

    def ready(self, last_done: int | None, trigger_active: bool, newest_planned: Callable[[], int | None]) -> bool:
        """Whether the query can be stopped now without cutting a logged
        batch short. ``last_done``: the newest completed batch (Spark's
        lastProgress); ``trigger_active``: whether a trigger is running;
        ``newest_planned``: the newest batch in the offset log (read only
        once a batch has completed)."""
        if not trigger_active:
            return True  # between triggers: nothing is in flight
        done = -1 if last_done is None else last_done
        if done <= self.after:
            return False  # the batch in flight is still running
        planned = newest_planned()
        if planned is None or planned <= done:
            return True  # at most the next batch's planning is cut: nothing of it is logged
        # The next batch was logged before this loop saw the last one end: it is in flight now.
        self.after = done
        self.drained += 1
        return self.gave_up

    @property
    def gave_up(self) -> bool:
        """Whether the stop stopped waiting with a logged batch in flight
        (``after + 1``), which the next start replays."""
        return self.drained > STOP_DRAIN_BATCHES
