"""Restart speed: from a killed driver's restart to the first committed batch.

The benchmarks' job (``eoskit-kafka`` -> ``from_json`` -> ``eoskit-postgres``,
two-phase, ``benchlib/job.py``) is SIGKILLed by a crash point
right after the coordinator decided batch 1, with its transactions still
prepared, as ``kill -9`` of a driver at the worst moment would leave it.
Then ``eoskit run`` is started again on the same checkpoint, and the clock
runs from that process's start (``Popen``) to the moment batch 1's entry
appears in the checkpoint's commit log: the JVM's start, the session, the
query's start, the sink's sweep (which commits the decided transactions),
the replayed batch and its commit. The run then goes on to the end of the
topic and the table is verified with psql: every record once.

Locally (``local[2,3]``, as the conformance tests run it) and, with
``--cluster``, on a Spark standalone cluster of one master and two workers
started from the installed PySpark (``eoskit dev cluster``). See
benchmarks/README.md, "Restart speed".

    .venv/bin/python benchmarks/restart.py [--rounds 3] [--cluster]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from eoskit.runtime.devtools.services import LocalServices
from eoskit.runtime.devtools.services.cluster import SparkCluster
from eoskit.core import crash
from eoskit.runtime.job.control import ControlDir
from eoskit.twophase.txn_id import sink_prefix

from benchlib.job import JobRun, PostgresTable, Workload
from benchlib.postgres import pg_connect
from benchlib.report import machine_facts, peer_record, print_table, say, write_json_out


#: The most a restart may take to its first committed batch, locally (issue 21; issue 13 asked 10 s).
TARGET_S = 5.0
POLL_S = 0.02
#: A cluster's executors: as the cluster test tier starts them.
CLUSTER_CONF = {
    "spark.executor.memory": "768m",
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


#: The milestones of a restart, in the order they are reached, seen from
#: outside the job: its JVM running, the crashed run's prepared
#: transactions committed (the sink's start-up sweep, once the session and
#: the query have started), the replayed batch in the commit log.
MILESTONES = ("jvm", "swept", "committed")


def restart_once(run: JobRun, batch: int, postgres_url: str) -> tuple[dict[str, float], int, str]:
    """Start the job again; seconds from its start to each of MILESTONES
    (``committed``: ``batch`` in the commit log), its exit code and log
    once it ends. The milestones are polled every POLL_S: the job's process
    group for a ``java`` process, PostgreSQL's ``pg_prepared_xacts`` (one
    connection, a query of about a millisecond) for the sink's ids."""
    from eoskit.runtime.devtools.chaos.processes import run_processes

    committed = run.checkpoint / "commits" / str(batch)
    assert not committed.exists(), f"batch {batch} was committed before the restart"
    prefix = sink_prefix(run.sink_id)
    seen: dict[str, float] = {}
    with pg_connect(postgres_url, autocommit=True) as conn:
        def prepared() -> bool:
            return conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE starts_with(gid, %s) LIMIT 1",
                                (prefix,)).fetchone() is not None
        assert prepared(), "the crashed run left no prepared transaction to commit"
        started = time.perf_counter()
        process = run.start()
        while not committed.exists():
            if process.poll() is not None:
                code, log = run.wait(process)
                raise RuntimeError(f"the restarted job ended (exit {code}) before batch {batch} "
                                   f"committed:\n{log[-3000:]}")
            now = time.perf_counter() - started
            if "jvm" not in seen and any(p.name == "java" for p in run_processes(process.pid).values()):
                seen["jvm"] = now
            if "swept" not in seen and not prepared():
                seen["swept"] = now
            time.sleep(POLL_S)
        seen["committed"] = time.perf_counter() - started
    code, log = run.wait(process)
    return seen, code, log


#: The most a takeover may take before the round fails (a standby that hangs).
TAKEOVER_TIMEOUT_S = 300.0
#: How long a standby's idle cost is sampled before the job is started.
IDLE_SAMPLE_S = 5.0


