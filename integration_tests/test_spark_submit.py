"""``spark-submit job.py`` as a first-class way to run a job, on the dev
cluster (client deploy mode): the job file's ``pipeline.main()`` gives it
what ``eoskit run`` gives (the sweep at start, the restart strategy,
savepoints, status, metrics). Its driver is killed with SIGKILL between the
commits of a batch and the job is submitted again: the sweep settles what
the dead driver left prepared, the status says so, and psql reads every
record exactly once. A running submitted job is found by ``eoskit list
--cluster`` and ended by ``eoskit cancel``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eoskit.core import crash
from eoskit.runtime.devtools.services.cluster import SparkCluster
from eoskit.testing.conformance import Scenario, Workload, run_scenario
from eoskit.testing.conformance.cluster import cluster_env
from eoskit.twophase.txn_id import sink_prefix
from eoskit.testing.pytest_plugin import DEFAULT_CLUSTER_DIR

pytestmark = pytest.mark.cluster

@pytest.fixture(scope="module")
def workload(kafka: str) -> Workload:
    return Workload.produce(kafka, records=3_000, partitions=2, batches=3)


def eoskit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).with_name("eoskit")), *args],
                          capture_output=True, text=True, timeout=180, cwd=cwd)


def status_of(run) -> dict:
    done = eoskit("status", "--checkpoint-dir", str(run.checkpoint), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def running_with_batches(run) -> dict | None:
    """The status of a live run with a committed batch, or None."""
    if not (run.checkpoint / "eoskit" / "control" / "status.json").exists():
        return None
    status = status_of(run)
    return status if status.get("live") and status.get("batches") else None


def _wait_for(condition, what: str, process: subprocess.Popen | None, run, timeout: float = 240.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the job ended (exit {process.returncode}) before {what}:\n"
                                 f"{run.last_log()[-3000:]}")
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {timeout:.0f} s:\n{run.last_log()[-3000:]}")


def cancel_while_listed(run, spark_cluster: str, ui: str) -> None:
    """Submit the job to run on, find it with ``eoskit list --cluster`` once it
    has committed a batch, end it with ``eoskit cancel``; its sweep's counts
    are checked on the live status."""
    process = run.start(until_caught_up=False)
    try:
        # The run loop reports its sweep's settlements once it sees a batch
        # completed, a moment after the listener has written the batch.
        status = _wait_for(lambda: (s := running_with_batches(run)) and s["in_doubt_committed"] and s,
                           "a committed batch and the sweep's settlements", process, run)
        assert status["in_doubt_committed"] >= 1 and status["in_doubt_rolled_back"] == 0, status
        app = status["run"]["app"]
        assert app["master"] == spark_cluster and app["id"].startswith("app-"), app
        listed = eoskit("list", "--cluster", ui, "--json")
        assert listed.returncode == 0, listed.stderr
        ours = [r for r in json.loads(listed.stdout) if r["app"] == app["id"]]
        assert [(r["job"], r["checkpoint"], r["pid"]) for r in ours] == [
            ("conformance", str(run.checkpoint), status["run"]["pid"])], listed.stdout
        cancelled = eoskit("cancel", "--checkpoint-dir", str(run.checkpoint))
        assert cancelled.returncode == 0, cancelled.stderr
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert status_of(run)["state"] == "cancelled"
    _wait_for(lambda: not [r for r in json.loads(eoskit("list", "--cluster", ui, "--json").stdout)
                           if r["app"] == app["id"]], "the application's end on the master", None, run, 60)


def test_a_submitted_job_s_driver_killed_then_submitted_again_listed_and_cancelled(
        spark_cluster, postgres_target, workload, request, tmp_path):
    """One submitted job through three submissions: killed between the
    commits of batch 1; submitted again, it settles what the dead driver
    left prepared, is listed on the master and cancelled; submitted a third
    time, it carries on until caught up, every record once."""
    ui = SparkCluster(Path(request.config.rootpath) / DEFAULT_CLUSTER_DIR).master_ui()

    def scenario(run) -> None:
        code, log = run.run_job(**{crash.ENV: f"{crash.DRIVER_AFTER_SOME_COMMITS}@1"})
        assert code == -signal.SIGKILL, f"the driver was to be killed after some commits (exit {code}):\n{log[-3000:]}"
        assert run.target.in_doubt(sink_prefix(run.sink_id), run.table), "the kill left nothing prepared"
        if ui is None:
            print("the cluster was given (EOSKIT_TEST_SPARK_MASTER), not started here: its web UI is unknown, "
                  "so `eoskit list --cluster` and `eoskit cancel` are not run")
        else:
            cancel_while_listed(run, spark_cluster, ui)
        code, log = run.run_job()  # submitted again, as a supervisor would: until caught up
        assert code == 0, f"the last submission failed (exit {code}):\n{log[-3000:]}"
        run.verify_exactly_once()
        status = status_of(run)
        assert status["state"] == "finished", status
        if ui is None:
            assert status["in_doubt_committed"] >= 1 and status["in_doubt_rolled_back"] == 0, status

    run_scenario(postgres_target(), workload, Scenario("submitted", scenario), tmp_path,
                 env=cluster_env(spark_cluster), submit=True)
