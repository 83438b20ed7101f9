"""The processes of one job run (psutil, on Linux): ``eoskit chaos`` kills a
Python worker or an executor of the run it injects faults into, never a
process of another job.

A run started by ``eoskit run`` is a process group of its own: the driver
(Python), its JVM, and the Python processes the JVM starts, with what they
start in turn (PySpark's daemons move to process groups of their own, so
the run's processes are its group's and everything below them). Among
those, the task workers' daemon (``spark.python.daemon.module``, eoskit's
``worker_daemon``) forks one worker per concurrent task; the data source
planners have daemons of their own, whose workers are not tasks. A task
worker is a fork of the task daemon:

- without the warm zygote, the daemon runs the worker daemon's module, and
  its forks have its command line;
- with the zygote (``eoskit.runtime.spark.zygote``), the daemon is a fork of the
  zygote named after its worker module, ``pyspark.worker``, and so are its
  forks (the zygote itself, and the launcher the JVM started, are no
  workers).

On a cluster the executors are not the run's processes: a worker of the
cluster started them. An executor's command line names the driver it
serves (``--driver-url spark://CoarseGrainedScheduler@host:PORT``), and the
run's executors are those whose PORT is one the run's driver JVM listens on.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

import psutil

from eoskit.runtime.spark.daemon import DAEMON_MODULE

#: The name (``comm``) of the task workers' daemon forked by the zygote, and of its workers.
TASK_WORKER_NAME = "pyspark.worker"


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    name: str  # its name (psutil's: ``comm``, completed from the command line when cut at 15 characters)
    group: int = 0  # its process group


def _table() -> list[Process]:
    """Every process on the machine (psutil has no process group: ``getpgid`` reads it)."""
    table = []
    for process in psutil.process_iter(["ppid", "name"]):
        try:
            group = os.getpgid(process.pid)
        except OSError:
            continue  # gone meanwhile
        if process.info["ppid"] is not None:
            table.append(Process(process.pid, process.info["ppid"], process.info["name"] or "", group))
    return table


def descendants(root: int) -> list[Process]:
    """Every live process below ``root``, parents before their children."""
    table = _table()
    children: dict[int, list[Process]] = {}
    for process in table:
        children.setdefault(process.ppid, []).append(process)
    found, queue = [], [root]
    while queue:
        for child in sorted(children.get(queue.pop(0), []), key=lambda p: p.pid):
            found.append(child)
            queue.append(child.pid)
    return found


def run_processes(group: int) -> dict[int, Process]:
    """The processes of the run whose process group is ``group``: the
    group's, and every process below one of them, by pid."""
    table = _table()
    children: dict[int, list[Process]] = {}
    for process in table:
        children.setdefault(process.ppid, []).append(process)
    found = {p.pid: p for p in table if p.group == group}
    queue = list(found)
    while queue:
        for child in children.get(queue.pop(), []):
            if child.pid not in found:
                found[child.pid] = child
                queue.append(child.pid)
    return found


def python_workers(group: int) -> list[int]:
    """The task workers of the run whose process group is ``group`` (see
    the module's docstring)."""
    run = run_processes(group)
    commands: dict[int, bool] = {}

    def runs_daemon(pid: int) -> bool:  # its command line runs the worker daemon's module
        if pid not in commands:
            commands[pid] = DAEMON_MODULE in _cmdline(pid)
        return commands[pid]

    def named(pid: int) -> bool:
        return pid in run and run[pid].name == TASK_WORKER_NAME

    workers = []
    for p in run.values():
        daemon = run.get(p.ppid)
        if daemon is None:
            continue
        above = daemon.ppid
        if (named(p.pid) and named(daemon.pid) and not named(above)) or \
                (runs_daemon(p.pid) and runs_daemon(daemon.pid) and not runs_daemon(above)):
            workers.append(p.pid)
    return sorted(workers)


def _listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its sockets' inodes found
    in its network namespace's tables). Read from ``/proc`` by hand:
    psutil's ``net_connections`` matches them against the tables of the
    caller's namespace, and a job on a network lab's host (``eoskit chaos``
    with network faults) listens in its host's."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return set()  # gone meanwhile
    inodes = set()
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed between the listing and now: a busy JVM opens and closes files
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


#: The main class of an executor's JVM.
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def executors(driver: int) -> list[int]:
    """The executor JVMs (on a cluster) of the run whose driver is ``driver``."""
    ports: set[int] = set()
    for process in descendants(driver):
        if process.name == "java":
            ports |= _listening_ports(process.pid)
    found = []
    for process in psutil.process_iter(["cmdline"]):
        argv = process.info["cmdline"] or []
        if EXECUTOR_CLASS not in argv or "--driver-url" not in argv[:-1]:
            continue
        url = argv[argv.index("--driver-url") + 1]
        port = url.rsplit(":", 1)[-1]
        if port.isdigit() and int(port) in ports:
            found.append(process.pid)
    return sorted(found)


def kill(pid: int) -> bool:
    """SIGKILL ``pid``; False if it was gone."""
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group (a driver, its JVM and workers)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
