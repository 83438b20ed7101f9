"""The harness the scenarios drive: a ``Run`` starts, kills and restarts
``eoskit run`` jobs on one table, checkpoint and sink id, and checks that
every record's effect is in the sink exactly once; ``Paused`` holds a job at
a pause point while a test makes a fault; ``Runs`` and ``clean_up`` leave
nothing prepared and no table behind.

Runs in the test process; the jobs are processes of their own (each in its
own process group, so that a driver crash point kills the whole job), or a
warm SparkSession of the test's for restarts.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eoskit.runtime.job.jobfile import load_pipeline
from eoskit.runtime.job.pipeline import PipelineError
from eoskit.testing.conformance.job_template import JOB
from eoskit.testing.conformance.target import ConformanceTarget, TotalsTarget
from eoskit.testing.conformance.workload import Workload
from eoskit.core import crash
from eoskit.twophase.identity import default_sink_id
from eoskit.twophase.txn_id import sink_prefix


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
    #: Run the job with ``spark-submit --master <EOSKIT_TEST_MASTER> job.py``
    #: (its ``pipeline.main()``) instead of ``eoskit run job.py``.
    submit: bool = False

    @property
    def checkpoint(self) -> Path:
        return self.workdir / "checkpoint"

    @property
    def checkpoint_arg(self) -> str:
        return "checkpoint" if self.relative_checkpoint else str(self.checkpoint)

    def read_default_sink_id(self) -> str:
        """The sink id the checkpoint recorded for a job without ``sinkId``."""
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
        if self.submit:
            # spark-submit finds Spark and runs the driver with this Python
            # (a user's activated virtualenv does the same).
            env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env.update(self.base_env)
        env.update(extra)
        return env

    def start(self, until_caught_up: bool = True, args: Sequence[str] = (), **extra: str) -> subprocess.Popen:
        """The job in a process of its own; ``args``: more of the run's
        arguments (``--standby``), ``extra``: more environment."""
        job = self.workdir / "job.py"
        job.write_text(JOB)
        command = [*self.launcher, *self.runner(job), "--checkpoint-dir", self.checkpoint_arg, *args]
        if until_caught_up:
            command.append("--until-caught-up")
        log = open(self.workdir / f"run-{time.monotonic_ns()}.log", "w")
        # Its own process group: a driver crash point kills the whole group.
        return subprocess.Popen(command, env=self.env(**extra), stdout=log, stderr=log,
                                start_new_session=True, cwd=self.workdir)

    def runner(self, job: Path) -> list[str]:
        """The command that runs ``job``, before its arguments."""
        if not self.submit:
            return [str(Path(sys.executable).with_name("eoskit")), "run", str(job)]
        master = self.base_env.get("EOSKIT_TEST_MASTER", "local[2,3]")
        # spark-submit's JVM starts before the job's Python, so the driver's
        # process group (crash.DRIVER_GROUP_ENV, for driver crash points in
        # its Python workers) is exported by the shell that becomes it: the
        # job runs in a session of its own, whose group id is that pid.
        submit = shlex.join([str(Path(sys.executable).with_name("spark-submit")), "--master", master, str(job)])
        return ["sh", "-c", f'{crash.DRIVER_GROUP_ENV}=$$ exec {submit} "$@"', "spark-submit"]

    def run_job(self, timeout: float = 600, **extra: str) -> tuple[int, str]:
        return self.wait(self.start(**extra), timeout)

    def wait(self, process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
        """Wait for a job ``start`` started: its exit code and log."""
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
        reap_group(process.pid)
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


def reap_group(pgid: int) -> None:
    """Kill what is left of a job's process group (a JVM outliving its driver)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


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