def standby_once(run: JobRun, batch: int, postgres_url: str) -> tuple[dict[str, float], dict[str, float]]:
    """The standby path (``--standby``): ``eoskit run --standby`` started
    first and warm, then the job, SIGKILLed by the crash point after batch
    ``batch``'s decision; seconds from the killed driver's end (its process
    reaped) to each of the standby's milestones (``claimed``: the run record
    is the standby's; ``swept``; ``committed``), and the standby's idle cost
    (resident set of its process tree, MiB; CPU share of one core while it
    stands by). The standby then runs to the end of the topic."""
    import psutil

    from eoskit.runtime.devtools.chaos.processes import run_processes

    logs_before = set(run.workdir.glob("run-*.log"))
    standby = run.start(args=["--standby"])
    (log,) = set(run.workdir.glob("run-*.log")) - logs_before
    deadline = time.monotonic() + 300
    while "standing by" not in log.read_text():
        if standby.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the standby did not stand by (exit {standby.poll()}):\n{log.read_text()[-3000:]}")
        time.sleep(POLL_S)

    def tree() -> list[psutil.Process]:
        return [psutil.Process(pid) for pid in run_processes(standby.pid)]

    def cpu_s() -> float:
        return sum(sum(p.cpu_times()[:2]) for p in tree())

    before, started = cpu_s(), time.perf_counter()
    time.sleep(IDLE_SAMPLE_S)
    idle = {"rss_mib": sum(p.memory_info().rss for p in tree()) / 2**20,
            "cpu_share": (cpu_s() - before) / (time.perf_counter() - started)}
    control = ControlDir(str(run.checkpoint))
    committed = run.checkpoint / "commits" / str(batch)
    prefix = sink_prefix(run.sink_id)
    seen: dict[str, float] = {}
    with pg_connect(postgres_url, autocommit=True) as conn:
        active = run.start(**{crash.ENV: f"{crash.DRIVER_AFTER_DECISION}@{batch}"})
        code = active.wait(timeout=600)
        died = time.perf_counter()
        run.wait(active)  # what is left of its group
        if code != -9:
            raise RuntimeError(f"the crash point did not fire (exit {code}):\n{run.last_log()[-3000:]}")
        while not committed.exists():
            now = time.perf_counter() - died
            if now > TAKEOVER_TIMEOUT_S:
                os.killpg(standby.pid, signal.SIGKILL)
                raise RuntimeError(f"the standby did not commit batch {batch} within {TAKEOVER_TIMEOUT_S:.0f} s "
                                   f"of the driver's death:\n{log.read_text()[-3000:]}")
            if standby.poll() is not None:
                raise RuntimeError(f"the standby ended (exit {standby.returncode}) before batch {batch} "
                                   f"committed:\n{log.read_text()[-3000:]}")
            if "claimed" not in seen and (control.last_run() or {}).get("pid") == standby.pid:
                seen["claimed"] = now
            if "swept" not in seen and conn.execute(
                    "SELECT 1 FROM pg_prepared_xacts WHERE starts_with(gid, %s) LIMIT 1",
                    (prefix,)).fetchone() is None:
                seen["swept"] = now
            time.sleep(POLL_S)
        seen["committed"] = time.perf_counter() - died
    code, _ = run.wait(standby)
    if code != 0:
        raise RuntimeError(f"the standby's run failed (exit {code}):\n{log.read_text()[-3000:]}")
    return seen, idle


#: The restart's phases, each from the milestone before it (or the start).
PHASES = {
    "jvm": "interpreter, imports, the job file, until its JVM runs",
    "swept": "JVM and session start, query start, the sweep's commit of the crashed run's transactions",
    "committed": "the replayed batch 1 and its commit-log entry",
}


#: The standby's milestones and phases, from the killed driver's end.
STANDBY_MILESTONES = ("claimed", "swept", "committed")
STANDBY_PHASES = {
    "claimed": "the dead driver seen (its pid gone), the checkpoint claimed",
    "swept": "the query's start, the sweep's commit of the crashed run's transactions",
    "committed": "the replayed batch 1 and its commit-log entry",
}


def phase_seconds(rounds: list[dict[str, float]], standby: bool = False) -> dict[str, list[float]]:
    """Per phase (PHASES' descriptions, or STANDBY_PHASES'), its seconds in
    each round where both ends were seen."""
    milestones_, phases = (STANDBY_MILESTONES, STANDBY_PHASES) if standby else (MILESTONES, PHASES)
    out: dict[str, list[float]] = {}
    for milestones in rounds:
        for before, name in zip((None, *milestones_), milestones_):
            start = 0.0 if before is None else milestones.get(before)
            if start is not None and name in milestones:
                out.setdefault(phases[name], []).append(milestones[name] - start)
    return out


def phases_text(milestones: dict[str, float], standby: bool = False) -> str:
    return ", ".join(f"{desc.split(',')[0]} {seconds[0]:.1f} s"
                     for desc, seconds in phase_seconds([milestones], standby).items())


def series(target: PostgresTable, workload: Workload, tmp: Path, env: dict[str, str], rounds: int,
           standby: bool) -> list[dict[str, float]]:
    """``rounds`` rounds of a restart, or of a standby's takeover; each table verified."""
    done: list[dict[str, float]] = []
    what = "the standby takes over" if standby else "restart"
    for index in range(rounds):
        say(f"round {index + 1}: kill -9 after batch 1's decision, then {what}")
        done.append(one_round(target, workload, tmp / f"{'standby' if standby else 'restart'}-{index}",
                              env, standby))
        idle = (f"; standing by it held {done[-1]['idle_rss_mib']:.0f} MiB and "
                f"{done[-1]['idle_cpu_share']:.1%} of a core" if standby else "")
        say(f"round {index + 1}: first committed batch {done[-1]['committed']:.1f} s after the "
            f"{'driver died' if standby else 'restart'} ({phases_text(done[-1], standby)}){idle}; "
            "table exact, nothing prepared")
    return done


