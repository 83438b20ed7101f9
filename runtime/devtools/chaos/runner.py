"""``eoskit chaos JOB.py``: the job run on one pinned input into scratch
copies of its sink, once without faults (the reference), once more without
(the replay: is the job deterministic?), and once with faults drawn from a
seed (the chaos run); the outputs compared as multisets, and a report.

Top to bottom:

1. The job is loaded and checked: a sink that cannot be redirected or a
   source that cannot be replayed is refused before anything runs
   (``redirect.check``). Nothing is ever written to the job's real target.
2. The input is pinned (``Replayable.pin``): from where a new query would
   start to the end of the data now. Every run reads exactly that, whatever
   is produced meanwhile.
   With ``--records N --generator SPEC``, the records SPEC makes
   (``generate``) are written to a scratch copy of the job's input first
   (``Fillable.scratch_input``), and that is what is pinned and read.
3. Each run gets a scratch target (``Redirectable.scratch``, created like
   the original), a checkpoint of its own (so a sink id of its own) and a
   job file that loads the user's job redirected (``redirect.JOB_FILE``),
   started with ``eoskit run --until-caught-up`` in a process group of its
   own.
4. The reference run, then the replay, without faults; the reference's
   batch count bounds the plan (a fault after the last batch cannot land).
5. The chaos run: before each start, the next driver fault's protocol step
   is armed (``eoskit.core.crash``, once); a fault without a step, or
   whose step the sink's commit mode never passes, lands ``delay_s`` after
   its batch's commit. A driver fault kills the run's whole process group
   and the run is started again from its checkpoint; a worker fault kills
   one of its Python workers and an executor fault one of its executors
   (on a cluster), and Spark retries their tasks; a database or broker
   fault stops that server (an eoskit dev service, ``services``) and
   starts it again, and the job's clients and restart strategy ride it out.
   Meanwhile, and during the reference run, the scratch target is read
   after each commit (``Snapshots``): where the chaos run's output first
   differs, and the fault before that.
6. The outputs are read with the services' own clients and compared
   (``compare``), the report printed and written (``report``), the scratch
   targets dropped unless ``keep``. Ctrl-C ends the run in progress and
   drops what was created, saying what is left.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from eoskit.runtime.devtools.chaos import processes, services
from eoskit.runtime.devtools.chaos.compare import Comparison, compare, nondeterministic_columns
from eoskit.runtime.devtools.chaos.generate import generate
from eoskit.runtime.devtools.chaos.plan import (
    DRIVER_STEPS,
    EVERY_BATCHES,
    MODE_STEPS,
    SERVICE_KINDS,
    Fault,
    FaultPlan,
)
from eoskit.runtime.devtools.chaos.snapshots import Snapshots, first_difference
from eoskit.runtime.job.jobfile import load_pipeline
from eoskit.runtime.devtools.chaos.redirect import ChaosRefusedError, check, scratch_input, write_spec
from eoskit.runtime.devtools.chaos.report import BatchEvent, ChaosReport, Event, FaultEvent, OutputResult, RestartEvent
from eoskit.runtime.devtools.services import network
from eoskit.runtime.job.components import Formatted, Scratch, ScratchInput
from eoskit.core import crash
from eoskit.twophase.verdicts import first_line


#: The last letter of each run's scratch suffix (``orders_chaos1a2bx``).
ROLE_LETTERS = {"reference": "r", "replay": "d", "chaos": "x"}


class ChaosRunFailedError(RuntimeError):
    """A run of the job failed by itself (not by an injected fault)."""


@dataclass
class ChaosSettings:
    """What ``eoskit chaos`` was asked; the options' defaults are the CLI's."""

    job: Path
    seed: int
    kinds: tuple[str, ...] = ("driver",)
    kills: int = 4
    every_batches: tuple[int, int] = EVERY_BATCHES
    check_determinism: bool = True
    keep: bool = False
    workdir: Path | None = None
    conf: dict[str, str] = field(default_factory=dict)
    #: Columns left out of every comparison: values the job computes anew on
    #: every run by design (a processing time in the two-phase mode).
    ignore: tuple[str, ...] = ()
    #: The longest one start of a run may take.
    run_timeout_s: float = 1800.0
    #: The folder of eoskit's dev services whose servers database and broker
    #: faults may stop (``eoskit dev up --dir``); None: none may be.
    dev_dir: Path | None = None
    #: ``--records N --generator SPEC``: the runs read N records made by the
    #: function SPEC names, in a scratch input, instead of the pinned offsets.
    records: int | None = None
    generator: str | None = None


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _at(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)


@dataclass
class JobRun:
    """One run of the job: its role, scratch target, folder and checkpoint."""

    role: str
    scratch: Scratch
    folder: Path
    job_file: Path
    conf: dict[str, str]
    starts: int = 0
    #: What the job's command runs through: the network lab's job host
    #: (``ip netns exec``) when network faults are to be made.
    launcher: tuple[str, ...] = ()

    @property
    def checkpoint(self) -> Path:
        return self.folder / "checkpoint"

    def commit_file(self, batch: int) -> Path:
        return self.checkpoint / "commits" / str(batch)

    def committed(self) -> list[int]:
        commits = self.checkpoint / "commits"
        return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else []

    def log(self) -> Path:
        return self.folder / f"run-{self.starts}.log"

    def start(self, env: dict[str, str] | None = None) -> subprocess.Popen:
        self.starts += 1
        command = [*self.launcher, sys.executable, "-m", "eoskit.runtime.cli", "run", str(self.job_file),
                   "--checkpoint-dir", str(self.checkpoint), "--until-caught-up"]
        for key, value in self.conf.items():
            command += ["--conf", f"{key}={value}"]
        clean = {k: v for k, v in os.environ.items()
                 if k not in (crash.ENV, crash.ONCE_ENV, crash.PAUSE_ENV, crash.PAUSE_DIR_ENV,
                              crash.DRIVER_GROUP_ENV, crash.CONTROL_ENV)}
        with open(self.log(), "w") as log:
            return subprocess.Popen(command, env={**clean, **(env or {})}, stdout=log, stderr=log,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.folder)

    def failure(self, code: int) -> str:
        """The run's own one-line cause (its last ``eoskit run:`` line)."""
        lines = [line for line in self.log().read_text(errors="replace").splitlines() if line.strip()]
        said = [line for line in lines if line.startswith("eoskit run:")]
        return first_line(said[-1] if said else (lines[-1] if lines else f"exit {code}"))


