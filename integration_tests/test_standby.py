"""A standby driver (``eoskit run --standby``, issue 33 item 3): started
beside the job, warm, it takes over when the job's driver is SIGKILLed
with batch 1 decided and its transactions prepared; every record once by
psql, nothing left prepared. A job that ends by itself is not taken over.
The watch alone: tests/test_standby.py."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from eoskit.core import crash
from eoskit.testing.conformance.harness import Run


def start_standby(run: Run) -> tuple[subprocess.Popen, Path]:
    """The standby, once it says it stands by (warm); its process and log."""
    before = set(run.workdir.glob("run-*.log"))
    standby = run.start(args=["--standby"])
    (log,) = set(run.workdir.glob("run-*.log")) - before
    deadline = time.monotonic() + 300
    while "standing by" not in log.read_text():
        assert standby.poll() is None, f"the standby ended (exit {standby.returncode}):\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "the standby did not get warm within 300 s"
        time.sleep(0.2)
    return standby, log


def test_a_standby_takes_over_a_killed_driver_and_every_record_is_there_once(postgres_run):
    run = postgres_run
    standby, log = start_standby(run)
    code, active_log = run.run_job(**{crash.ENV: f"{crash.DRIVER_AFTER_DECISION}@1"})
    assert code == -signal.SIGKILL, f"the crash point did not fire (exit {code}):\n{active_log[-3000:]}"
    assert run.target.prepared(f"eoskit:{run.sink_id}:"), "the killed run left nothing prepared"
    assert standby.wait(timeout=600) == 0, log.read_text()[-4000:]
    said = log.read_text()
    assert "is live" in said and "is dead" in said and "taking over" in said
    run.verify_exactly_once()  # psql: every record once, nothing prepared


@pytest.mark.full  # the same decision on the run record: tests/test_standby.py, every tier
def test_a_job_that_ends_by_itself_is_not_taken_over(postgres_run):
    run = postgres_run
    standby, log = start_standby(run)
    code, active_log = run.run_job()
    assert code == 0, active_log[-3000:]
    assert standby.wait(timeout=120) == 0, log.read_text()[-4000:]
    said = log.read_text()
    assert "nothing to take over" in said and "taking over" not in said
    run.verify_exactly_once()
