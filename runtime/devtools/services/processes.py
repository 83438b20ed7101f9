"""Starting and stopping detached server processes.

Servers are started in their own session (so they outlive the CLI call that
started them, and so that the server and all of its children share one
process group that ``down`` can sweep), with output appended to a log file.
A pid alone is not trusted: the process start time is stored alongside it so
that a recycled pid is never mistaken for, or killed as, one of ours.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

# Popen objects of processes started by this Python process. Keeping them
# lets us reap our own children (a zombie still looks alive to kill(pid, 0))
# and avoids "subprocess still running" ResourceWarnings.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ProcessRef:
    """A process identified by pid plus start time (clock ticks since boot)."""

    pid: int
    start_time: int | None


#: Clock ticks per second, the unit of :func:`process_start_time`.
TICKS = os.sysconf("SC_CLK_TCK")
#: The states of a process that has exited (a zombie not reaped yet holds no ports or files).
ENDED = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def _process(pid: int) -> psutil.Process | None:
    """The live (not zombie) process ``pid``, or None."""
    try:
        process = psutil.Process(pid)
        return None if process.status() in ENDED else process
    except psutil.Error:
        return None


def _ticks(process: psutil.Process) -> int:
    """When ``process`` started, in clock ticks since boot (the kernel's
    count, which state files written before psutil hold): psutil's create
    time less the boot time, both read now, since the boot time moves with
    the wall clock and the difference does not."""
    return round((process.create_time() - psutil.boot_time()) * TICKS)


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (None if it is gone)."""
    try:
        return _ticks(psutil.Process(pid))
    except psutil.Error:
        return None


def _reap(pid: int) -> None:
    """Collect our own exited child so it stops counting as alive."""
    proc = _CHILDREN.get(pid)
    if proc is not None and proc.poll() is not None:
        del _CHILDREN[pid]


def is_alive(ref: ProcessRef) -> bool:
    """True if the very process that ``ref`` names is still running."""
    _reap(ref.pid)
    process = _process(ref.pid)
    try:
        return process is not None and (ref.start_time is None or _ticks(process) == ref.start_time)
    except psutil.Error:
        return False  # gone meanwhile


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``.

    Orphaned zombies are skipped: this machine's init may not reap them, and
    they hold no ports or files. (psutil has no process group: ``getpgid``
    reads it.)
    """
    members = []
    for process in psutil.process_iter(["status"]):
        if process.info["status"] in ENDED:
            continue
        try:
            if os.getpgid(process.pid) == pgid:
                members.append(process.pid)
        except OSError:
            continue  # gone meanwhile
    return members


def start_process(
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
    netns: str | None = None,
) -> ProcessRef:
    """Start ``argv`` detached, appending its output to ``log_path``.

    ``user`` runs it as another system user (PostgreSQL refuses to run as
    root); that needs root, which is exactly when it is used. ``netns``
    runs it inside that network namespace (a host of a network lab,
    ``netlab/``): ``ip netns exec`` then ``setpriv`` for the user, both of
    which exec in place, so the pid is the server's.
    """
    if netns is not None:
        drop = [] if user is None else ["setpriv", f"--reuid={user}", f"--regid={_primary_group(user)}",
                                        "--init-groups", "--"]
        argv, user = ["ip", "netns", "exec", netns, *drop, *argv], None
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        log.flush()
        extra: dict[str, object] = {}
        if user is not None:
            extra = {"user": user, "group": _primary_group(user), "extra_groups": []}
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
            **extra,  # type: ignore[arg-type]
        )
    _CHILDREN[proc.pid] = proc
    return ProcessRef(proc.pid, process_start_time(proc.pid))


def run_logged(
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    user: str | None = None,
    timeout: float = 300.0,
) -> int:
    """Run a one-shot setup command (initdb, install-db) into the log; its exit code."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    extra: dict[str, object] = {}
    if user is not None:
        extra = {"user": user, "group": _primary_group(user), "extra_groups": []}
    with open(log_path, "ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} running: {' '.join(argv)}\n".encode())
        log.flush()
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            timeout=timeout,
            check=False,
            **extra,  # type: ignore[arg-type]
        )
    return done.returncode


def _primary_group(user: str) -> int:
    """Group id to run as, since ``user=`` alone keeps root's groups."""
    return pwd.getpwnam(user).pw_gid


def stop_process(ref: ProcessRef, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
    """Stop a server and every process left in its group.

    The leader first gets ``sig`` (its clean-shutdown signal); after
    ``timeout`` the whole group is killed. A pid that now belongs to some
    other process is left alone.
    """
    pid = ref.pid
    if is_alive(ref):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
        _wait(lambda: not is_alive(ref), timeout)
    else:
        current = process_start_time(pid)
        if current is not None and ref.start_time is not None and current != ref.start_time:
            return  # the pid was recycled by an unrelated process: not our group
    if group_members(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _wait(lambda: not group_members(pid), 10.0)
    proc = _CHILDREN.pop(pid, None)
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _wait(done: Callable[[], bool], timeout: float) -> bool:
    """Poll ``done()`` until true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.05)
    return done()


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