class Chaos:
    """One ``eoskit chaos`` invocation (see the module's docstring)."""

    def __init__(self, settings: ChaosSettings, out: TextIO = sys.stderr) -> None:
        self.settings = settings
        self.out = out
        self.token = secrets.token_hex(2)
        self.runs: list[JobRun] = []
        self.created: list[Scratch | ScratchInput] = []
        self.timeline: list[Event] = []
        self.notes: list[str] = []
        self._live: subprocess.Popen | None = None
        self.snapshots: dict[str, Snapshots] = {}  # by role: the reference's and the chaos run's
        self.first_batch: int | None = None
        self.first_after: Fault | None = None

    def say(self, line: str) -> None:
        self.out.write(f"eoskit chaos: {line}\n")
        self.out.flush()

    # -- steps 1 to 3 ---------------------------------------------------------

    def prepare(self) -> None:
        self.pipeline = load_pipeline(self.settings.job)  # step 1
        check(self.pipeline)
        self.servers = services.find(self.settings.dev_dir, self.pipeline.source, self.pipeline.sink)
        self.drawn = self.applicable()
        source, input_suffix = self.pipeline.source, None
        if self.settings.records is not None:  # the input generated, into a scratch input
            input_suffix = f"chaos{self.token}i"
            filled = scratch_input(source, input_suffix)
            records = generate(str(self.settings.generator), self.settings.records)
            filled.create()
            self.created.append(filled)
            count = filled.produce(records)
            self.say(f"input: {count:,} records generated by {self.settings.generator} into {filled.name}")
            source = filled.source()
        self.pin = source.pin()  # step 2
        self.say(f"input pinned: {source.describe_pin(self.pin)}")
        work = self.settings.workdir or Path(tempfile.mkdtemp(prefix="eoskit-chaos-"))
        self.workdir = Path(work).absolute()
        roles = ["reference", "replay", "chaos"] if self.settings.check_determinism else ["reference", "chaos"]
        for role in roles:  # step 3
            suffix = f"chaos{self.token}{ROLE_LETTERS[role]}"
            folder = self.workdir / role
            folder.mkdir(parents=True, exist_ok=True)
            scratch = self.pipeline.sink.scratch(suffix)
            job_file = write_spec(folder, self.settings.job, self.pin, suffix, input_suffix)
            self.runs.append(JobRun(role, scratch, folder, job_file, self.settings.conf,
                                    launcher=self._launcher()))
        for run in self.runs:
            run.scratch.create()
            self.created.append(run.scratch)
            self.say(f"{run.role} run writes to {run.scratch.name}")

    # -- step 4 ---------------------------------------------------------------

    def _snapshots(self, run: JobRun) -> Snapshots:
        snapshots = self.snapshots[run.role] = Snapshots(run.scratch, run.committed)
        snapshots.start()
        return snapshots

    def run_clean(self, run: JobRun) -> None:
        self.say(f"{run.role} run (no faults)...")
        snapshots = self._snapshots(run) if run.role == "reference" else None
        process = self._start(run)
        code = self._wait(process)
        if snapshots is not None:
            snapshots.stop()
        if code != 0:
            raise ChaosRunFailedError(f"the {run.role} run failed without any fault: {run.failure(code)}")
        self.say(f"{run.role} run: {len(run.committed())} batches")

    def _start(self, run: JobRun, env: dict[str, str] | None = None) -> subprocess.Popen:
        self._live = run.start(env)
        return self._live

    def _wait(self, process: subprocess.Popen) -> int:
        try:
            code = process.wait(timeout=self.settings.run_timeout_s)
        except subprocess.TimeoutExpired:
            processes.kill_group(process.pid)
            raise ChaosRunFailedError(f"a run did not end within {self.settings.run_timeout_s:g} s") from None
        processes.kill_group(process.pid)  # what outlived the driver (its JVM)
        self._live = None
        return code

    def _launcher(self) -> tuple[str, ...]:
        """Every run on the lab's job host when the network between it and the
        services is to be cut (the reference too, so that all see the same)."""
        if "network" not in self.settings.kinds or "dev-network" not in self.servers.available():
            return ()
        assert self.servers.root is not None
        return tuple(network.job_host(self.servers.root).argv([]))

    def commit_mode(self) -> str:
        """The sink's commit mode as the runs will use it, read from its
        options (``commitMode``; the job-wide ``mode``): which windows the
        driver faults are aimed at."""
        sink = self.pipeline.sink
        if getattr(getattr(self.pipeline, "settings", None), "mode", None) == "at_least_once":
            return "at_least_once"
        if not isinstance(sink, Formatted):
            return "twophase"
        options = {k.lower(): str(v).strip().lower() for k, v in sink.all_options().items()}
        requested = options.get("commitmode", "exactly_once")
        if requested == "exactly_once":
            return "idempotent" if sink.spark_format == "eoskit-kafka" else "twophase"
        return requested

    def applicable(self) -> FaultPlan:
        """The plan the seed draws, less the faults this run cannot inject
        (said in the notes); refused when none is left, before anything runs.
        Driver faults are aimed at the windows the sink's commit mode leaves
        open (``plan.MODE_STEPS``)."""
        mode = self.commit_mode()
        drawn = FaultPlan.draw(self.settings.seed, self.settings.kinds, self.settings.kills,
                               self.settings.every_batches, steps=MODE_STEPS.get(mode, DRIVER_STEPS))
        plan, skipped = drawn.applicable(self.servers.available() | ({"cluster"} if self.cluster() else set()))
        if not plan.faults:
            raise ChaosRefusedError("; ".join(skipped) + ": no fault of --faults can be injected")
        self.notes += skipped
        return plan

    def plan(self, batches: int) -> FaultPlan:
        plan = self.drawn
        fits = tuple(f for f in plan.faults if f.after_batch + (1 if f.step else 0) < batches - 1)
        if len(fits) < len(plan.faults):
            self.notes.append(
                f"{len(plan.faults) - len(fits)} of {len(plan.faults)} faults left out: the input is "
                f"read in {batches} batches and they would land after the last (a smaller "
                "maxOffsetsPerTrigger makes more batches)")
        plan = FaultPlan(plan.seed, fits)
        if not plan.faults:
            raise ChaosRefusedError(
                f"no fault fits the input's {batches} batch(es): give the source a smaller "
                "maxOffsetsPerTrigger, or --faults-every 1,1")
        for note in self.notes:
            self.say(note)
        return plan

    def cluster(self) -> bool:
        """Whether the runs' executors are processes of their own (a Spark
        standalone cluster's master, from --master, the job or the environment)."""
        master = (self.settings.conf.get("spark.master") or self.pipeline.spark_conf.get("spark.master")
                  or os.environ.get("EOSKIT_SPARK_MASTER") or os.environ.get("MASTER") or "")
        return master.startswith("spark://")

    # -- step 5 ---------------------------------------------------------------

    def run_with_faults(self, run: JobRun, plan: FaultPlan) -> None:
        pending = list(plan.faults)
        draw = random.Random(plan.seed)
        seen: set[int] = set()
        self.say(f"chaos run: {len(pending)} faults (--seed {plan.seed})")
        snapshots = self._snapshots(run)
        control = run.folder / "crash-control"
        while True:
            armed = next((f for f in pending if f.kind == "driver" and f.step), None)
            fired = run.folder / f"fault-{armed.index}.fired" if armed else None
            # The driver step is armed (crash.arm) only once every fault
            # planned before it is done, so that fast batches never let it
            # overtake them.
            crash.disarm(control)
            process = self._start(run, {crash.CONTROL_ENV: str(control)})
            killed = self._watch(run, process, pending, armed, fired, draw, seen, control)
            if not killed:
                break
            self.timeline.append(RestartEvent(_now()))
        snapshots.stop()
        self._heal_cut()
        for fault in pending:
            self.notes.append(f"{fault.describe()}: not injected, the run ended first")

    def _watch(self, run: JobRun, process: subprocess.Popen, pending: list[Fault], armed: Fault | None,
               fired: Path | None, draw: random.Random, seen: set[int], control: Path) -> bool:
        """Until the run ends; True if a driver fault ended it."""
        due: float | None = None  # when the head fault's timed action is due
        armed_now = False
        while True:
            code = process.poll()
            for batch in run.committed():
                if batch not in seen:
                    seen.add(batch)
                    self.timeline.append(BatchEvent(batch, _at(run.commit_file(batch))))
            if armed is not None and fired is not None and fired.exists():
                self._wait(process)  # the driver killed itself, its group with it
                self._record(pending.pop(0), _at(fired), f"at {armed.step}")  # armed as the head
                return True
            head = pending[0] if pending else None
            if head is not None and head is armed and fired is not None and not armed_now:
                crash.arm(control, armed.step, armed.after_batch + 1, fired, driver=True)
                armed_now = True
            if code is not None:
                self._wait(process)
                if code == 0:
                    return False
                raise ChaosRunFailedError(f"the chaos run failed by itself: {run.failure(code)}")
            if head is not None:
                trigger = head.after_batch + (1 if head is armed else 0)
                if run.commit_file(trigger).exists():
                    if due is None:
                        due = time.monotonic() + head.delay_s
                    elif time.monotonic() >= due:
                        due = None
                        pending.pop(0)
                        if head.kind == "driver":
                            processes.kill_group(process.pid)
                            self._wait(process)
                            how = "the step did not come: " if head is armed else ""
                            self._record(head, _now(), f"{how}{head.delay_s:.3f} s after batch {trigger}")
                            return True
                        self._inject(head, process, draw, f"{head.delay_s:.3f} s after batch {trigger}")
            time.sleep(0.02)

    def _inject(self, fault: Fault, process: subprocess.Popen, draw: random.Random, when: str) -> None:
        """A fault that leaves the driver running: a worker or an executor
        killed, or a server stopped and started again."""
        if fault.kind in SERVICE_KINDS:
            at = _now()
            name = self.servers.restart(fault.kind, fault.down_s)
            self._record(fault, at, f"{when}; {name} stopped, started again {fault.down_s:.3f} s later",
                         did="stopped")
            return
        if fault.kind == "network":
            at, name = _now(), self._cut(fault)
            self._record(fault, at, f"{when}; the job's host and {name}: {fault.cut} for {fault.down_s:.3f} s",
                         did="made")
            return
        found = (processes.executors(process.pid) if fault.kind == "executor"
                 else processes.python_workers(process.pid))
        if found and processes.kill(draw.choice(found)):
            self._record(fault, _now(), when)
        else:
            what = "executor of the run was found on this machine" if fault.kind == "executor" \
                else "Python worker was alive to kill"
            self.notes.append(f"{fault.describe()}: no {what}")

    def _cut(self, fault: Fault) -> str:
        """A network fault between the lab's job host and the service the
        job's sink (or source) talks to, healed ``down_s`` seconds later
        while the run is watched on (an earlier cut healed first); the
        service's name."""
        import threading

        assert self.servers.root is not None
        self._heal_cut()
        lab = network.lab(self.servers.root)
        name = self.servers.network_target()
        job, server = lab.hosts[network.JOB_HOST], lab.hosts[name]
        made = {"partition": lambda: lab.partition(job, server),
                "lost replies": lambda: lab.lose_replies(server, job),
                "reset": lambda: lab.reset(job, server)}[fault.cut or "partition"]()
        self._cut_made = made
        self._cut_timer = threading.Timer(fault.down_s, made.heal)
        self._cut_timer.start()
        return name

    def _heal_cut(self) -> None:
        """The cut in force, healed now (before the next, and at the end)."""
        timer, made = getattr(self, "_cut_timer", None), getattr(self, "_cut_made", None)
        if timer is not None:
            timer.cancel()
        if made is not None:
            made.heal()
        self._cut_timer = self._cut_made = None

    def _record(self, fault: Fault, at: datetime, how: str, did: str = "killed") -> None:
        self.timeline.append(FaultEvent(fault, at, how))
        self.say(f"fault {fault.index}: {fault.kind} {did} ({how})")

    # -- step 6 ---------------------------------------------------------------

    def outputs(self) -> list[OutputResult]:
        by_role = {run.role: run for run in self.runs}
        columns, reference, key = by_role["reference"].scratch.rows()
        chaos_columns, chaos, _ = by_role["chaos"].scratch.rows()
        columns = columns or chaos_columns
        unknown = [c for c in self.settings.ignore if c not in columns]
        if unknown and columns:
            raise ChaosRefusedError(f"--ignore-columns: the output has no column {unknown[0]!r} "
                                    f"(columns: {', '.join(columns)})")
        keep = [i for i, c in enumerate(columns) if c not in self.settings.ignore]

        def kept(rows: list[tuple]) -> list[tuple]:
            return [tuple(r[i] for i in keep) for r in rows] if self.settings.ignore else rows

        columns, reference, chaos = tuple(columns[i] for i in keep), kept(reference), kept(chaos)
        key = tuple(k for k in key if k in columns)
        result = compare(reference, chaos, columns, key or None) if columns else _empty()
        determinism, odd = None, ()
        if "replay" in by_role:
            _, replay, _ = by_role["replay"].scratch.rows()
            replay = kept(replay)
            determinism = compare(reference, replay, columns, key or None) if columns else _empty()
            if not determinism.exact:
                odd = tuple(nondeterministic_columns(reference, replay, columns, key or None))
        if not result.exact:
            self.locate(keep if self.settings.ignore else None)
        name = self.pipeline.sink.describe()
        if odd:  # what the sink did, apart from what the job computes anew on a replay
            keep = [i for i, c in enumerate(columns) if c not in odd]
            rest = compare([tuple(r[i] for i in keep) for r in reference],
                           [tuple(r[i] for i in keep) for r in chaos], [columns[i] for i in keep])
            self.notes.append(f"{name}, without {', '.join(odd)}: the chaos run's rows are "
                              f"{rest.summary()}")
        return [OutputResult(name, result, determinism, odd)]

    def locate(self, keep: list[int] | None) -> None:
        """The chaos run's batch by which its output first differed, and the
        last fault before that (``snapshots``)."""
        reference, chaos = self.snapshots.get("reference"), self.snapshots.get("chaos")
        if reference is None or chaos is None:
            return
        if reference.gave_up or chaos.gave_up:
            self.notes.append(f"first difference not located: {reference.gave_up or chaos.gave_up}")
            return
        commits: dict[int, datetime] = {}
        for event in self.timeline:
            if isinstance(event, BatchEvent):
                commits.setdefault(event.batch, event.time)
        found = first_difference(reference.rows(keep), chaos.rows(keep), commits)
        if found is None:
            return
        self.first_batch = found[0]
        before = [e.fault for e in self.timeline if isinstance(e, FaultEvent) and e.time <= found[1]]
        self.first_after = before[-1] if before else None

    def cleanup(self) -> None:
        self._heal_cut()  # a network cut never outlives the command
        for snapshots in self.snapshots.values():
            snapshots.cancel()
        if self._live is not None:
            processes.kill_group(self._live.pid)
            self._live = None
        if self.settings.keep:
            if self.created:
                self.say("kept: " + ", ".join(s.name for s in self.created) + f"; runs in {self.workdir}")
            return
        for scratch in self.created:
            try:
                scratch.drop()
            except Exception as exc:  # noqa: BLE001 - say what is left, drop the others
                self.say(f"could not drop {scratch.name}: {first_line(str(exc))}; drop it by hand")
        self.created.clear()
        if self.settings.workdir is None and getattr(self, "workdir", None) is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)  # a temporary folder of ours

    def run(self) -> ChaosReport:
        interrupted = False
        previous = signal.getsignal(signal.SIGINT)
        try:
            self.prepare()
            by_role = {run.role: run for run in self.runs}
            self.run_clean(by_role["reference"])
            if "replay" in by_role:
                self.run_clean(by_role["replay"])
            plan = self.plan(len(by_role["reference"].committed()))
            self.run_with_faults(by_role["chaos"], plan)
            report = ChaosReport(str(self.settings.job), self.settings.seed, self.outputs(),
                                 self.timeline, notes=self.notes, first_difference_after=self.first_after,
                                 first_difference_batch=self.first_batch)
            return report
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the cleanup short
            try:
                self.cleanup()
            finally:
                signal.signal(signal.SIGINT, previous)
            if interrupted:
                self.say("interrupted: the run in progress was stopped" +
                         ("" if self.settings.keep else " and the scratch targets dropped"))


def _empty() -> Comparison:
    return compare([], [], ())


def chaos(settings: ChaosSettings, out: TextIO = sys.stderr,
          on_report: Callable[[ChaosReport], Any] | None = None) -> ChaosReport:
    """Run ``eoskit chaos`` (see the module's docstring); the report."""
    report = Chaos(settings, out).run()
    if on_report is not None:
        on_report(report)
    return report
