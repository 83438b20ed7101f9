"""Crash scenarios: run a job, kill something at a protocol step, restart,
and check that every record's effect is in the sink exactly once.

Each scenario is named for what dies and when. Verification reads the
table and the server's prepared transactions with the target's own client.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eoskit.runtime.devtools.demo.orders import recreate_topic
from eoskit.runtime.devtools.services.produce import produce_records
from eoskit.core import crash
from eoskit.testing.conformance.cluster import EventLog, kill_executor
from eoskit.testing.conformance.job_template import JOB
from eoskit.testing.conformance.target import ConformanceTarget, TotalsTarget
from eoskit.twophase.decision_log import PRUNE_EVERY
from eoskit.twophase.txn_id import sink_prefix


@dataclass(frozen=True)
class Workload:
    """A topic of ``records`` JSON records over ``partitions``, keyed by id."""

    bootstrap: str
    topic: str
    records: int
    partitions: int
    batch_offsets: int

    @staticmethod
    def amount(record_id: int) -> int:
        return (record_id * 7) % 1000

    @classmethod
    def produce(cls, bootstrap: str, records: int = 100_000, partitions: int = 4,
                batches: int = 5) -> "Workload":
        topic = f"conformance-{uuid.uuid4().hex[:8]}"
        recreate_topic(bootstrap, topic, partitions)
        produce_records(bootstrap, topic, (cls.record(i, partitions) for i in range(records)))
        return cls(bootstrap, topic, records, partitions, max(1, records // batches))

    @classmethod
    def record(cls, i: int, partitions: int) -> tuple[int, bytes, bytes]:
        """Record ``i``: (partition, key, value)."""
        return (i % partitions, str(i).encode(),
                json.dumps({"id": i, "amount": cls.amount(i), "customer": f"c{i % 50}"}).encode())

    def extend(self, more: int) -> "Workload":
        """The same topic with ``more`` records after the last (their ids go on)."""
        produce_records(self.bootstrap, self.topic,
                        (self.record(i, self.partitions) for i in range(self.records, self.records + more)))
        return replace(self, records=self.records + more)

    @classmethod
    def endurance(cls, bootstrap: str) -> "Workload":
        """The endurance tier's input: ``ENDURANCE_BATCHES`` batches of two
        records on one partition."""
        return cls.produce(bootstrap, records=2 * ENDURANCE_BATCHES, partitions=1, batches=ENDURANCE_BATCHES)

    def expected(self) -> list[tuple[int, int]]:
        return [(i, self.amount(i)) for i in range(self.records)]

    def expected_totals(self) -> dict[str, tuple[int, int]]:
        """``customer -> (total amount, orders)``: what a stateful job's
        running totals end at."""
        totals: dict[str, tuple[int, int]] = {}
        for i in range(self.records):
            total, orders = totals.get(f"c{i % 50}", (0, 0))
            totals[f"c{i % 50}"] = (total + self.amount(i), orders + 1)
        return totals


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


@dataclass
class Run:
    """One scenario's job, table, checkpoint and sink id."""

    target: ConformanceTarget
    workload: Workload
    workdir: Path
    spark: Any = None
    table: str = field(default_factory=lambda: f"conf_{uuid.uuid4().hex[:10]}")
    sink_id: str = field(default_factory=lambda: f"conf{uuid.uuid4().hex[:10]}")
    #: False once a run split input partitions over several tasks, which
    #: gives up their order (as Spark's own Kafka source with minPartitions).
    ordered: bool = True
    #: Environment of every run (e.g. ``EOSKIT_TEST_MASTER`` of a cluster).
    base_env: Mapping[str, str] = field(default_factory=dict)
    #: Jobs and commands get ``--checkpoint-dir checkpoint``, relative to
    #: the work dir they run in, instead of the absolute path.
    relative_checkpoint: bool = False
    #: False: the job sets no ``sinkId`` and gets the checkpoint's default
    #: one (``sink_id`` is read from the checkpoint after the first run).
    named_sink: bool = True
    #: The stateful job: running totals per customer, upserted in update
    #: mode (the target is a ``TotalsTarget``).
    stateful: bool = False
    #: What the job's command is run through: e.g. ``ip netns exec NS``, a
    #: host of its own in a network lab (``Host.argv([])``).
    launcher: tuple[str, ...] = ()

    @property
    def checkpoint(self) -> Path:
        return self.workdir / "checkpoint"

    @property
    def checkpoint_arg(self) -> str:
        return "checkpoint" if self.relative_checkpoint else str(self.checkpoint)

    def read_default_sink_id(self) -> str:
        """The sink id the checkpoint recorded for a job without ``sinkId``."""
        from eoskit.twophase.identity import default_sink_id

        self.sink_id = default_sink_id(str(self.checkpoint))
        return self.sink_id

    def spark_conf(self, **conf: str) -> dict[str, str]:
        """``EOSKIT_TEST_SPARK_CONF`` of the base environment with ``conf`` added,
        as an ``extra`` argument of ``start`` / ``run_job``."""
        given = json.loads(self.base_env.get("EOSKIT_TEST_SPARK_CONF") or "{}")
        return {"EOSKIT_TEST_SPARK_CONF": json.dumps({**given, **conf})}

    def env(self, **extra: str) -> dict[str, str]:
        if self.stateful:
            assert isinstance(self.target, TotalsTarget)
            options, select = dict(self.target.totals_options(self.table)), self.target.totals_select
        else:
            options, select = dict(self.target.options(self.table)), self.target.select
        if self.named_sink:
            options["sinkId"] = self.sink_id
        # Spark's Python is the job's get_session's choice for its master
        # (eoskit-spark-python in local mode), unless base_env or extra name one.
        env = {k: v for k, v in os.environ.items()
               if k not in (crash.ENV, crash.ONCE_ENV, crash.DRIVER_GROUP_ENV, crash.CONTROL_ENV,
                            crash.PAUSE_ENV, crash.PAUSE_DIR_ENV, "PYSPARK_PYTHON")}
        env.update({
            "EOSKIT_TEST_KAFKA": self.workload.bootstrap,
            "EOSKIT_TEST_TOPIC": self.workload.topic,
            "EOSKIT_TEST_MAX_OFFSETS": str(self.workload.batch_offsets),
            "EOSKIT_TEST_FORMAT": self.target.format,
            "EOSKIT_TEST_OPTIONS": json.dumps(options),
            "EOSKIT_TEST_SELECT": json.dumps(list(select)),
        })
        if self.stateful:
            env["EOSKIT_TEST_STATEFUL"] = "1"
        env.update(self.base_env)
        env.update(extra)
        return env

    def start(self, until_caught_up: bool = True, **extra: str) -> subprocess.Popen:
        job = self.workdir / "job.py"
        job.write_text(JOB)
        command = [*self.launcher, str(Path(sys.executable).with_name("eoskit")), "run", str(job),
                   "--checkpoint-dir", self.checkpoint_arg]
        if until_caught_up:
            command.append("--until-caught-up")
        log = open(self.workdir / f"run-{time.monotonic_ns()}.log", "w")
        # Its own process group: a driver crash point kills the whole group.
        return subprocess.Popen(command, env=self.env(**extra), stdout=log, stderr=log,
                                start_new_session=True, cwd=self.workdir)

    def run_job(self, timeout: float = 600, **extra: str) -> tuple[int, str]:
        return self.wait(self.start(**extra), timeout)

    def wait(self, process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
        """Wait for a job ``start`` started: its exit code and log."""
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
        _reap_group(process.pid)
        return code, self.last_log()

    def last_log(self) -> str:
        logs = sorted(self.workdir.glob("run-*.log"))
        return logs[-1].read_text() if logs else ""

    def recover(self, **extra: str) -> None:
        """Restart from the checkpoint and run until caught up. In the test's
        own (warm) SparkSession when one is given: the crash already killed a
        real driver, and a warm restart saves a JVM start per scenario."""
        if self.spark is None:
            code, log = self.run_job(**extra)
            assert code == 0, f"recovery run failed (exit {code}):\n{log[-4000:]}"
            return
        self.run_in_process(**extra)

    def run_in_process(self, **extra: str) -> str:
        """Run the job until caught up in ``self.spark``; raises PipelineError."""
        from eoskit.runtime.job.jobfile import load_pipeline

        job = self.workdir / "job.py"
        job.write_text(JOB)
        saved = dict(os.environ)
        os.environ.update({k: v for k, v in self.env(**extra).items() if k.startswith("EOSKIT_TEST_")})
        try:
            pipeline = load_pipeline(job)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        log = self.workdir / f"run-{time.monotonic_ns()}.log"
        with open(log, "w") as out:
            pipeline.run(str(self.checkpoint), until_caught_up=True, spark=self.spark, out=out)
        return log.read_text()

    def expect_failure(self, **extra: str) -> str:
        """Run a job that must fail; its error text."""
        if self.spark is None:
            code, log = self.run_job(**extra)
            assert code == 1, f"the job did not fail (exit {code}):\n{log[-3000:]}"
            return log
        from eoskit.runtime.job.pipeline import PipelineError

        try:
            self.run_in_process(**extra)
        except PipelineError as exc:
            return str(exc)
        raise AssertionError("the job did not fail")

    def verify_exactly_once(self) -> None:
        if self.stateful:
            self.verify_totals()
            return
        rows = sorted(self.target.rows(self.table))
        expected = self.workload.expected()
        ids = [r[0] for r in rows]
        duplicates = len(ids) - len(set(ids))
        missing = self.workload.records - len(set(ids))
        if duplicates or missing:
            counts = Counter(ids)
            twice = sorted(i for i, n in counts.items() if n > 1)
            lost = sorted(set(range(self.workload.records)) - counts.keys())
            raise AssertionError(
                f"{self.table}: {len(rows)} rows for {self.workload.records} records: "
                f"{duplicates} duplicated, {missing} missing (duplicated ids {_ranges(twice)}; "
                f"missing ids {_ranges(lost)}; input batches of {self.workload.batch_offsets} "
                f"offsets over {self.workload.partitions} partitions)")
        assert sum(r[1] for r in rows) == sum(e[1] for e in expected), "sum of amounts differs"
        assert rows == expected, "some rows carry wrong values"
        if self.ordered:
            self.target.check_order(self.table)
        self.assert_nothing_prepared()
        left = self.target.leftovers(self.table)
        assert left == [], f"{self.table}: left behind by its transactions: {left[:10]}"

    def verify_totals(self) -> None:
        """The stateful job's table: every customer's total and order count
        equal those computed from the input, and nothing left prepared."""
        assert isinstance(self.target, TotalsTarget)
        found, expected = self.target.totals(self.table), self.workload.expected_totals()
        wrong = sorted(c for c in expected.keys() | found.keys() if found.get(c) != expected.get(c))
        assert not wrong, (f"{self.table}: {len(wrong)} of {len(expected)} customers' totals differ "
                           f"from the input's: " + ", ".join(
                               f"{c} has {found.get(c)}, expected {expected.get(c)}" for c in wrong[:5]))
        self.assert_nothing_prepared()

    def assert_nothing_prepared(self) -> None:
        left = self.target.in_doubt(sink_prefix(self.sink_id), self.table)
        assert left == [], f"prepared transactions left behind: {left}"

    def wait_until_nothing_prepared(self, timeout: float = 30.0) -> None:
        """A cancelled task may still be finishing on its Python worker when
        the job has already failed; give it ``timeout`` seconds to settle."""
        deadline = time.monotonic() + timeout
        while self.target.in_doubt(sink_prefix(self.sink_id), self.table) and time.monotonic() < deadline:
            time.sleep(0.5)
        self.assert_nothing_prepared()

    def txn(self, *args: str) -> subprocess.CompletedProcess:
        command = [str(Path(sys.executable).with_name("eoskit")), "txn", *args,
                   *self.target.resolve_command_for(self.table), "--checkpoint-dir", self.checkpoint_arg]
        if self.named_sink:
            command += ["--sink-id", self.sink_id]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.workdir)