def summary(rounds: list[dict[str, float]], where: str, standby: bool) -> dict:
    """The figures of a series, printed as a table."""
    times = [r["committed"] for r in rounds]
    median = statistics.median(times)
    phases = {name: statistics.median(values) for name, values in phase_seconds(rounds, standby).items()}
    figures = {"restart_s": median, "restart_rounds_s": times, "phases_s": phases, "master": where}
    rows = [("master", where), ("rounds", ", ".join(f"{t:.1f} s" for t in times)),
            ("median", f"{median:.1f} s (target <= {TARGET_S:.0f} s: "
                       f"{'met' if median <= TARGET_S else 'NOT met'})"),
            *((f"  median of: {name}", f"{seconds:.1f} s") for name, seconds in phases.items())]
    if standby:
        figures |= {"idle_rss_mib": statistics.median(r["idle_rss_mib"] for r in rounds),
                    "idle_cpu_share": statistics.median(r["idle_cpu_share"] for r in rounds)}
        rows += [("standing by: resident set of its processes", f"{figures['idle_rss_mib']:.0f} MiB"),
                 ("standing by: CPU", f"{figures['idle_cpu_share']:.1%} of a core")]
    print_table("a standby's takeover, from the killed driver's end to the first committed batch"
                if standby else "restart to the first committed batch", rows)
    return figures


def one_round(target: PostgresTable, workload: Workload, workdir: Path,
              env: dict[str, str], standby: bool = False) -> dict[str, float]:
    workdir.mkdir(parents=True)
    run = JobRun(target, workload, workdir, base_env=env)
    target.create_table(run.table)
    try:
        if standby:
            milestones, idle = standby_once(run, 1, target.url)
            milestones = {**milestones, **{f"idle_{k}": v for k, v in idle.items()}}
        else:
            code, log = run.run_job(**{crash.ENV: f"{crash.DRIVER_AFTER_DECISION}@1"})
            if code != -9:
                raise RuntimeError(f"the crash point did not fire (exit {code}):\n{log[-3000:]}")
            milestones, code, log = restart_once(run, 1, target.url)
            if code != 0:
                raise RuntimeError(f"the restarted job failed (exit {code}):\n{log[-3000:]}")
        run.verify_exactly_once()
        run.assert_nothing_prepared()
        return milestones
    finally:
        for txn in target.prepared(sink_prefix(run.sink_id)):
            target.rollback(txn)
        target.drop_table(run.table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--cluster", action="store_true",
                        help="run the job on a standalone cluster (one master, two workers of "
                             "one core each) started for the benchmark and stopped after it")
    parser.add_argument("--standby", action="store_true",
                        help="also time a standby's takeover (eoskit run --standby started beside the "
                             "job, warm): from the killed driver's end to the first committed batch, "
                             "with the standby's memory and CPU while it stands by")
    parser.add_argument("--services-dir", default=".eoskit/dev")
    parser.add_argument("--json-out", metavar="FILE",
                        help="also write the figures to FILE as JSON (for benchmarks/peers.py)")
    args = parser.parse_args(argv)

    facts = machine_facts()
    endpoints = LocalServices(args.services_dir).up()
    target = PostgresTable(endpoints.postgres_url)
    say(f"producing {args.records:,} records ({args.partitions} partitions, "
        f"{args.batches} batches)")
    workload = Workload.produce(endpoints.kafka_bootstrap, args.records, args.partitions,
                                args.batches)
    cluster = None
    env: dict[str, str] = {}
    where = "local[2,3]"
    if args.cluster:
        cluster = SparkCluster(Path(".eoskit/bench-cluster"), workers=2, cores=1, memory="1g")
        where = cluster.up()
        env = {"EOSKIT_BENCH_MASTER": where, "EOSKIT_BENCH_SPARK_CONF": json.dumps(CLUSTER_CONF)}
    records = []
    try:
        with tempfile.TemporaryDirectory(prefix="eoskit-restart-") as tmp:
            restarts = series(target, workload, Path(tmp), env, args.rounds, standby=False)
            takeovers = (series(target, workload, Path(tmp), env, args.rounds, standby=True)
                         if args.standby else [])
    finally:
        if cluster is not None:
            cluster.down()
    print_table("machine (at start)", facts)
    # Every round verified the table with psql (every record once, nothing
    # prepared) before its time was kept: a wrong round raised.
    records.append(peer_record("restart", "eoskit_restart",
                               f"eoskit run, kill -9 after a decision, restart ({where})",
                               summary(restarts, where, standby=False), []))
    if takeovers:
        records.append(peer_record("restart", "eoskit_standby",
                                   f"eoskit run --standby beside it, kill -9 after a decision ({where})",
                                   summary(takeovers, where, standby=True), []))
    print_table("machine (at end)", machine_facts()[2:3])
    write_json_out(args.json_out, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
