"""The runtime against real faults and real services: restart strategies,
stop with a savepoint on S3 and a resume from it into a new checkpoint, the
control commands, metrics and status. Every job is a real `eoskit run`
process; results are read back with psql."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from eoskit.core import crash
from eoskit.testing.conformance import Workload
from eoskit.testing.conformance.harness import Run
from eoskit.twophase.txn_id import sink_prefix


def eoskit(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).with_name("eoskit")), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def workload(postgres_workload: Workload) -> Workload:
    return postgres_workload


@pytest.fixture
def run(postgres_run: Run) -> Run:
    return postgres_run


def faulty(run: Run, strategy: str, once: bool) -> tuple[int, str]:
    """The job on one core with no task retries, a Python worker killed
    mid-write in batch 1: the fault fails the query, as a lost executor
    would. ``once``: the fault happens once, then the job can succeed."""
    extra = {"EOSKIT_TEST_MASTER": "local[2]", "EOSKIT_TEST_RESTART_STRATEGY": strategy,
             crash.ENV: f"{crash.TASK_DURING_WRITE}@1"}
    if once:
        extra[crash.ONCE_ENV] = str(run.workdir / "crashed-once")
    return run.run_job(**extra)


@pytest.mark.full
def test_fixed_delay_restarts_after_a_lost_worker_and_the_table_is_exact(run):
    code, log = faulty(run, "fixed_delay(attempts=2, delay=1s)", once=True)
    assert code == 0, log[-3000:]
    assert "[conformance] restart 1 in 1.0s after:" in log
    assert "1 restart(s)" in log  # the run's checkpoint statistics
    run.verify_exactly_once()


def test_exponential_delay_restarts_by_default_and_the_table_is_exact(run):
    code, log = faulty(run, "exponential_delay(initial=500ms, max=2s)", once=True)
    assert code == 0, log[-3000:]
    assert "[conformance] restart 1 in " in log
    run.verify_exactly_once()


def test_failure_rate_gives_up_with_the_last_cause(run):
    code, log = faulty(run, "failure_rate(max_failures=1, interval=1m, delay=500ms)", once=False)
    assert code == 1, log[-3000:]
    last = log.rstrip().splitlines()[-1]
    assert last.startswith("eoskit run: pipeline conformance failed: ") and "gave up after 1 restart(s)" in last
    run.assert_nothing_prepared()


@pytest.mark.full
def test_no_restart_ends_at_the_first_failure(run):
    code, log = faulty(run, "none", once=False)
    assert code == 1 and "restart 1" not in log, log[-3000:]


def test_stop_with_a_savepoint_on_s3_and_resume_into_a_new_checkpoint(
        run, workload, s3, s3_storage_options, s3_bucket, tmp_path):
    """A running job is stopped with a savepoint on S3; a job started from it
    in a new checkpoint directory finishes the topic: every record in the
    table once. The savepoint is inspected and disposed of by the CLI."""
    s3_env = {"FSSPEC_S3_ENDPOINT_URL": s3, "AWS_ACCESS_KEY_ID": s3_storage_options["key"],
              "AWS_SECRET_ACCESS_KEY": s3_storage_options["secret"]}
    # 100 batches of 200 at the job's 0.5 s trigger: still running when the
    # stop comes, after a refused second run has started and ended.
    job = run.start(until_caught_up=False, EOSKIT_TEST_MAX_OFFSETS="200", **s3_env)
    status = tmp_path / "status.json"
    try:
        deadline = time.monotonic() + 180
        while not list((run.checkpoint / "commits").glob("[1-9]")) and time.monotonic() < deadline:
            assert job.poll() is None, run.last_log()[-3000:]
            time.sleep(0.5)
        env = {**os.environ, **s3_env}
        refused = eoskit("run", str(run.workdir / "job.py"), "--checkpoint-dir", str(run.checkpoint),
                         env=run.env(**s3_env), timeout=120)
        assert refused.returncode != 0 and "is in use by job 'conformance'" in refused.stderr
        target = f"s3://{s3_bucket}/savepoints/sp1"
        stopped = eoskit("stop", "--checkpoint-dir", str(run.checkpoint), "--savepoint", target, env=env)
        assert stopped.returncode == 0, stopped.stderr
        assert job.wait(timeout=120) == 0, run.last_log()[-3000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    inspected = eoskit("savepoint", "inspect", target, "--json", env=env)
    assert inspected.returncode == 0, inspected.stderr
    manifest = json.loads(inspected.stdout)
    assert manifest["jobName"] == "conformance" and manifest["batch"] >= 1
    assert len(run.target.rows(run.table)) < workload.records  # stopped mid-topic
    resumed = eoskit("run", str(run.workdir / "job.py"), "--checkpoint-dir", str(tmp_path / "ck2"),
                     "--from-savepoint", target, "--until-caught-up", "--status-file", str(status),
                     env=run.env(**s3_env), timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    state = json.loads(status.read_text())
    assert state["state"] == "finished" and state["total_lag"] == 0
    run.verify_exactly_once()
    # The same savepoint restored again while the first restore owns the sink
    # id: refused before any data moves (Flink's "change the sink uid" advice).
    again = eoskit("run", str(run.workdir / "job.py"), "--checkpoint-dir", str(tmp_path / "ck3"),
                   "--from-savepoint", target, "--until-caught-up", env=run.env(**s3_env), timeout=600)
    assert again.returncode != 0 and "second restore of one savepoint" in again.stderr, again.stderr[-2000:]
    run.verify_exactly_once()
    assert eoskit("savepoint", "dispose", target, env=env).returncode == 0


def test_a_savepoint_carries_a_batch_the_sink_committed_before_spark_logged_it(run, tmp_path):
    """A stop can interrupt the batch in flight after the sink committed it
    and before Spark wrote its commit log. The savepoint (of the batch
    before) then carries that batch's offsets and the sink's decision, so the
    restored job replays it as a restart in place would: nothing twice.
    (Without them the restored job planned it anew and wrote it again.)"""
    code, log = run.run_job()
    assert code == 0, log[-3000:]
    commits = run.checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink(missing_ok=True)  # the sink committed it; Spark never logged it
    from eoskit.runtime.state.savepoints import create_savepoint

    target = tmp_path / "sp"
    manifest = create_savepoint(str(run.checkpoint), str(target), job_name="conformance")
    assert manifest.batch == last - 1
    resumed = eoskit("run", str(run.workdir / "job.py"), "--checkpoint-dir", str(tmp_path / "ck2"),
                     "--from-savepoint", str(target), "--until-caught-up", env=run.env(), timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    run.verify_exactly_once()


def test_in_doubt_transactions_settled_at_a_restart_are_counted(run, tmp_path):
    """The driver dies once batch 1 is decided, its transactions prepared;
    the restarted job's start-up sweep commits them, and the run says so:
    the status file, the summary line."""
    code, log = run.run_job(**{crash.ENV: f"{crash.DRIVER_AFTER_DECISION}@1"})
    assert code == -signal.SIGKILL, log[-3000:]
    left = run.target.prepared(sink_prefix(run.sink_id))
    assert left, "the crash left no prepared transaction"
    status = tmp_path / "status.json"
    resumed = eoskit("run", str(run.workdir / "job.py"), "--checkpoint-dir", str(run.checkpoint),
                     "--until-caught-up", "--status-file", str(status), env=run.env(), timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    state = json.loads(status.read_text())
    assert (state["in_doubt_settled"], state["in_doubt_committed"], state["in_doubt_rolled_back"]) == \
        (len(left), len(left), 0)
    assert (f"in-doubt transactions settled {len(left)} ({len(left)} committed, 0 rolled back)"
            in resumed.stderr), resumed.stderr[-3000:]
    run.verify_exactly_once()


def test_a_trigger_for_a_directory_no_job_runs_on_is_refused(tmp_path):
    (tmp_path / "idle").mkdir()
    result = eoskit("savepoint", "trigger", "--checkpoint-dir", str(tmp_path / "idle"))
    assert result.returncode == 1 and "no job is running on checkpoint" in result.stderr
    result = eoskit("savepoint", "trigger", "--checkpoint-dir", str(tmp_path / "nothing"))
    assert result.returncode == 2 and "nothing: no such directory" in result.stderr


def test_metrics_are_served_while_the_job_runs(run):
    from prometheus_client.parser import text_string_to_metric_families

    from eoskit.testing.conformance.job_template import JOB

    port = _free_port()
    (run.workdir / "job.py").write_text(JOB)
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("eoskit")), "run", str(run.workdir / "job.py"),
         "--checkpoint-dir", str(run.workdir / "ck-metrics"), "--metrics-port", str(port),
         "--checkpoint-interval", "500ms"],
        env=run.env(EOSKIT_TEST_MAX_OFFSETS="2000"), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        text = ""
        deadline = time.monotonic() + 180

        def batches_done(text: str) -> float:
            return sum(sample.value for family in text_string_to_metric_families(text)
                       for sample in family.samples if sample.name == "eoskit_batches_total")

        # Until a batch has completed: the labelled metrics have no sample before.
        while not text or batches_done(text) < 1:
            assert process.poll() is None and time.monotonic() < deadline, "no metrics"
            time.sleep(1)
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                continue
        assert "eoskit_input_rows_total" in text and "eoskit_build_info" in text
        lags = [sample.labels for family in text_string_to_metric_families(text)
                for sample in family.samples if sample.name == "eoskit_lag_offsets"]
        assert lags and all(set(labels) == {"eoskit_job", "topic", "partition"} and labels["partition"].isdigit()
                            and labels["eoskit_job"] == "conformance" for labels in lags), text
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=120)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
