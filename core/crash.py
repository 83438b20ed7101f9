"""Named crash points: the protocol's steps where a test kills the process,
or pauses it to break a service underneath.

``EOSKIT_CRASH_AT=<point>[@<min-batch>]`` arms one point: when execution
reaches it in a batch >= min-batch, the process is killed with SIGKILL —
for ``task_*`` points the Python worker alone (Spark retries the task), for
``driver_*`` points the whole process group of the job (the driver, its JVM
and workers: ``kill -9`` of the driver). With ``EOSKIT_CRASH_ONCE=<file>``
the point fires only while that file does not exist (it is created just
before the kill), so a retried task or a later batch goes on.

``EOSKIT_PAUSE_AT=<point>[@<min-batch>]`` with ``EOSKIT_PAUSE_DIR=<dir>``
pauses there instead (fault injection): the first process to reach the
point writes ``<dir>/reached`` ("<point>@<batch> pid <pid>"), and every
process that reaches it waits until ``<dir>/go`` exists, at most
``PAUSE_TIMEOUT_S`` (then it goes on, saying so on stderr: a forgotten
pause never hangs a job). Once ``go`` exists the point no longer pauses.
A test waits for ``reached``, breaks something (restarts the database,
cuts the broker's connections, kills a session), then writes ``go``. Both
may be armed at once; the pause comes first.

``EOSKIT_CRASH_CONTROL=<dir>`` arms a point in a process already running:
a point is armed while ``<dir>/armed`` holds ``<point>[@<min-batch>]
<once-file>``, read at every point, and fires once (``<once-file>`` as
``EOSKIT_CRASH_ONCE``). For a long-lived session whose Python workers
outlive one job (a test suite's shared Spark session: its workers inherit
the environment the JVM started with), task points only, since a driver
point would kill the session's own process; and for ``eoskit chaos``,
which arms a driver step only once the faults planned before it are done.

``EOSKIT_PAUSE_AT=<point>@<b1>,<b2>,...`` (a list of batches) pauses at
exactly those batches, each once: ``reached-<b>`` and ``go-<b>`` per batch,
so a test can change the world at several chosen batches of one run (the
broadcast test updates its rules before batches 3, 6 and 9 are planned).

Unarmed, a point is one comparison.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

TASK_AFTER_PREPARE = "task_after_prepare"
TASK_DURING_WRITE = "task_during_write"
#: Every row written, right before the task ends its transaction (prepare,
#: or a task's own commit): where a network test cuts PREPARE TRANSACTION,
#: XA PREPARE or commitTransaction.
TASK_BEFORE_END = "task_before_end"
TASK_AFTER_COMMIT = "task_after_commit"
DRIVER_AFTER_DECISION = "driver_after_decision"
DRIVER_AFTER_SOME_COMMITS = "driver_after_some_commits"
DRIVER_AFTER_ALL_COMMITS = "driver_after_all_commits"
#: Fired in a task that committed by itself (marked or at-least-once commit):
#: the driver dies with some of the batch's tasks committed and others not.
DRIVER_AFTER_TASK_COMMIT = "driver_after_task_commit"
#: The broadcast state's steps (``connectors/kafka/broadcast.py``), in the
#: driver's source process: before the rules topic's offsets are read for a
#: new batch's pin (a pause point: where a test changes the rules), after
#: the new version's snapshot is written (not yet named by the offset log),
#: and after the logged version's pointer is published (before any task).
BROADCAST_BEFORE_PIN = "broadcast_before_pin"
DRIVER_AFTER_BROADCAST_SNAPSHOT = "driver_after_broadcast_snapshot"
DRIVER_AFTER_BROADCAST_PUBLISH = "driver_after_broadcast_publish"
POINTS = (TASK_AFTER_PREPARE, TASK_DURING_WRITE, TASK_BEFORE_END, TASK_AFTER_COMMIT, DRIVER_AFTER_DECISION,
          DRIVER_AFTER_SOME_COMMITS, DRIVER_AFTER_ALL_COMMITS, DRIVER_AFTER_TASK_COMMIT,
          BROADCAST_BEFORE_PIN, DRIVER_AFTER_BROADCAST_SNAPSHOT, DRIVER_AFTER_BROADCAST_PUBLISH)
ENV = "EOSKIT_CRASH_AT"
ONCE_ENV = "EOSKIT_CRASH_ONCE"
CONTROL_ENV = "EOSKIT_CRASH_CONTROL"
#: The file of ``EOSKIT_CRASH_CONTROL``'s directory that arms a task point.
ARMED_FILE = "armed"
PAUSE_ENV = "EOSKIT_PAUSE_AT"
PAUSE_DIR_ENV = "EOSKIT_PAUSE_DIR"
#: The files of the pause protocol, inside ``EOSKIT_PAUSE_DIR``.
REACHED_FILE = "reached"
GO_FILE = "go"
#: The longest a paused process waits for ``go``.
PAUSE_TIMEOUT_S = 180.0
#: The driver's process group, exported before Spark starts: PySpark puts
#: its Python workers in groups of their own, so a driver-side crash point
#: running in one of them needs to be told which group is the driver's.
DRIVER_GROUP_ENV = "EOSKIT_DRIVER_PGID"


def remember_driver_process_group() -> None:
    """Called in the driver process before its JVM starts (inherited by it)."""
    os.environ[DRIVER_GROUP_ENV] = str(os.getpgid(0))


def _armed(env: str = ENV) -> tuple[str, int] | None:
    """``<point>[@<min-batch>]`` from ``env``, checked; None if unset."""
    return _parse(env, os.environ.get(env))


def _pause_list() -> tuple[int, ...]:
    """The batches of ``EOSKIT_PAUSE_AT=<point>@<b1>,<b2>,...``; () for the one-batch form."""
    spec = os.environ.get(PAUSE_ENV) or ""
    batches = spec.partition("@")[2]
    if "," not in batches:
        return ()
    try:
        return tuple(int(b) for b in batches.split(","))
    except ValueError:
        raise ValueError(f"{PAUSE_ENV}={spec!r}: the batches after '@' must be numbers") from None


def _parse(env: str, spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    name, _, batch = spec.partition("@")
    batch = batch.split(",")[0]  # the list form (pauses only): its first batch
    if name not in POINTS:
        raise ValueError(f"{env}={spec!r}: unknown crash point; known: {', '.join(POINTS)}")
    try:
        return name, int(batch or 0)
    except ValueError:
        raise ValueError(f"{env}={spec!r}: the batch after '@' must be a number") from None


def _pause_dir() -> Path | None:
    if _PAUSE is None:
        return None
    directory = os.environ.get(PAUSE_DIR_ENV)
    if not directory:
        raise ValueError(f"{PAUSE_ENV} is set but {PAUSE_DIR_ENV} is not: "
                         "the pause needs a directory to signal through")
    return Path(directory)


_ARMED = _armed()
_PAUSE = _armed(PAUSE_ENV)
_PAUSE_BATCHES = _pause_list()
_PAUSE_DIR = _pause_dir()
_CONTROL = os.environ.get(CONTROL_ENV) or None
_ANY = _ARMED is not None or _PAUSE is not None or _CONTROL is not None


def arm(control: str | os.PathLike[str], point: str, batch: int, once: str | os.PathLike[str],
        *, driver: bool = False) -> None:
    """Arm ``point`` from batch ``batch`` on, once, for the processes of a
    job or session started with ``EOSKIT_CRASH_CONTROL=control``; a task
    point unless ``driver`` says the job's driver may be killed."""
    if not driver and not point.startswith("task_"):
        raise ValueError(f"{CONTROL_ENV} arms task points only, not {point}: a driver point "
                         "would kill the session's own process")
    _parse(CONTROL_ENV, f"{point}@{batch}")
    folder = Path(control)
    folder.mkdir(parents=True, exist_ok=True)
    aside = folder / f".{ARMED_FILE}-{os.getpid()}"
    aside.write_text(f"{point}@{batch} {once}\n")
    os.replace(aside, folder / ARMED_FILE)


