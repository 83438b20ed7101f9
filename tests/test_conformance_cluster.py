"""The cluster scenarios' executor kill (``eoskit.testing.conformance.cluster``)
on stand-ins: a process whose command line is an executor's, with a child
and a grandchild beneath it, as a Python daemon and its worker are."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from eoskit.testing.conformance.cluster import EXECUTOR_MAIN, executor_of, kill_executor

#: Starts a child that starts a grandchild, and prints the grandchild's pid.
TREE = ("import subprocess, sys\n"
        "inner = 'import subprocess, sys, time; p = subprocess.Popen([sys.executable, \"-c\", "
        "\"import time; time.sleep(60)\"]); print(p.pid, flush=True); time.sleep(60)'\n"
        "subprocess.run([sys.executable, '-c', inner])\n")


def ended(pid: int) -> bool:
    """Gone, or a zombie (an orphan this machine's init may not reap)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_executor_above_a_worker_is_killed_first_then_everything_beneath_it():
    executor = subprocess.Popen([sys.executable, "-c", TREE, EXECUTOR_MAIN, "--driver-url", "spark://x:1"],
                                stdout=subprocess.PIPE, text=True)
    try:
        worker = int(executor.stdout.readline())
        assert executor_of(worker) == executor_of(executor.pid) == executor.pid
        child = psutil.Process(worker).ppid()
        assert kill_executor(worker) == [executor.pid, child, worker]
        executor.wait(timeout=10)
        deadline = time.monotonic() + 10
        # SIGKILL is delivered at once but each process exits in its own
        # time: wait for both, not only the last one signalled.
        while not (ended(worker) and ended(child)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ended(worker) and ended(child)
    finally:
        executor.kill()
        executor.wait()


def test_a_process_under_no_executor_is_refused():
    with pytest.raises(LookupError, match=f"process {os.getpid()} does not run under a Spark executor"):
        executor_of(os.getpid())