class Paused:
    """A job started with a pause point armed (``crash.PAUSE_ENV``): a task or
    the driver waits at the point until ``go``, while a test makes a fault."""

    def __init__(self, run: Run, point: str, batch: int = 1) -> None:
        self.run = run
        self.dir = run.workdir / "pause"
        self.process = run.start(**{crash.PAUSE_ENV: f"{point}@{batch}",
                                    crash.PAUSE_DIR_ENV: str(self.dir)})

    def wait_reached(self, timeout: float = 180.0) -> str:
        reached = self.dir / crash.REACHED_FILE
        deadline = time.monotonic() + timeout
        while not reached.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"the job ended (exit {self.process.returncode}) before its pause "
                            f"point:\n{self.run.last_log()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"the job did not reach its pause point within {timeout:.0f} s")
            time.sleep(0.1)
        return reached.read_text()

    def go(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / crash.GO_FILE).touch()

    def finish(self, timeout: float = 300.0) -> tuple[int, str]:
        self.go()
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the job did not end within {timeout:.0f} s:\n{self.run.last_log()[-3000:]}")
        self.kill()  # what is left of its process group (a JVM outliving the driver)
        return code, self.run.last_log()

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


def _ranges(ids: list[int], most: int = 6) -> str:
    """Sorted ids as ranges, ``0-4999, 20000-24999``: which batches they are."""
    spans: list[list[int]] = []
    for i in ids:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    text = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans[:most])
    return (text + f", ... ({len(spans)} ranges)") if len(spans) > most else (text or "none")