def disarm(control: str | os.PathLike[str]) -> None:
    (Path(control) / ARMED_FILE).unlink(missing_ok=True)


def _controlled() -> tuple[tuple[str, int], str] | None:
    """The task point ``EOSKIT_CRASH_CONTROL``'s directory arms now, and its once-file."""
    try:
        spec, once = (Path(_CONTROL) / ARMED_FILE).read_text().split()  # type: ignore[arg-type]
    except (OSError, ValueError):
        return None
    armed = _parse(CONTROL_ENV, spec)
    return (armed, once) if armed is not None else None


def armed() -> bool:
    """Whether any point is armed in this process: work done only to name a
    point's batch can be skipped when none is."""
    return _ANY


def crash_point(name: str, batch: int) -> None:
    if not _ANY:
        return
    if _PAUSE is not None and _PAUSE[0] == name:
        if _PAUSE_BATCHES and batch in _PAUSE_BATCHES:
            _pause(name, batch, f"-{batch}")
        elif not _PAUSE_BATCHES and batch >= _PAUSE[1]:
            _pause(name, batch)
    armed, once = _ARMED, os.environ.get(ONCE_ENV)
    if _CONTROL is not None and (armed is None or armed[0] != name):
        armed, once = _controlled() or (None, None)
    if armed is None or armed[0] != name or batch < armed[1]:
        return
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


def _pause(name: str, batch: int, suffix: str = "") -> None:
    """Announce ``reached`` (first process only), then wait for ``go``
    (``reached-<b>`` and ``go-<b>`` for a list of batches)."""
    assert _PAUSE_DIR is not None
    go = _PAUSE_DIR / (GO_FILE + suffix)
    if go.exists():
        return
    _PAUSE_DIR.mkdir(parents=True, exist_ok=True)
    # Written whole under a private name, then linked: a reader never sees
    # a half-written file, and a second process does not overwrite the first.
    own = _PAUSE_DIR / f".{REACHED_FILE}-{os.getpid()}"
    own.write_text(f"{name}@{batch} pid {os.getpid()}\n")
    try:
        os.link(own, _PAUSE_DIR / (REACHED_FILE + suffix))
    except FileExistsError:
        pass
    finally:
        own.unlink(missing_ok=True)
    deadline = time.monotonic() + PAUSE_TIMEOUT_S
    while not go.exists():
        if time.monotonic() > deadline:
            print(f"eoskit: paused at {name}@{batch} for {PAUSE_TIMEOUT_S:.0f} s without "
                  f"{go} appearing; going on", file=sys.stderr, flush=True)
            return
        time.sleep(0.05)
