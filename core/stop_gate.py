"""A stop at a batch boundary, held by the source: the runner's side and the
source's side of one small file protocol.

Why the source: Spark plans a micro-batch on the query's thread in three
steps, every source's ``latestOffset``, then the offset log write, then the
batch. Once ``latestOffset`` has returned, the log write follows under
Spark's ``runUninterruptibly``, so a ``query.stop()`` that lands after it cuts
a logged batch short (safe: it is replayed, as after a crash; but not the
boundary a stop promises). Polling from the driver cannot close that window
when batches run back to back (a batch longer than the trigger interval, or
the batch ``ProcessingTime`` stateful queries run at every trigger). The
source can: it is asked before anything of the next batch is logged.

The steps (``runtime/job/runner.py`` runs 1, 3 and 4; the source runs 2):

1. The runner closes the gate: it creates ``<dir>/stop``.
2. A source whose ``latestOffset`` finds ``stop`` writes ``<dir>/held`` and
   waits there without returning, so nothing of the next batch is logged.
   It checks the file first, before anything else it does, so any planning
   that began after step 1 is held.
3. The runner stops the query once ``held`` exists, or once no trigger is
   active (read after step 1: a trigger starting later is held at step 2).
   ``query.stop()`` interrupts the query's thread, blocked reading the
   source's reply on a socket channel; Spark counts the
   ``ClosedByInterruptException`` as a stop, not as a failure. A planning
   that checked before step 1 returns and logs its batch with the trigger
   active, so the runner waits for that batch to end and the next one's
   planning to be held.
4. The runner releases the gate (removes both files). The held ``latestOffset``
   returns to a reader that is gone, and its worker ends.

Why the hold is bounded (``HOLD_S``): if a Spark version did not interrupt
the held read, ``query.stop()`` would wait for it forever. After ``HOLD_S``
the source returns "no new data"; the stop then ends as it did before this
gate (a stateful query may log, and leave for the next start, one batch
without input). The hold also ends when its parent process changes (the
driver and its JVM are gone).
"""

from __future__ import annotations

import os
import time

#: How long a source holds a planning for a stop before giving up on it.
HOLD_S = 30.0
POLL_S = 0.02


class StopGate:
    """The gate in ``directory`` (local to the driver's host, where Spark
    runs a Python source's planning)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.stop_path = os.path.join(directory, "stop")
        self.held_path = os.path.join(directory, "held")

    # The runner's side (the driver) ------------------------------------------

    def close(self) -> bool:
        """Step 1: from now on, a planning is held. False if the gate could
        not be closed (the caller stops as it would without a gate). The
        folder is made again if it is gone: a job runs for weeks, and a
        temp cleaner may remove an empty folder that old."""
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(self.stop_path, "w"):
                pass
        except OSError:
            return False
        return True

    def held(self) -> bool:
        """Step 3: whether a source holds the next batch's planning."""
        return os.path.exists(self.held_path)

    def release(self) -> None:
        """Step 4: plannings go on (a held one returns)."""
        for path in (self.stop_path, self.held_path):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass

    # The source's side (its planner, a Python worker on the driver's host) ---

    def hold(self, hold_s: float = HOLD_S) -> bool:
        """Step 2, called first in ``latestOffset``: False at once while the
        gate is open; else mark the planning held and wait until the gate
        is released, ``hold_s`` passes or the parent process changes, then True
        (the caller returns "no new data")."""
        if not os.path.exists(self.stop_path):
            return False
        try:
            with open(self.held_path, "w"):
                pass
        except OSError:
            pass  # the runner then waits for the bound, as without a gate
        deadline, parent = time.monotonic() + hold_s, os.getppid()
        while os.path.exists(self.stop_path) and time.monotonic() < deadline and os.getppid() == parent:
            time.sleep(POLL_S)
        return True
