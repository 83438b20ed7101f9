"""The processes of one job run, found under its driver (Linux ``/proc``):
``eoskit chaos`` kills a Python worker of the run it injects faults into,
never a process of another job.

A run started by ``eoskit run`` is a driver process (Python), its JVM (a
child), and PySpark's worker daemon under the JVM, which forks one Python
worker per concurrent task. The workers are the Python processes whose
parent is a Python process below the JVM (the daemon itself has the JVM
for parent).

On a cluster the executors are not below the driver: a worker of the
cluster started them. An executor's command line names the driver it
serves (``--driver-url spark://CoarseGrainedScheduler@host:PORT``), and the
run's executors are those whose PORT is one the run's driver JVM listens on.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from eoskit.runtime.spark_python import NAME as SPARK_PYTHON

#: In local mode Spark starts its Python through ``eoskit-spark-python``
#: (``eoskit.runtime.spark_python``), a script: such a process, and every
#: worker it forks, is named (``comm``) after the script's file, cut at 15 bytes.
_SPARK_PYTHON_COMM = SPARK_PYTHON[:15]


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    name: str  # the name it was started by (``comm``): python3.11, python, java, eoskit-spark-py


def _read(pid: int) -> Process | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None  # gone meanwhile
    # The command name in parentheses may hold spaces and parentheses itself.
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    ppid = int(stat[stat.rindex(")") + 2:].split()[1])
    return Process(pid, ppid, name)


def descendants(root: int) -> list[Process]:
    """Every live process below ``root``, parents before their children."""
    table = [p for p in (_read(int(d)) for d in os.listdir("/proc") if d.isdigit()) if p is not None]
    children: dict[int, list[Process]] = {}
    for process in table:
        children.setdefault(process.ppid, []).append(process)
    found, queue = [], [root]
    while queue:
        for child in sorted(children.get(queue.pop(0), []), key=lambda p: p.pid):
            found.append(child)
            queue.append(child.pid)
    return found


def python_workers(driver: int) -> list[int]:
    """The Python worker processes of the run whose driver is ``driver``."""
    below = descendants(driver)  # parents first
    under_jvm: set[int] = set()
    for p in below:
        if p.name == "java" or p.ppid in under_jvm:
            under_jvm.add(p.pid)
    by_pid = {p.pid: p for p in below}

    def python(p: Process | None) -> bool:
        return p is not None and (p.name.startswith("python") or p.name == _SPARK_PYTHON_COMM)

    return [p.pid for p in below
            if p.pid in under_jvm and python(p) and python(by_pid.get(p.ppid))]


def _listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its sockets' inodes found
    in its network namespace's tables)."""
    try:
        inodes = {link[8:-1] for link in (os.readlink(f"/proc/{pid}/fd/{fd}")
                                           for fd in os.listdir(f"/proc/{pid}/fd"))
                  if link.startswith("socket:[")}
    except OSError:
        return set()
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
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
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
    for entry in os.listdir("/proc"):
        argv = _cmdline(int(entry)) if entry.isdigit() else []
        if EXECUTOR_CLASS not in argv or "--driver-url" not in argv[:-1]:
            continue
        url = argv[argv.index("--driver-url") + 1]
        port = url.rsplit(":", 1)[-1]
        if port.isdigit() and int(port) in ports:
            found.append(int(entry))
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
