"""Named crash points: the protocol's steps where a test kills the process.

``EOSKIT_CRASH_AT=<point>[@<min-batch>]`` arms one point: when execution
reaches it in a batch >= min-batch, the process is killed with SIGKILL —
for ``task_*`` points the Python worker alone (Spark retries the task), for
``driver_*`` points the whole process group of the job (the driver, its JVM
and workers: ``kill -9`` of the driver). Unarmed, a point is one comparison.
"""

from __future__ import annotations

import os
import signal

TASK_AFTER_PREPARE = "task_after_prepare"
TASK_DURING_WRITE = "task_during_write"
DRIVER_AFTER_DECISION = "driver_after_decision"
DRIVER_AFTER_SOME_COMMITS = "driver_after_some_commits"
DRIVER_AFTER_ALL_COMMITS = "driver_after_all_commits"
POINTS = (TASK_AFTER_PREPARE, TASK_DURING_WRITE, DRIVER_AFTER_DECISION,
          DRIVER_AFTER_SOME_COMMITS, DRIVER_AFTER_ALL_COMMITS)
ENV = "EOSKIT_CRASH_AT"


def _armed() -> tuple[str, int] | None:
    spec = os.environ.get(ENV)
    if not spec:
        return None
    name, _, batch = spec.partition("@")
    if name not in POINTS:
        raise ValueError(f"{ENV}={spec!r}: unknown crash point; known: {', '.join(POINTS)}")
    return name, int(batch or 0)


_ARMED = _armed()


def crash_point(name: str, batch: int) -> None:
    if _ARMED is None or _ARMED[0] != name or batch < _ARMED[1]:
        return
    if name.startswith("task_"):
        os.kill(os.getpid(), signal.SIGKILL)
    os.killpg(os.getpgid(0), signal.SIGKILL)
