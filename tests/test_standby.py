"""A standby driver's watch of the run record (eoskit.runtime.job.standby,
step 2): when it takes over and when it ends with nothing to do. The
takeover of a SIGKILLed driver, exact by psql: integration_tests/test_standby.py."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from eoskit.runtime.job.control import STALE_AFTER_S, ControlDir, RunRecord
from eoskit.runtime.job.standby import wait_for_turn


@pytest.fixture
def control(tmp_path) -> ControlDir:
    return ControlDir(str(tmp_path / "checkpoint"))


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    return int(done.stdout)


def record(control: ControlDir, pid: int, host: str | None = None, heartbeat: float | None = None) -> None:
    control._write("run.json", {"pid": pid, "host": host or socket.gethostname(), "job": "orders",
                                "started": 1.0, "heartbeat": time.time() if heartbeat is None else heartbeat})


def watch(control: ControlDir, steps: list[Callable[[], None]]) -> tuple[bool | None, str, int]:
    """wait_for_turn with each poll's sleep running the next step; the
    answer, what it said, and the polls it made (None: it outlived the steps)."""
    out, polls = io.StringIO(), []

    def sleep(_: float) -> None:
        polls.append(1)
        if len(polls) > len(steps):
            raise TimeoutError
        steps[len(polls) - 1]()

    try:
        answer: bool | None = wait_for_turn(control, "orders", out, sleep=sleep)
    except TimeoutError:
        answer = None
    return answer, out.getvalue(), len(polls)


def test_it_waits_for_the_job_then_takes_over_when_its_driver_dies(control):
    pid = dead_pid()
    answer, said, polls = watch(control, [
        lambda: None,  # the job has not started
        lambda: RunRecord(control, "orders").beat(),  # it runs (this process stands for its driver)
        lambda: None,
        lambda: record(control, pid),  # its driver was killed: the record stays, its pid is gone
    ])
    assert answer is True and polls == 4
    assert f"the run of pid {os.getpid()} on {socket.gethostname()} is live" in said
    assert f"the run of pid {pid} on {socket.gethostname()} is dead" in said and "taking over" in said


def test_a_run_that_ended_by_itself_is_not_taken_over(control):
    run = RunRecord(control, "orders")
    run.beat()
    answer, said, _ = watch(control, [lambda: None, run.release])
    assert answer is False and "ended and released the checkpoint: nothing to take over" in said


def test_a_driver_dead_before_the_standby_started_is_taken_over_at_once(control):
    record(control, dead_pid())
    assert watch(control, [])[0:3:2] == (True, 0)


def test_on_another_host_a_driver_is_dead_once_its_heartbeat_is_stale(control):
    record(control, 1, host="another-host", heartbeat=time.time() - 1)
    answer, said, _ = watch(control, [lambda: None,
                                      lambda: record(control, 1, "another-host", time.time() - STALE_AFTER_S - 1)])
    assert answer is True and "on another-host is live" in said and "is dead (heartbeat 1" in said


def test_without_a_run_it_waits(control):
    assert watch(control, [lambda: None] * 5)[0] is None
