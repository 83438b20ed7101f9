"""Soak run: one exactly-once job for a long time under random faults, then
proof that every record landed once and that nothing grew without bound.

Not a CI test: a benchmark-style script the lead runs for 30 minutes. It
runs the benchmarks' job (``benchlib/job.py``: the conformance kit's record
format, a real ``eoskit run`` process, the table checked with an independent
client), ``LocalServices.restart`` for
PostgreSQL restarts that keep the data, and ``LocalServices.kill`` then
``up`` for broker crashes (Apache Kafka, SIGKILLed, back with its log
directory). See docs/soak.md and the "Soak run" section of
benchmarks/README.md.

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--seed 1] [--rate 2000]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import psutil
from confluent_kafka import Producer

from eoskit.runtime.devtools.demo.orders import recreate_topic
from eoskit.runtime.devtools.services import LocalServices
from eoskit.twophase.txn_id import sink_prefix

from benchlib.job import JobRun, PostgresTable, Workload
from benchlib.report import fail, machine_facts, print_table, say


#: The job rides out service faults by itself; only a driver kill ends it.
RESTART_STRATEGY = "exponential_delay(initial=1s, max=10s)"
FAULTS = ("driver", "worker", "postgres", "broker")
#: A fault's downtime (PostgreSQL stopped, broker killed), seconds.
DOWNTIME_S = (3.0, 8.0)
#: Flat: the last quarter's mean is within this factor of the second
#: quarter's, or within the metric's absolute slack (small numbers are noise).
FLAT_FACTOR = 1.2
SLACK = {"rss_mib": 64.0, "prepared": 4.0, "ckpt_mib": 1.0, "ckpt_files": 50.0, "decisions": 20.0,
         "batch_p50_s": 0.1}


# ---------------------------------------------------------- the steady input

class SteadyProducer(threading.Thread):
    """Produces the workload's records (id i -> partition i mod
    partitions) at ``rate`` per second until stopped. Idempotent, so that its
    own retries across a broker crash cannot duplicate an input record."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, log: Path) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        # librdkafka's complaints while the broker is down go to a file, not the report.
        self.logger = logging.getLogger("soak.producer")
        self.logger.propagate = False
        self.logger.addHandler(logging.FileHandler(log))
        self.produced = 0
        self.errors: list[str] = []
        self._halt = threading.Event()

    def record(self, i: int) -> tuple[int, bytes, bytes]:
        value = {"id": i, "amount": Workload.amount(i), "customer": f"c{i % 50}"}
        return i % self.partitions, str(i).encode(), json.dumps(value).encode()

    def _delivered(self, error, _message) -> None:  # type: ignore[no-untyped-def]
        if error is not None:
            self.errors.append(str(error))

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "linger.ms": 20, "message.timeout.ms": 600_000},
                            logger=self.logger)
        started = time.monotonic()
        while not self._halt.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.produced < due:
                partition, key, value = self.record(self.produced)
                try:
                    producer.produce(self.topic, key=key, value=value, partition=partition,
                                     on_delivery=self._delivered)
                except BufferError:  # the queue is full (the broker is down): wait for it
                    producer.poll(0.1)
                    continue
                self.produced += 1
            producer.poll(0.05)
        left = producer.flush(600)
        if left:
            self.errors.append(f"{left} record(s) not delivered at the end")

    def finish(self) -> int:
        """Stop and flush. Returns how many records the topic holds: ids 0 .. n-1."""
        self._halt.set()
        self.join()
        return self.produced


# ------------------------------------------------------- the job's processes

@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    cmdline: str
    rss_kib: int  # memory: PSS (see _memory_kib)
    comm: str = ""


def processes_of_group(pgid: int) -> list[Proc]:
    """Every process of the job started as session (and group) ``pgid``
    (psutil, with ``getsid`` and ``getpgid``, which it does not read):
    Spark's Python daemons put themselves and their workers in process
    groups of their own, but stay in the session."""
    found = []
    for process in psutil.process_iter(["ppid", "name", "cmdline"]):
        try:
            if os.getsid(process.pid) != pgid:
                continue
            found.append(Proc(process.pid, process.info["ppid"], os.getpgid(process.pid),
                              " ".join(process.info["cmdline"] or ()), _memory_kib(process),
                              process.info["name"] or ""))
        except (OSError, psutil.Error):
            continue  # gone meanwhile
    return found


