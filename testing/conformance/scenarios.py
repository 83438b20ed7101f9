"""Crash scenarios: run a job, kill something at a protocol step, restart,
and check that every record's effect is in the sink exactly once.

Each scenario is named for what dies and when. Verification reads the
table and the server's prepared transactions with the target's own client
(``Run``, in harness.py). The endurance and long-run scenarios are in
endurance.py.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eoskit.testing.conformance.cluster import EventLog, kill_executor
from eoskit.testing.conformance.harness import Run, clean_up, wait_for_file
from eoskit.testing.conformance.target import ConformanceTarget, TotalsTarget
from eoskit.testing.conformance.workload import Workload
from eoskit.core import crash
from eoskit.twophase.txn_id import sink_prefix


TWOPHASE_ONLY = frozenset({"twophase"})
ALL_MODES = frozenset({"twophase", "idempotent"})


@dataclass(frozen=True)
class Scenario:
    name: str
    run: Callable[["Run"], None]
    doc: str = ""
    modes: frozenset[str] = ALL_MODES
    #: Only for targets whose markers record row counts.
    needs_replay_rows: bool = False
    #: Also for the stateful job (``run_scenario(..., stateful=True)``).
    stateful: bool = True
    #: What the scenario kills: ``"driver"`` (SIGKILL of the job's process
    #: group), ``"worker"`` (a task's Python worker), ``"executor"`` (an
    #: executor's JVM and its workers) or ``""`` (nothing: a failure, a
    #: replay, a refusal). The test tiers keep one of each kind per sink and
    #: commit mode in the submission tier (the root conftest.py).
    kills: str = ""
    #: The protocol's crash point it fires (``core/crash.py``), if any.
    point: str | None = None


def _crash_then_recover(point: str, batch: int = 1) -> Callable[[Run], None]:
    def scenario(run: Run) -> None:
        code, log = run.run_job(**{crash.ENV: f"{point}@{batch}"})
        assert code == -signal.SIGKILL, f"the crash point {point} did not fire (exit {code}):\n{log[-3000:]}"
        run.recover()
        run.verify_exactly_once()
    return scenario


def _task_crash_retried(point: str, batch: int = 1) -> Callable[[Run], None]:
    """A task's Python worker SIGKILLed once at ``point``; Spark retries the
    task and the run ends exact. Only a worker dies, so the run needs no
    driver of its own: in the test's warm session when it was started with
    ``EOSKIT_CRASH_CONTROL`` (``crash.arm``), else a job of its own."""
    def scenario(run: Run) -> None:
        marker = run.workdir / "crashed-once"
        control = os.environ.get(crash.CONTROL_ENV)
        if run.spark is not None and control and not run.base_env:
            crash.arm(control, point, batch, marker)
            try:
                run.run_in_process()
            finally:
                crash.disarm(control)
            code, log = 0, run.last_log()
        else:
            code, log = run.run_job(**{crash.ENV: f"{point}@{batch}", crash.ONCE_ENV: str(marker)})
        assert marker.exists(), f"the crash point {point} did not fire"
        assert code == 0, f"the retried task did not recover the batch (exit {code}):\n{log[-3000:]}"
        run.verify_exactly_once()
    return scenario


#: After its waypoint, the kill comes within this many seconds: inside the
#: next batch (planning, tasks writing, the commit), wherever the draw lands.
RANDOM_KILL_WITHIN_S = 0.6


def _random_driver_kill(run: Run) -> None:
    """SIGKILL of the driver at a random moment of a random batch: the draw
    picks a waypoint of the job's own progress (its first offset-log entry,
    or the commit of batch k, for every batch but the last) and a delay after
    it, so that the kill lands while the job runs however fast it is."""
    seed = int(os.environ.get("EOSKIT_TEST_SEED", time.time_ns() % 10_000))
    draw = random.Random(seed)
    batches = max(1, -(-run.workload.records // run.workload.batch_offsets))
    after = draw.randrange(-1, max(0, batches - 2) + 1)  # -1: during the first batch
    delay = draw.uniform(0.0, RANDOM_KILL_WITHIN_S)
    waypoint = run.checkpoint / ("offsets/0" if after < 0 else f"commits/{after}")
    process = run.start()
    wait_for_file(waypoint, process, run)
    time.sleep(delay)
    where = f"{delay:.2f}s after {waypoint.relative_to(run.checkpoint)} (EOSKIT_TEST_SEED={seed})"
    assert process.poll() is None, f"the job ended before the kill {where}"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    print(f"killed the driver {where}")
    run.recover()
    run.verify_exactly_once()


def _failing_task_aborts_batch(run: Run) -> None:
    poison = run.workload.records // 2
    log = run.expect_failure(EOSKIT_TEST_FAIL_ID=str(poison))
    assert "poison record" in log, f"the poison record did not fail the job:\n{log[-3000:]}"
    # The abort rolled back the other tasks' prepared transactions, and a
    # cancelled task that prepared after it (Spark does not wait for those)
    # rolled back its own: the sink holds no locks while nobody restarts it.
    run.wait_until_nothing_prepared()
    run.recover()
    run.verify_exactly_once()


def _replay_of_committed_batch(run: Run) -> None:
    run.recover()
    commits = run.checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    # Spark forgets it committed the last batch: it plans it again on restart.
    (commits / str(last)).unlink()
    crc = commits / f".{last}.crc"
    if crc.exists():
        crc.unlink()
    run.recover()
    assert "batch %d:" % last in run.last_log(), "Spark did not replay the batch"
    run.verify_exactly_once()


def _replay_with_other_parallelism_is_refused(run: Run) -> None:
    """Every task of the last batch committed with its marker, Spark lost its
    commit; the restart splits the batch into other tasks (fewer: each one
    holds other rows than its committed attempt did). Writing would
    duplicate, skipping would lose rows: the replay must be refused, and
    finish exactly once with the original settings."""
    run.ordered = False
    run.recover(EOSKIT_TEST_MIN_PARTITIONS=str(2 * run.workload.partitions))
    commits = run.checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (commits / name).unlink(missing_ok=True)
    error = run.expect_failure()
    assert "is being replayed" in error and "rows where the committed attempt wrote" in error, \
        error[-3000:]
    run.recover(EOSKIT_TEST_MIN_PARTITIONS=str(2 * run.workload.partitions))
    run.verify_exactly_once()


def _checkpoint_deleted(run: Run) -> None:
    import shutil

    code, _ = run.run_job(**{crash.ENV: f"{crash.DRIVER_AFTER_DECISION}@1"})
    assert code == -signal.SIGKILL
    before = run.target.prepared(sink_prefix(run.sink_id))
    assert before, "the crash left no prepared transaction to test with"
    shutil.rmtree(run.checkpoint)
    log = run.expect_failure()
    assert "no decision log" in log and "eoskit txn resolve" in log, log[-3000:]
    assert run.target.prepared(sink_prefix(run.sink_id)) == before  # untouched
    listed = run.txn("list")
    assert all(txn in listed.stdout for txn in before), listed.stdout + listed.stderr
    assert "no decision log" in listed.stdout
    refused = run.txn("resolve")
    assert refused.returncode != 0 and "--rollback-orphans" in refused.stderr
    resolved = run.txn("resolve", "--rollback-orphans")
    assert resolved.returncode == 0, resolved.stderr
    run.assert_nothing_prepared()


SCENARIOS = [
    Scenario("task_killed_after_prepare", _task_crash_retried(crash.TASK_AFTER_PREPARE),
             "a Python worker dies after preparing; Spark retries the task", TWOPHASE_ONLY,
             kills="worker", point=crash.TASK_AFTER_PREPARE),
    Scenario("task_killed_after_commit", _task_crash_retried(crash.TASK_AFTER_COMMIT),
             "a Python worker dies after committing rows and marker, before its ack",
             frozenset({"idempotent"}), kills="worker", point=crash.TASK_AFTER_COMMIT),
    Scenario("worker_killed_during_write", _task_crash_retried(crash.TASK_DURING_WRITE),
             "a Python worker dies mid-write; Spark retries the task",
             kills="worker", point=crash.TASK_DURING_WRITE),
    Scenario("worker_killed_before_its_end", _task_crash_retried(crash.TASK_BEFORE_END),
             "a Python worker dies with every row written, before it prepares or commits",
             kills="worker", point=crash.TASK_BEFORE_END),
    Scenario("driver_killed_after_decision", _crash_then_recover(crash.DRIVER_AFTER_DECISION),
             modes=TWOPHASE_ONLY, kills="driver", point=crash.DRIVER_AFTER_DECISION),
    Scenario("driver_killed_after_some_commits", _crash_then_recover(crash.DRIVER_AFTER_SOME_COMMITS),
             modes=TWOPHASE_ONLY, kills="driver", point=crash.DRIVER_AFTER_SOME_COMMITS),
    Scenario("driver_killed_after_all_commits", _crash_then_recover(crash.DRIVER_AFTER_ALL_COMMITS),
             modes=TWOPHASE_ONLY, kills="driver", point=crash.DRIVER_AFTER_ALL_COMMITS),
    Scenario("driver_killed_at_random", _random_driver_kill, kills="driver"),
    Scenario("failing_task_aborts_batch", _failing_task_aborts_batch),
    Scenario("replay_of_committed_batch", _replay_of_committed_batch),
    Scenario("checkpoint_deleted_is_refused", _checkpoint_deleted, modes=TWOPHASE_ONLY,
             kills="driver", point=crash.DRIVER_AFTER_DECISION),
    Scenario("driver_killed_after_some_task_commits",
             _crash_then_recover(crash.DRIVER_AFTER_TASK_COMMIT),
             "the driver dies once one task of the batch committed its rows and marker",
             frozenset({"idempotent"}), kills="driver", point=crash.DRIVER_AFTER_TASK_COMMIT),
    # Not stateful: the sink's tasks are the shuffle's partitions there, not the source's.
    Scenario("replay_with_other_parallelism_is_refused", _replay_with_other_parallelism_is_refused,
             modes=frozenset({"idempotent"}), needs_replay_rows=True, stateful=False),
]


# -- on a cluster ------------------------------------------------------------
# Executors are other processes than the driver, in other working
# directories, on (here: as if on) other nodes.


def _executor_killed(point: str, batch: int = 1) -> Callable[[Run], None]:
    """While a task of batch ``batch`` is paused at ``point``, its executor
    (the JVM and its Python workers) is SIGKILLed; Spark runs the task again
    on another executor, and the job ends exact without a restart."""
    def scenario(run: Run) -> None:
        pause = run.workdir / "pause"
        process = run.start(**{crash.PAUSE_ENV: f"{point}@{batch}", crash.PAUSE_DIR_ENV: str(pause)})
        reached = wait_for_file(pause / crash.REACHED_FILE, process, run)
        killed = kill_executor(int(reached.split(" pid ")[1]))
        (pause / crash.GO_FILE).touch()  # tasks paused on the other executor go on
        code, log = run.wait(process)
        assert code == 0, f"the job did not survive the executor's loss (exit {code}):\n{log[-3000:]}"
        print(f"killed executor {killed[0]} and {len(killed) - 1} process(es) under it at {reached.strip()}")
        run.verify_exactly_once()
    return scenario


def _task_retried_on_another_worker(run: Run) -> None:
    """A Python worker dies right after preparing; Spark, told to exclude a
    failed task's executor, retries the task on the other worker's executor
    (the event log shows where each attempt ran)."""
    marker, events = run.workdir / "crashed-once", run.workdir / "events"
    events.mkdir()
    code, log = run.run_job(**{crash.ENV: f"{crash.TASK_AFTER_PREPARE}@1", crash.ONCE_ENV: str(marker)},
                            **run.spark_conf(**{"spark.excludeOnFailure.enabled": "true",
                                                "spark.eventLog.enabled": "true",
                                                "spark.eventLog.compress": "false",
                                                "spark.eventLog.dir": events.as_uri()}))
    assert marker.exists(), "the crash point did not fire"
    assert code == 0, f"the retried task did not recover the batch (exit {code}):\n{log[-3000:]}"
    moved = EventLog.read(events).retried_elsewhere()
    assert moved, "no failed task was retried on another worker"
    failed, done = moved[0]
    print(f"task {failed.index} of stage {failed.stage}: attempt {failed.attempt} failed on executor "
          f"{failed.executor}, attempt {done.attempt} succeeded on executor {done.executor}")
    run.verify_exactly_once()


def _driver_killed_relative_checkpoint(run: Run) -> None:
    """``--checkpoint-dir`` relative and no ``sinkId``: the driver dies after
    deciding the last batch. ``eoskit txn list`` finds the prepared ids
    without ``--sink-id``, and the restart (same relative path) replays the
    batch without any executor preparing it again: executors find the
    decision log, whatever their own working directory (a crash point armed
    after prepare in the replay proves it by not firing)."""
    run.relative_checkpoint, run.named_sink = True, False
    last = run.workload.records // run.workload.batch_offsets - 1
    code, log = run.run_job(**{crash.ENV: f"{crash.DRIVER_AFTER_DECISION}@{last}"})
    assert code == -signal.SIGKILL, f"the driver was not killed (exit {code}):\n{log[-3000:]}"
    prepared = run.target.prepared(sink_prefix(run.read_default_sink_id()))
    assert prepared, "the crash left no prepared transaction"
    listed = run.txn("list")
    assert listed.returncode == 0 and all(t in listed.stdout for t in prepared), \
        listed.stdout + listed.stderr
    again = run.workdir / "prepared-again"
    run.recover(**{crash.ENV: f"{crash.TASK_AFTER_PREPARE}@{last}", crash.ONCE_ENV: str(again)})
    assert not again.exists(), (f"a task prepared the decided batch {last} again: its executor "
                                "did not find the decision log")
    run.verify_exactly_once()


CLUSTER_SCENARIOS = [
    Scenario("executor_killed_during_write", _executor_killed(crash.TASK_DURING_WRITE),
             "an executor is SIGKILLed while its task writes", kills="executor"),
    Scenario("executor_killed_after_prepare", _executor_killed(crash.TASK_AFTER_PREPARE),
             "an executor is SIGKILLed holding a prepared transaction", TWOPHASE_ONLY,
             kills="executor"),
    Scenario("task_retried_on_another_worker", _task_retried_on_another_worker, modes=TWOPHASE_ONLY,
             kills="worker", point=crash.TASK_AFTER_PREPARE),
    Scenario("driver_killed_relative_checkpoint", _driver_killed_relative_checkpoint,
             modes=TWOPHASE_ONLY, kills="driver", point=crash.DRIVER_AFTER_DECISION),
]


def scenarios_for(commit_mode: str, target: type[ConformanceTarget] | None = None,
                  cluster: bool = False, stateful: bool = False) -> list[Scenario]:
    """The scenarios that apply to a sink in ``commit_mode`` (and, given the
    target class, to what its markers record); ``cluster``: those of
    ``CLUSTER_SCENARIOS``, which need a cluster's master in ``EOSKIT_TEST_MASTER``;
    ``stateful``: those that apply to the stateful job."""
    rows = target is not None and target.records_replay_rows
    pool = CLUSTER_SCENARIOS if cluster else SCENARIOS
    return [s for s in pool if commit_mode in s.modes and (rows or not s.needs_replay_rows)
            and (s.stateful or not stateful)]


def run_scenario(
    target: ConformanceTarget, workload: Workload, scenario: Scenario, workdir: Path, spark: Any = None,
    env: Mapping[str, str] | None = None, stateful: bool = False, submit: bool = False,
) -> None:
    """Run one scenario; ``spark``, if given, is a warm session for restarts
    (it should allow task retries, e.g. master ``local[2,3]``); ``env`` goes
    to every job (``EOSKIT_TEST_MASTER``: a cluster's, for ``CLUSTER_SCENARIOS``);
    ``stateful``: with the stateful job, on a ``TotalsTarget``, verified by
    the totals per customer; ``submit``: every run with ``spark-submit job.py``."""
    workdir.mkdir(parents=True, exist_ok=True)
    run = Run(target, workload, workdir, spark, base_env=dict(env or {}), stateful=stateful, submit=submit)
    if stateful:
        assert isinstance(target, TotalsTarget), f"{type(target).__name__} is no TotalsTarget"
        target.create_totals_table(run.table)
    else:
        target.create_table(run.table)
    try:
        scenario.run(run)
    finally:
        clean_up(run)

