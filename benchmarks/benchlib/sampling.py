"""A benchmark script run to its end while its whole process tree's
resident memory is read (the script, its Spark JVM, Spark's Python
workers, the peers it starts), for benchmarks/peers.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil


#: How often the process tree's memory is read while a script runs.
SAMPLE_S = 0.2


def tree_pids(group: int) -> list[int]:
    """Every process of a script run started in a process group of its own:
    the group's, and everything below them (``eoskit chaos`` finds a run's
    processes the same way). PySpark's daemons move to groups of their own,
    and the warm zygote outlives the launcher that started it, so neither
    the group alone nor the tree below the script finds them all. On a
    cluster, the executor JVMs serving the run's driver (found by its port,
    as ``eoskit chaos`` finds them) and their Python workers count too:
    they are the workers' children, not the script's."""
    from eoskit.runtime.devtools.chaos.processes import descendants, executors, run_processes

    found = set(run_processes(group))
    for executor in executors(group):
        found |= {executor, *(p.pid for p in descendants(executor))}
    return sorted(found)


def tree_rss(pids: Iterable[int]) -> tuple[int, int]:
    """The summed resident set (bytes) of the processes ``pids``, and how
    many of them were still there. Pages shared between processes (forked
    workers) count once per process, so this is an upper bound of what the
    tree holds."""
    total = count = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
            count += 1
        except psutil.Error:
            continue  # gone meanwhile
    return total, count


@dataclass
class Run:
    exit: int
    wall_s: float
    peak_rss: int
    peak_processes: int


def run_sampled(argv: list[str], log: Path, every: float = SAMPLE_S) -> Run:
    """Run ``argv`` to its end, its output into ``log``, reading its tree's memory every ``every`` s."""
    peak = processes = 0
    started = time.perf_counter()
    with open(log, "wb") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while child.poll() is None:
                rss, count = tree_rss(tree_pids(child.pid))
                peak, processes = max(peak, rss), max(processes, count)
                time.sleep(every)
        except BaseException:  # Ctrl-C reaches this process only: end the script's whole group
            try:
                os.killpg(child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            child.wait()
            raise
    return Run(child.returncode, time.perf_counter() - started, peak, processes)