def _reap_group(pgid: int) -> None:
    """Kill what is left of a job's process group (a JVM outliving its driver)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


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


def wait_for_file(path: Path, process: subprocess.Popen, run: Run, timeout: float = 300) -> str:
    """Wait until the job ``process`` writes ``path`` (e.g. ``commits/3``); fail if it ends first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"the job ended (exit {process.returncode}) before reaching "
                                 f"{path.name}:\n{run.last_log()[-3000:]}")
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            raise AssertionError(f"the job did not reach {path.name} within {timeout:.0f} s")
        time.sleep(0.1)
    return path.read_text()


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


# -- a job that runs for weeks ---------------------------------------------

#: How much the kept counts may differ between the middle and the end of an
#: endurance run: decisions and markers are pruned every ``PRUNE_EVERY``
#: batches, Spark's logs at every batch, so a count may stand up to one
#: period (and a batch in flight) apart at two moments.
ENDURANCE_SLACK = {"decision files": 2 * PRUNE_EVERY, "checkpoint files": 8 * PRUNE_EVERY}
#: The endurance tier's job keeps this many batches in its checkpoint's logs
#: (``retained_checkpoints``, Spark's ``minBatchesToRetain``; 100 by
#: default): what is pruned follows it, and a smaller one is reached, and
#: crossed again and again, in fewer batches.
ENDURANCE_RETAINED = 30
#: Batches of the endurance tier: the driver killed after batch 60, twice the
#: retention (what the job keeps is at its steady size by then), and the
#: 10-batch prune period (``PRUNE_EVERY``) crossed 12 times, the retention
#: four times over. Batch 1,100, where pruning once stopped the two-phase SQL
#: sinks for good, is crossed by test_endurance_protocol.py for every sink
#: without Spark's per-batch cost, and by the long tier in one real run.
ENDURANCE_BATCHES = 4 * ENDURANCE_RETAINED


