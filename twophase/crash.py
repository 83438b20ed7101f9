"""Named crash points: the protocol's steps where a test kills the process.

``EOSKIT_CRASH_AT=<point>[@<min-batch>]`` arms one point: when execution
reaches it in a batch >= min-batch, the process is killed with SIGKILL —
for ``task_*`` points the Python worker alone (Spark retries the task), for
``driver_*`` points the whole process group of the job (the driver, its JVM
and workers: ``kill -9`` of the driver). With ``EOSKIT_CRASH_ONCE=<file>``
the point fires only while that file does not exist (it is created just
before the kill), so a retried task or a later batch goes on.
Unarmed, a point is one comparison.
"""

from __future__ import annotations

import os
import signal

TASK_AFTER_PREPARE = "task_after_prepare"
TASK_DURING_WRITE = "task_during_write"
TASK_AFTER_COMMIT = "task_after_commit"
DRIVER_AFTER_DECISION = "driver_after_decision"
DRIVER_AFTER_SOME_COMMITS = "driver_after_some_commits"
DRIVER_AFTER_ALL_COMMITS = "driver_after_all_commits"
#: Fired in a task that committed by itself (marked or at-least-once commit):
#: the driver dies with some of the batch's tasks committed and others not.
DRIVER_AFTER_TASK_COMMIT = "driver_after_task_commit"
POINTS = (TASK_AFTER_PREPARE, TASK_DURING_WRITE, TASK_AFTER_COMMIT, DRIVER_AFTER_DECISION,
          DRIVER_AFTER_SOME_COMMITS, DRIVER_AFTER_ALL_COMMITS, DRIVER_AFTER_TASK_COMMIT)
ENV = "EOSKIT_CRASH_AT"
ONCE_ENV = "EOSKIT_CRASH_ONCE"
#: The driver's process group, exported before Spark starts: PySpark puts
#: its Python workers in groups of their own, so a driver-side crash point
#: running in one of them needs to be told which group is the driver's.
DRIVER_GROUP_ENV = "EOSKIT_DRIVER_PGID"


def remember_driver_process_group() -> None:
    """Called in the driver process before its JVM starts (inherited by it)."""
    os.environ[DRIVER_GROUP_ENV] = str(os.getpgid(0))


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
    once = os.environ.get(ONCE_ENV)
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    if name.startswith("task_"):
        os.kill(os.getpid(), signal.SIGKILL)
    # The driver side of the protocol runs in a PySpark worker of its own
    # process group: kill the driver's group, then this process itself.
    os.killpg(int(os.environ.get(DRIVER_GROUP_ENV) or os.getpgid(0)), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
