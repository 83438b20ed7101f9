"""``eoskit chaos`` in a user's test suite: one call that runs the command on
a job file and fails the test with its report unless every output is exact.

    from eoskit.testing.chaos import assert_exactly_once

    def test_orders_job_is_exactly_once():
        assert_exactly_once("jobs/orders.py", seed=7, kills=4)

The job reads and writes the services it names (in CI: eoskit's dev
services, or the pytest plugin's fixtures passed through the environment
the job reads); the command writes only scratch copies of the sink's target
and drops them at the end. A fixed ``seed`` makes a failure repeatable.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_chaos(job: str | Path, *, seed: int = 0, faults: str = "driver,worker", kills: int = 4,
              args: Sequence[str] = (), env: Mapping[str, str] | None = None,
              timeout: float = 3600.0) -> subprocess.CompletedProcess:
    """``eoskit chaos JOB --seed ... --faults ... --kills ... ARGS``, its output captured."""
    command = [sys.executable, "-m", "eoskit.runtime.cli", "chaos", str(job), "--seed", str(seed),
               "--faults", faults, "--kills", str(kills), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else dict(env))


def assert_exactly_once(job: str | Path, **kwargs) -> str:
    """Fail the calling test, with the report and the command's last lines,
    unless ``eoskit chaos`` finds every output exact (exit 0); the report."""
    import pytest

    done = run_chaos(job, **kwargs)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-20:])
        pytest.fail(f"eoskit chaos {job}: exit {done.returncode}\n{done.stdout}\n{tail}", pytrace=False)
    return done.stdout