def kept(run: Run) -> dict[str, int]:
    """What the job keeps that must not grow with its batches: the
    checkpoint's files (Spark's logs, eoskit's decision log and metadata),
    the decision files alone, and the sink's own (``ConformanceTarget.kept``)."""
    files = [p for p in run.checkpoint.rglob("*") if p.is_file()]
    decisions = [p for p in files if p.parent.name == "decisions"]
    return {"checkpoint files": len(files), "decision files": len(decisions),
            **run.target.kept(run.table, run.sink_id)}


def _endurance(run: Run) -> None:
    """The job through every batch of its workload (``ENDURANCE_BATCHES``
    in the endurance tier, keeping ``ENDURANCE_RETAINED``), its driver SIGKILLed after the commit
    of the middle batch, then restarted: every record once, and what the job
    keeps (``kept``) no larger at the end than in the middle, so that a week
    of batches keeps no more than a day's."""
    batches = -(-run.workload.records // run.workload.batch_offsets)
    middle = batches // 2
    retained = {"EOSKIT_TEST_RETAINED_CHECKPOINTS": str(ENDURANCE_RETAINED)}
    process = run.start(**retained)
    wait_for_file(run.checkpoint / f"commits/{middle}", process, run, timeout=max(300, batches))
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    _reap_group(process.pid)
    at_middle = kept(run)
    run.recover(**retained)
    at_end = kept(run)
    print(f"kept after batch {middle}: {at_middle}; after batch {batches - 1}: {at_end}")
    run.verify_exactly_once()
    committed = sorted(int(p.name) for p in (run.checkpoint / "commits").iterdir() if p.name.isdigit())
    assert committed[-1] == batches - 1, f"the last committed batch is {committed[-1]}, not {batches - 1}"
    for name, count in at_end.items():
        slack = ENDURANCE_SLACK.get(name, 2 * PRUNE_EVERY * run.workload.partitions)
        assert count <= at_middle[name] + slack, (
            f"{name} grew from {at_middle[name]} after batch {middle} to {count} after batch "
            f"{batches - 1}: something is kept per batch and never pruned")


def _one_long_run(run: Run) -> None:
    """The job through every batch of its workload in one run, no fault:
    exit 0, every record once, nothing left prepared, and the last batch
    committed. What a week at a one-second trigger does to the periodic
    paths, in one process (batch 1,100 once stopped the two-phase SQL sinks
    for good: pruning handed the sink the wrong argument)."""
    batches = -(-run.workload.records // run.workload.batch_offsets)
    code, log = run.run_job(timeout=max(600, 2 * batches))
    assert code == 0, f"the run of {batches} batches failed (exit {code}):\n{log[-4000:]}"
    committed = sorted(int(p.name) for p in (run.checkpoint / "commits").iterdir() if p.name.isdigit())
    assert committed[-1] == batches - 1, f"the last committed batch is {committed[-1]}, not {batches - 1}"
    print(f"one run of {batches} batches: exit 0; kept at the end: {kept(run)}")
    run.verify_exactly_once()


#: Not one of ``SCENARIOS``: one run through thousands of tiny batches (the
#: long tier, ``pytest -m long``; not part of CI, see docs/conformance.md).
ONE_LONG_RUN = Scenario("one_long_run", _one_long_run,
                        "a job through thousands of batches in one run: exit 0, exact",
                        stateful=False)


#: Not one of ``SCENARIOS``: thousands of tiny batches, for the endurance tier
#: (``Workload.produce(records=2 * batches, partitions=1, batches=batches)``).
ENDURANCE = Scenario("endurance", _endurance,
                     "a job through thousands of batches, its driver killed in the middle: "
                     "exact, and what it keeps flat", stateful=False)


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
    env: Mapping[str, str] | None = None, stateful: bool = False,
) -> None:
    """Run one scenario; ``spark``, if given, is a warm session for restarts
    (it should allow task retries, e.g. master ``local[2,3]``); ``env`` goes
    to every job (``EOSKIT_TEST_MASTER``: a cluster's, for ``CLUSTER_SCENARIOS``);
    ``stateful``: with the stateful job, on a ``TotalsTarget``, verified by
    the totals per customer."""
    workdir.mkdir(parents=True, exist_ok=True)
    run = Run(target, workload, workdir, spark, base_env=dict(env or {}), stateful=stateful)
    if stateful:
        assert isinstance(target, TotalsTarget), f"{type(target).__name__} is no TotalsTarget"
        target.create_totals_table(run.table)
    else:
        target.create_table(run.table)
    try:
        scenario.run(run)
    finally:
        clean_up(run)


def clean_up(run: Run) -> None:
    """Roll back what ``run`` left prepared and drop its table."""
    for txn in run.target.prepared(sink_prefix(run.sink_id)):
        run.target.rollback(txn)
    run.target.drop_table(run.table)


class Runs:
    """The runs one test makes (``make``: a ``Run``, its table created),
    each cleaned up by :meth:`close` as :func:`run_scenario` cleans up its
    own; ``run_args`` go to every ``Run`` (``spark``, ``launcher``, ...)."""

    def __init__(self, root: Path, **run_args: Any) -> None:
        self.root, self.run_args, self.made = root, run_args, []

    def make(self, target: ConformanceTarget, workload: Workload) -> Run:
        run = Run(target, workload, self.root / f"run{len(self.made)}", **self.run_args)
        run.workdir.mkdir(parents=True)
        target.create_table(run.table)
        self.made.append(run)
        return run

    def close(self) -> None:
        for run in self.made:
            clean_up(run)