def _memory_kib(process: psutil.Process) -> int:
    """The process's proportional set size (PSS): pages it shares with others
    (Python workers forked from one daemon or zygote share most of theirs)
    count once across them, where summed RSS would count them in each.
    RSS where the kernel has no ``smaps``."""
    memory = process.memory_full_info()
    return getattr(memory, "pss", memory.rss) // 1024


def python_workers(pgid: int) -> list[Proc]:
    """The job's task workers: children forked by the ``pyspark.worker``
    daemon (eoskit's ``worker_daemon``, or its copy forked by the zygote,
    named ``pyspark.worker``: see eoskit.runtime.spark.zygote)."""
    procs = processes_of_group(pgid)
    daemons = {p.pid for p in procs if "worker_daemon" in p.cmdline or p.comm == "pyspark.worker"}
    return [p for p in procs if p.ppid in daemons]


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def disk_usage(path: Path) -> tuple[int, int]:
    """(bytes on disk, files) under ``path``."""
    size = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                size += os.lstat(os.path.join(root, name)).st_blocks * 512
                files += 1
            except OSError:
                pass
    return size, files


def batch_latencies(checkpoint: Path, after: int) -> tuple[int | None, list[float]]:
    """(the newest batch in Spark's commit log, the latency of each batch
    committed after batch ``after``): from its offset-log entry's mtime (the
    batch planned) to its commit-log entry's (the sink committed, Spark
    logged it). Spark keeps the last 100 of each: a sample every few
    seconds sees every batch."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")]
    if not commits:
        return None, []
    latencies = []
    for batch in sorted(b for b in commits if b > after):
        try:
            latencies.append((checkpoint / "commits" / str(batch)).stat().st_mtime
                             - (checkpoint / "offsets" / str(batch)).stat().st_mtime)
        except OSError:
            continue  # pruned meanwhile
    return max(commits), latencies


def percentiles(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    ordered = sorted(values)
    return (statistics.median(ordered),
            ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))])


# ------------------------------------------------------------------ the soak

@dataclass
class Sample:
    t_s: float
    rss_mib: float | None  # the job's JVM and Python processes; None while it restarts
    jvm_mib: float | None
    python_mib: float | None
    prepared: float | None  # None while PostgreSQL restarts
    ckpt_mib: float
    ckpt_files: float
    produced: int
    batch: int | None = None  # the newest batch Spark committed
    batch_p50_s: float | None = None  # offsets logged -> commit logged, batches since the last sample
    batch_p99_s: float | None = None
    decisions: float | None = None  # the decision log's entries (files under decisions/)


class Soak:
    def __init__(self, args: argparse.Namespace, run: JobRun, services: LocalServices,
                 producer: SteadyProducer) -> None:
        self.args, self.run, self.services, self.producer = args, run, services, producer
        self.rng = random.Random(args.seed)
        self.started = time.monotonic()
        self.samples: list[Sample] = []
        self.events: list[str] = []
        self.job: subprocess.Popen | None = None
        self.unexpected_exits = 0
        self._last_batch = -1

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def note(self, text: str) -> None:
        line = f"[{self.elapsed():7.1f} s] {text}"
        self.events.append(line)
        say(line)

    def start_job(self) -> None:
        self.job = self.run.start(until_caught_up=False, EOSKIT_BENCH_RESTART_STRATEGY=RESTART_STRATEGY)

    def stop_job(self) -> None:
        """SIGTERM: the job stops at a batch boundary; SIGKILL if it does not."""
        assert self.job is not None
        if self.job.poll() is None:
            self.job.send_signal(signal.SIGTERM)
            try:
                self.job.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.note("the job did not stop within 120 s of SIGTERM: SIGKILL")
        kill_group(self.job.pid)
        self.job.wait()

    def sample(self) -> Sample:
        assert self.job is not None
        procs = processes_of_group(self.job.pid) if self.job.poll() is None else []
        jvm = sum(p.rss_kib for p in procs if "java" in p.cmdline.split(" ")[0]) / 1024
        python = sum(p.rss_kib for p in procs if "java" not in p.cmdline.split(" ")[0]) / 1024
        has_jvm = jvm > 0
        try:
            prepared: float | None = len(self.run.target.prepared(sink_prefix(self.run.sink_id)))
        except (AssertionError, subprocess.TimeoutExpired):  # psql failed: the server is down
            prepared = None
        size, files = disk_usage(self.run.checkpoint)
        newest, latencies = batch_latencies(self.run.checkpoint, self._last_batch)
        if newest is not None:
            self._last_batch = newest
        p50, p99 = percentiles(latencies)
        decisions = sum(1 for _ in self.run.checkpoint.glob("**/decisions/*.json"))
        return Sample(round(self.elapsed(), 1), jvm + python if has_jvm else None,
                      jvm if has_jvm else None, python if has_jvm else None,
                      prepared, size / 2**20, files, self.producer.produced,
                      newest, p50, p99, decisions)

    def inject(self, fault: str) -> None:
        assert self.job is not None
        down = self.rng.uniform(*DOWNTIME_S)
        if fault == "driver":
            kill_group(self.job.pid)
            self.job.wait()
            self.note("SIGKILL of the driver's process group; starting `eoskit run` again")
            self.start_job()
        elif fault == "worker":
            workers = python_workers(self.job.pid)
            if not workers:
                self.note("worker fault: no Python worker running (the job is starting); skipped")
                return
            victim = self.rng.choice(sorted(workers, key=lambda p: p.pid))
            os.kill(victim.pid, signal.SIGKILL)
            self.note(f"SIGKILL of Python worker {victim.pid} (of {len(workers)})")
        elif fault == "postgres":
            self.note(f"PostgreSQL restarting, down for {down:.1f} s")
            self.services.restart("postgres", while_down=lambda: time.sleep(down))
            self.note("PostgreSQL back")
        elif fault == "broker":
            self.services.kill("kafka")
            self.note(f"broker SIGKILLed, down for {down:.1f} s")
            time.sleep(down)
            self.services.up()
            self.note("broker back (eoskit dev up)")

    def loop(self) -> None:
        args = self.args
        self.start_job()
        end = self.started + args.minutes * 60
        next_sample = self.started
        next_fault = self.started + args.warmup + self.rng.uniform(0.5, 1.5) * args.fault_every
        while time.monotonic() < end:
            assert self.job is not None
            if self.job.poll() is not None:
                code = self.job.returncode
                self.unexpected_exits += 1
                self.note(f"the job ended by itself (exit {code}); starting it again. "
                          f"Log tail:\n{self.run.last_log()[-1500:]}")
                kill_group(self.job.pid)
                self.start_job()
            now = time.monotonic()
            if now >= next_sample:
                self.samples.append(self.sample())
                next_sample = now + args.sample_every
            if now >= next_fault:
                self.inject(self.rng.choice(FAULTS))
                next_fault = time.monotonic() + self.rng.uniform(0.5, 1.5) * args.fault_every
            time.sleep(0.5)


# ------------------------------------------------------------------ the report

METRICS = ("rss_mib", "prepared", "ckpt_mib", "ckpt_files", "decisions", "batch_p50_s")


def flatness(samples: list[Sample]) -> list[tuple[str, float, float, bool]]:
    """(metric, second-quarter mean, last-quarter mean, flat) per metric."""
    n = len(samples)
    second, last = samples[n // 4: n // 2], samples[3 * n // 4:]
    verdicts = []
    for metric in METRICS:
        a = [v for s in second if (v := getattr(s, metric)) is not None]
        b = [v for s in last if (v := getattr(s, metric)) is not None]
        if not a or not b:
            verdicts.append((metric, float("nan"), float("nan"), False))
            continue
        ma, mb = statistics.fmean(a), statistics.fmean(b)
        verdicts.append((metric, ma, mb, mb <= ma * FLAT_FACTOR or mb - ma <= SLACK[metric]))
    return verdicts


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def report(soak: Soak, facts_before: list[tuple[str, str]], total: int,
           catch_up_s: float) -> list[tuple[str, float, float, bool]]:
    args, samples = soak.args, soak.samples
    print_table("machine (at start)", facts_before)
    print_table("parameters", [
        ("minutes", str(args.minutes)), ("seed", str(args.seed)),
        ("rate (records/s)", f"{args.rate:,}"), ("partitions", str(args.partitions)),
        ("maxOffsetsPerTrigger", f"{args.max_offsets_per_trigger:,}"),
        ("mean seconds between faults", str(args.fault_every)),
        ("restart strategy", RESTART_STRATEGY),
        ("records produced", f"{total:,}"),
        ("final catch-up run", f"{catch_up_s:.1f} s"),
    ])
    kinds = {f: sum(1 for e in soak.events if key in e) for f, key in (
        ("driver SIGKILL", "SIGKILL of the driver"), ("worker SIGKILL", "SIGKILL of Python worker"),
        ("worker skipped", "no Python worker running"), ("PostgreSQL restart", "PostgreSQL restarting"),
        ("broker SIGKILL", "broker SIGKILLed"))}
    print_table("faults", [(k, str(v)) for k, v in kinds.items()]
                + [("job exits not caused by the soak", str(soak.unexpected_exits))])
    print("\nevents:")
    for line in soak.events:
        print(f"  {line.splitlines()[0]}")
    picks = [("first", samples[0]), ("middle", samples[len(samples) // 2]), ("last", samples[-1])]
    header = ("", "t (s)", "PSS MiB", "JVM MiB", "Python MiB", "prepared", "ckpt MiB", "ckpt files",
              "decisions", "batch", "batch p50 s", "produced")
    print(f"\nsamples ({len(samples)}, every {args.sample_every:.0f} s; memory is PSS, '-' while the job restarts):")
    print("  " + " ".join(f"{h:>11}" for h in header))
    for label, s in picks:
        print("  " + " ".join(f"{x:>11}" for x in (
            label, fmt(s.t_s), fmt(s.rss_mib), fmt(s.jvm_mib), fmt(s.python_mib), fmt(s.prepared),
            fmt(s.ckpt_mib), fmt(s.ckpt_files), fmt(s.decisions),
            "-" if s.batch is None else f"{s.batch:,}",
            "-" if s.batch_p50_s is None else f"{s.batch_p50_s:.3f}", f"{s.produced:,}")))
    maxima = ["max", "", *(fmt(max((v for s in samples if (v := getattr(s, m)) is not None),
                                   default=None))
                           for m in ("rss_mib", "jvm_mib", "python_mib", "prepared", "ckpt_mib",
                                     "ckpt_files", "decisions")), "", "", ""]
    print("  " + " ".join(f"{x:>11}" for x in maxima))
    verdicts = flatness(samples)
    print(f"\nflatness (last quarter's mean against the second quarter's; flat within "
          f"x{FLAT_FACTOR} or the metric's slack):")
    for metric, a, b, flat in verdicts:
        print(f"  {metric:<11} {a:>10,.1f} -> {b:>10,.1f}  "
              f"{'flat' if flat else 'NOT FLAT'} (slack {SLACK[metric]:g})")
    print_table("machine (at end)", machine_facts()[2:3])
    if args.samples_json:
        Path(args.samples_json).write_text(json.dumps(
            {"samples": [s.__dict__ for s in samples], "events": soak.events}, indent=1))
    if args.plot:
        plot([s.__dict__ for s in samples], soak.events, Path(args.plot))
        say(f"plot: {args.plot}")
    return verdicts


#: How the events of a fault's start begin (not the "... back" ones).
FAULT_STARTS = ("SIGKILL of", "PostgreSQL restarting", "broker SIGKILLed")

#: What the plot shows, one panel each: (field, label).
PANELS = (("rss_mib", "PSS of the job's processes (MiB)"),
          ("batch_p50_s", "batch latency, median (s)"),
          ("ckpt_files", "checkpoint files"),
          ("decisions", "decision-log entries"),
          ("prepared", "prepared transactions"))


def plot(samples: list[dict], events: list[str], path: Path) -> None:
    """The samples over time, one panel per metric, each fault a vertical
    line (red: the driver killed; grey: the others). Needs matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = [s["t_s"] / 3600 for s in samples]
    faults = []
    for line in events:
        text = line.split("] ", 1)[-1]
        if line.startswith("[") and text.startswith(FAULT_STARTS):
            faults.append((float(line[1:line.index(" s]")]) / 3600, "driver" in text.split(";")[0]))
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(10, 2.1 * len(PANELS)), sharex=True)
    for ax, (field, label) in zip(axes, PANELS):
        for at, driver in faults:
            ax.axvline(at, color="tab:red" if driver else "0.8", linewidth=0.6, zorder=0)
        ax.plot(hours, [s.get(field) if s.get(field) is not None else float("nan") for s in samples],
                ".", markersize=2)
        ax.set_ylabel(label, fontsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("hours (vertical lines: faults; red: the driver's process group SIGKILLed)")
    batches = [s["batch"] for s in samples if s.get("batch") is not None]
    fig.suptitle(f"soak: {hours[-1]:.2f} h, {max(batches, default=0):,} batches, {len(faults)} faults",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ------------------------------------------------------------------------ main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1, help="seeds the faults' order, timing and length")
    parser.add_argument("--rate", type=int, default=2000, help="records produced per second")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=20_000)
    parser.add_argument("--fault-every", type=float, default=45.0,
                        help="mean seconds between faults (each gap uniform in 0.5x..1.5x)")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds before the first fault")
    parser.add_argument("--sample-every", type=float, default=10.0)
    parser.add_argument("--dev-dir", default=None,
                        help="the `eoskit dev` folder whose PostgreSQL the soak uses AND RESTARTS "
                             "(default: a fresh one under .eoskit/soak/, stopped and deleted at the "
                             "end); never a folder whose services others use")
    parser.add_argument("--workdir", default=None,
                        help="checkpoint, job logs and broker (default .eoskit/soak/run-<time>)")
    parser.add_argument("--samples-json", default=None,
                        help="also write every sample and event to this file")
    parser.add_argument("--plot", default=None, help="draw the samples into this PNG (needs matplotlib)")
    parser.add_argument("--plot-from", default=None, metavar="SAMPLES_JSON",
                        help="only draw --plot from a --samples-json file of an earlier run")
    args = parser.parse_args(argv)
    if args.plot_from and not args.plot:
        parser.error("--plot-from needs --plot FILE.png")
    if args.minutes <= 0 or args.rate <= 0 or args.fault_every <= 0:
        parser.error("--minutes, --rate and --fault-every must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot_from:
        data = json.loads(Path(args.plot_from).read_text())
        plot(data["samples"], data["events"], Path(args.plot))
        return 0
    facts_before = machine_facts()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    workdir = Path(args.workdir or f".eoskit/soak/run-{stamp}").absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    fresh_dev = args.dev_dir is None
    services = LocalServices(args.dev_dir or workdir / "dev")
    say(f"local services under {services.root}")
    endpoints = services.up()
    target = PostgresTable(endpoints.postgres_url)
    topic = f"soak-{stamp}"
    recreate_topic(endpoints.kafka_bootstrap, topic, args.partitions)
    workload = Workload(endpoints.kafka_bootstrap, topic, 0, args.partitions, args.max_offsets_per_trigger)
    run = JobRun(target, workload, workdir)
    target.create_table(run.table)
    producer = SteadyProducer(endpoints.kafka_bootstrap, topic, args.partitions, args.rate,
                              workdir / "producer.log")
    soak = Soak(args, run, services, producer)
    problems: list[str] = []
    try:
        say(f"soak: {args.minutes:g} min, {args.rate:,} records/s into {topic}, job -> {run.table}, "
            f"seed {args.seed}; job logs in {workdir}")
        producer.start()
        soak.loop()
        say("stopping the input; stopping the job (SIGTERM)")
        total = producer.finish()
        soak.stop_job()
        say(f"catching up on {total:,} records: `eoskit run --until-caught-up`")
        started = time.monotonic()
        code, log = run.run_job(timeout=1800, EOSKIT_BENCH_RESTART_STRATEGY=RESTART_STRATEGY)
        catch_up_s = time.monotonic() - started
        soak.samples.append(soak.sample())
        if code != 0:
            problems.append(f"the catch-up run failed (exit {code}): {log[-2000:]}")
        problems += [f"the input producer: {e}" for e in producer.errors[:5]]
        if not problems:
            say("verifying exactly once (psql)")
            run.workload = replace(workload, records=total)
            try:
                run.verify_exactly_once()
            except AssertionError as exc:
                problems.append(str(exc))
        verdicts = report(soak, facts_before, total, catch_up_s)
        if not problems:
            target.drop_table(run.table)
    finally:
        if soak.job is not None:
            kill_group(soak.job.pid)
        if fresh_dev:
            services.down()
    if problems:
        say(f"kept for inspection: {workdir} (table {run.table})")
        return fail(problems)
    if fresh_dev:
        services.purge()
    flat = all(v[3] for v in verdicts)
    say(f"verified: each of the {total:,} records exactly once, nothing prepared; "
        f"{'flat' if flat else 'NOT FLAT: see the flatness table'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
