"""One benchmark run, shared by the scripts: the options every benchmark
takes, the contenders and the target, and :func:`run_benchmark` (produce
once, run the plain loop, the other contenders and eoskit on the same
topic, verify every output, report); peers that run in a process of their
own (:func:`run_peer_process`, :func:`spark_runner`)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pyspark.sql import DataFrame
from cpu_share import Cpu
from cpu_share import describe as describe_cpu

from eoskit.runtime.devtools.services import LocalServices
from eoskit.core import timings

from benchlib.postgres import verify
from benchlib.report import (
    baseline_figures,
    fail,
    machine_facts,
    peer_record,
    report,
    say,
    stream_figures,
    write_json_out,
)
from benchlib.results import (
    BASELINE_TABLE,
    EOSKIT_TABLE,
    BaselineResult,
    StreamResult,
    TableStats,
    Timings,
)
from benchlib.rounds import rotated
from benchlib.spark import (
    WriterSetup,
    decoded_stream,
    kafka_stream,
    parse_orders,
    run_breakdown,
    run_chained,
    run_stream,
    spark_session,
)
from benchlib.topics import delete_topic, produce


class Unavailable(Exception):
    """A contender that cannot run on this machine; the message says why."""


@dataclass(frozen=True)
class Contender:
    """Another implementation run on the same topic as the plain loop (in
    the order ``--rotate`` gives), into its own table; it raises
    :class:`Unavailable` if it cannot run."""

    label: str
    table: str
    run: Callable[[str, str, str, int], BaselineResult]  # (bootstrap, url, topic, partitions)
    #: More lines from the same run, each (id, label, result): the same
    #: output timed another way (PyFlink from its first record), reported
    #: as peers of their own and verified by the run's reader.
    views: Callable[[BaselineResult], list[tuple[str, str, BaselineResult]]] | None = None


@dataclass(frozen=True)
class Target:
    """What one benchmark writes to (a database, or Kafka) and how it is
    checked; the topic, the Spark side, the report and the run are shared."""

    sink: str  # the eoskit format, e.g. eoskit-postgres
    baseline: str  # what the plain loop does, for the progress line
    url_of: Callable[[Any], str]  # where the output goes, from LocalServices' endpoints
    reset_table: Callable[[str, str], None]
    table_stats: Callable[[str, str], TableStats]
    run_baseline: Callable[[str, str, str, int], BaselineResult]
    writer: Callable[[str], WriterSetup]
    #: What eoskit's query does between source and sink, and its name.
    transform: Callable[[DataFrame], DataFrame] = parse_orders
    transform_name: str = "from_json"
    baseline_label: str = "baseline (plain loop)"
    contenders: tuple[Contender, ...] = ()
    spark_master: str = "local[2]"
    #: Called for each output once it is verified (a topic held in the
    #: broker's memory, for one); tables are kept.
    drop_table: Callable[[str, str], None] | None = None
    #: More of eoskit's commit modes to run after the default one, in the
    #: same session, each into its own table, and the writer that takes a
    #: table and a mode ((url, table, mode) -> writer).
    commit_modes: tuple[str, ...] = ()
    mode_writer: Callable[[str, str, str], WriterSetup] | None = None
    #: Also run eoskit with the values decoded in the source (value.format=json,
    #: no from_json), after the default run, into its own table.
    decoded_line: bool = False
    #: Also run eoskit chained (issue 33, item 2), after the default run,
    #: into its own table: the sink's options for (url, table); None: not run.
    chained_options: Callable[[str, str], dict[str, str]] | None = None


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: give 0 or more")
    return value


def spark_conf_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE, e.g. spark.sql.shuffle.partitions=4")
    return key.strip(), value


def parse_args(argv: list[str] | None, description: str, records: int = 1_000_000,
               max_offsets: int = 250_000,
               extend: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.Namespace:
    """The options every benchmark takes; ``extend`` adds a benchmark's own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--records", type=int, default=records)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=max_offsets)
    parser.add_argument("--breakdown", action="store_true",
                        help="record eoskit's own phases per batch (EOSKIT_TIMINGS_DIR) and print "
                             "them beside Spark's; also run the stream into Spark's noop sink, "
                             "with and without the JSON parse, to split source, parse and sink cost")
    parser.add_argument("--value-bytes", type=non_negative, default=0,
                        help="make each record's JSON value about this long, its customer name "
                             "lengthened (default: the orders as they are, about 106 bytes)")
    parser.add_argument("--master", default=None,
                        help="Spark master of eoskit's session (default: the benchmark's own, local[2] "
                             "or local[2,3]); e.g. the dev cluster's spark://host:port")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        type=spark_conf_pair,
                        help="one more setting of eoskit's session (repeatable), to measure a change "
                             "side by side, e.g. spark.sql.execution.arrow.maxRecordsPerBatch=50000")
    parser.add_argument("--services-dir", default=".eoskit/dev")
    parser.add_argument("--keep-topic", action="store_true", help="do not delete the topic at the end")
    parser.add_argument("--json-out", metavar="FILE",
                        help="also write each peer's figures to FILE as JSON (for benchmarks/peers.py)")
    parser.add_argument("--rotate", type=non_negative, default=0, metavar="N",
                        help="run the peers (the plain loop, each contender, eoskit's session) rotated "
                             "N places from their usual order; peers.py passes its round, so that no "
                             "peer always runs first (default 0: the usual order)")
    if extend is not None:
        extend(parser)
    return parser.parse_args(argv)


T = TypeVar("T")


def service_pids(services_dir: str) -> dict[str, int]:
    """The dev services' pids, for the CPU they take during each run; none
    when they cannot be read (the figure is a bonus)."""
    try:
        return LocalServices(services_dir).pids()
    except Exception:  # noqa: BLE001
        return {}


@dataclass
class _Runs:
    """What one benchmark has run so far: the outputs to verify (label,
    table), the plain loop's and the contenders' results, those that could
    not run, and each run's CPU (cpu_share)."""

    services: dict[str, int]
    outputs: list[tuple[str, str]] = field(default_factory=list)
    baselines: list[tuple[str, BaselineResult]] = field(default_factory=list)
    not_run: list[tuple[str, str]] = field(default_factory=list)
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)  # output -> CPU-seconds over its run
    #: A contender's other views of its run: label -> (id, the contender's label).
    views: dict[str, tuple[str, str]] = field(default_factory=dict)

    def measured(self, name: str, run: Callable[[], T]) -> T:
        span = Cpu(self.services).start()
        try:
            return run()
        finally:
            self.cpu[name] = span.stop()


@dataclass
class _SparkRuns:
    """eoskit's query, its other commit modes and the --breakdown runs."""

    spark_start_s: float
    eoskit: StreamResult
    modes: list[tuple[str, str, StreamResult]]  # (mode, table, result)
    breakdown: list[tuple[str, StreamResult]]


def run_benchmark(args: argparse.Namespace, target: Target) -> int:
    """Produce once, run the plain loop, the other contenders and eoskit on
    the same topic, verify every output, report; 1 if any output is wrong."""
    facts_before = machine_facts()
    master = args.master or target.spark_master
    endpoints = LocalServices(args.services_dir).up()
    bootstrap, url = endpoints.kafka_bootstrap, target.url_of(endpoints)
    topic = f"bench-orders-{uuid.uuid4().hex[:12]}"
    say(f"producing {args.records:,} orders to {topic} ({args.partitions} partitions)")
    expected, produce_s = produce(bootstrap, topic, args.records, args.partitions, args.value_bytes)
    runs = _Runs(service_pids(args.services_dir), outputs=[(target.baseline_label, BASELINE_TABLE)])
    try:
        spark_runs = _run_peers(args, target, runs, master, bootstrap, url, topic)
    finally:
        if not args.keep_topic:
            delete_topic(bootstrap, topic)

    problems = []
    found: dict[str, list[str]] = {}  # output -> what its reader found wrong
    for name, table in runs.outputs:
        say(f"verifying {name}'s output")
        found[name] = verify(name, target.table_stats(url, table), expected)
        problems += found[name]
        if target.drop_table is not None:
            target.drop_table(url, table)
    problems += [f"{label}: read {result.rows} rows, expected {expected.count}"
                 for label, result in spark_runs.breakdown if result.rows != expected.count]
    report(args, produce_s, spark_runs.spark_start_s, runs.baselines, spark_runs.eoskit,
           [(f"eoskit {mode}", result) for mode, _, result in spark_runs.modes] + spark_runs.breakdown,
           facts_before, sink=target.sink, master=master, not_run=runs.not_run)
    if runs.cpu:
        print("\nCPU over each run (cpu_share.py; a peer in a process of its own: with its process's and "
              "JVM's start):")
        for name, figures in runs.cpu.items():
            print(f"  {name}: {figures['wall_s']:.1f} s, {describe_cpu(figures)}")
    _write_peers(args, target, runs, spark_runs, found)
    if problems:
        return fail(problems)
    say(f"verified: every output holds each of the {expected.count:,} orders exactly once "
        f"(sum {expected.amount})")
    return 0


def _run_peers(args: argparse.Namespace, target: Target, runs: _Runs, master: str,
               bootstrap: str, url: str, topic: str) -> _SparkRuns:
    """Every peer once: the plain loop, each contender, eoskit's session
    (its commit modes and --breakdown runs after it, in that session), in
    their usual order rotated ``--rotate`` places. The results are kept in
    the usual order (the plain loop first: the report divides by its rate),
    each contender's other views (``Contender.views``) after them."""
    spark_runs: list[_SparkRuns] = []
    steps: dict[str, Callable[[], None]] = {
        target.baseline_label: lambda: _run_loop(args, target, runs, bootstrap, url, topic),
        **{c.label: (lambda c=c: _run_contender(args, target, runs, c, bootstrap, url, topic))
           for c in target.contenders},
        "eoskit": lambda: spark_runs.append(_run_spark(args, target, runs, master, bootstrap, url, topic)),
    }
    order = rotated(list(steps), args.rotate)
    if args.rotate:
        say(f"the peers in this run's order (--rotate {args.rotate}): {'; '.join(order)}")
    for label in order:
        steps[label]()
    usual = {label: i for i, label in enumerate(steps)}
    runs.baselines.sort(key=lambda item: usual[item[0]])
    for contender in target.contenders:
        result = dict(runs.baselines).get(contender.label)
        if contender.views is not None and result is not None:
            for view_id, label, view in contender.views(result):
                runs.baselines.append((label, view))
                runs.views[label] = (view_id, contender.label)
    return spark_runs[0]


def _run_loop(args: argparse.Namespace, target: Target, runs: _Runs,
              bootstrap: str, url: str, topic: str) -> None:
    say(f"baseline: {target.baseline}, one process")
    target.reset_table(url, BASELINE_TABLE)
    runs.baselines.append((target.baseline_label, runs.measured(target.baseline_label, lambda: (
        target.run_baseline(bootstrap, url, topic, args.partitions)))))


def _run_contender(args: argparse.Namespace, target: Target, runs: _Runs, contender: Contender,
                   bootstrap: str, url: str, topic: str) -> None:
    """One contender into its own table; one that cannot run is noted."""
    say(f"{contender.label}")
    target.reset_table(url, contender.table)
    try:
        runs.baselines.append((contender.label, runs.measured(contender.label, lambda: (
            contender.run(bootstrap, url, topic, args.partitions)))))
        runs.outputs.append((contender.label, contender.table))
    except Unavailable as exc:
        say(f"{contender.label}: not run: {exc}")
        runs.not_run.append((contender.label, str(exc)))


def _run_spark(args: argparse.Namespace, target: Target, runs: _Runs, master: str,
               bootstrap: str, url: str, topic: str) -> _SparkRuns:
    """eoskit's query in one session, then its other commit modes and the
    --breakdown runs in the same session."""
    if args.breakdown:
        # Before the session: Spark's Python processes inherit the JVM's
        # environment, which is this process's when the JVM starts.
        os.environ[timings.ENV] = tempfile.mkdtemp(prefix="eoskit-bench-timings-")
    say("starting Spark")
    started = time.perf_counter()
    spark = spark_session(master, dict(args.spark_conf))
    spark_start_s = time.perf_counter() - started
    raw = kafka_stream(spark, bootstrap, topic, args.max_offsets_per_trigger)

    say(f"eoskit: eoskit-kafka -> {target.transform_name} -> {target.sink}, availableNow")
    target.reset_table(url, EOSKIT_TABLE)
    runs.outputs.append(("eoskit", EOSKIT_TABLE))
    eoskit = runs.measured("eoskit", lambda: run_stream(target.writer(url), target.transform(raw), "eoskit"))
    modes: list[tuple[str, str, StreamResult]] = []  # (mode, table, result)
    for mode in target.commit_modes:
        assert target.mode_writer is not None
        table = f"{EOSKIT_TABLE}_{mode}"
        say(f"eoskit, commitMode={mode} (the same session, after the default run)")
        target.reset_table(url, table)
        runs.outputs.append((f"eoskit {mode}", table))
        writer = target.mode_writer(url, table, mode)
        modes.append((mode, table, runs.measured(f"eoskit {mode}", lambda: run_stream(
            writer, target.transform(raw), f"eoskit-{mode}"))))
    if target.decoded_line:
        table = f"{EOSKIT_TABLE}_{DECODED}"
        say("eoskit, value.format=json: decoded in the source (the same session, after the default run)")
        target.reset_table(url, table)
        runs.outputs.append((f"eoskit {DECODED}", table))
        decoded = decoded_stream(spark, bootstrap, topic, args.max_offsets_per_trigger)
        writer = target.mode_writer(url, table, "twophase") if target.mode_writer else target.writer(url)
        modes.append((DECODED, table, runs.measured(f"eoskit {DECODED}", lambda: run_stream(
            writer, decoded, f"eoskit-{DECODED}"))))
    if target.chained_options is not None:
        table = f"{EOSKIT_TABLE}_{CHAINED}"
        say("eoskit, chained: decoded, transformed and written in the source's tasks (the same session, "
            "after the default run)")
        target.reset_table(url, table)
        runs.outputs.append((f"eoskit {CHAINED}", table))
        options = target.chained_options(url, table)
        modes.append((CHAINED, table, runs.measured(f"eoskit {CHAINED}", lambda: run_chained(
            spark, bootstrap, topic, args.max_offsets_per_trigger, target.sink, options, f"eoskit-{CHAINED}"))))
    breakdown: list[tuple[str, StreamResult]] = []
    if args.breakdown:
        say("breakdown: the same stream into Spark's noop sink, with and without the "
            f"{target.transform_name}")
        breakdown = run_breakdown(raw, target.transform, target.transform_name)
    spark.stop()
    if args.breakdown:
        shutil.rmtree(os.environ.pop(timings.ENV), ignore_errors=True)
    return _SparkRuns(spark_start_s, eoskit, modes, breakdown)


def _write_peers(args: argparse.Namespace, target: Target, runs: _Runs, spark_runs: _SparkRuns,
                 found: dict[str, list[str]]) -> None:
    """Every peer's record for ``--json-out`` (benchmarks/peers.py)."""
    group = "kafka-" + target.sink.removeprefix("eoskit-")
    ids = {target.baseline_label: BASELINE_TABLE.removeprefix("bench_"),
           **{c.label: c.table.removeprefix("bench_") for c in target.contenders},
           **{label: view_id for label, (view_id, _) in runs.views.items()}}
    output = {label: of for label, (_, of) in runs.views.items()}  # a view's output is its run's
    cpu = runs.cpu
    write_json_out(args.json_out, [
        *(peer_record(group, ids[label], label, {**baseline_figures(result), "cpu": cpu.get(label)},
                      found[output.get(label, label)])
          for label, result in runs.baselines),
        *({"peer": label, "id": ids[label], "group": group, "not_run": reason}
          for label, reason in runs.not_run),
        peer_record(group, "eoskit", f"eoskit-kafka -> {target.transform_name} -> {target.sink} "
                    "(default commitMode)", {**stream_figures(spark_runs.eoskit),
                                             "spark_start_s": spark_runs.spark_start_s,
                                             "cpu": cpu.get("eoskit")}, found["eoskit"]),
        *(peer_record(group, table.removeprefix("bench_"), _mode_label(mode),
                      {**stream_figures(result), "cpu": cpu.get(f"eoskit {mode}")}, found[f"eoskit {mode}"])
          for mode, table, result in spark_runs.modes),
    ])


#: The mode name of the line whose values are decoded in the source.
DECODED = "decoded"
#: The mode name of the chained line.
CHAINED = "chained"


def _mode_label(mode: str) -> str:
    if mode == CHAINED:
        return ("eoskit chained: eoskit-kafka decoding, transforming and writing to the sink in its own "
                "tasks, two-phase (same session, after the default run)")
    if mode == DECODED:
        return ("eoskit-kafka value.format=json (decoded in the source, no from_json) -> two-phase "
                "(same session, after the default run)")
    return f"eoskit, commitMode={mode} (same session, after the default run)"


#: The longest a peer in a process of its own may run.
PEER_TIMEOUT_S = 3600


def run_peer_process(label: str, command: list[str], env: dict[str, str | None] | None = None,
                     timeout: float = PEER_TIMEOUT_S) -> tuple[dict[str, Any], float]:
    """Run a peer in a process of its own (a Spark runner, Quix Streams,
    PyFlink) to its end: the one JSON line it printed last, and the
    process's wall seconds; ``env`` over this process's environment (None
    removes a variable). Unavailable, naming ``label``, when it does not
    finish within ``timeout`` or fails (with the tail of its errors)."""
    started = time.perf_counter()
    merged = None if env is None else {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=merged)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{label} did not finish within {timeout / 60:.0f} minutes") from None
    wall = time.perf_counter() - started
    if done.returncode != 0 or not done.stdout.strip():
        tail = "\n    ".join(done.stderr.strip().splitlines()[-15:])
        raise Unavailable(f"{label} exited with {done.returncode}:\n    {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1]), wall


def spark_runner(label: str, runner: Path, argv: list[str], env: dict[str, str | None] | None = None,
                 from_process_start: bool = False) -> BaselineResult:
    """Run a Spark peer's runner (spark_peer.run_available_now) in a process
    (and JVM) of its own and read the JSON line it printed; Unavailable with
    the tail of its errors when it fails. Spark's Python is this interpreter
    unless ``env`` says otherwise. Its wall is its query's (run_s),
    or with ``from_process_start`` its process's start to caught up
    (process_s: the plain-script path, timed as its user waits)."""
    result, wall = run_peer_process(label, [sys.executable, str(runner), *argv],
                                    {"PYSPARK_PYTHON": sys.executable, **(env or {})})
    say(f"  Spark {result['pyspark']} {label}: {result['rows']:,} rows, query {result['run_s']:.1f} s, "
        f"first batch {result['first_batch_s'] or 0:.1f} s, later batches {result['later_batch_s'] or 0:.1f} s"
        + (f", {result['process_s']:.1f} s from the process's start" if result.get("process_s") else ""))
    if from_process_start:
        result = {**result, "timed": "process"}  # runner_figures takes process_s as the wall
        phases = Timings({"process start to caught up (in results)": result["process_s"],
                          "of which the query, availableNow": result["run_s"]})
        return BaselineResult(result["rows"], result["process_s"], phases, result)
    phases = Timings({"process + JVM + session start (not in results)": wall - result["run_s"],
                      "the query, availableNow": result["run_s"]})
    return BaselineResult(result["rows"], result["run_s"], phases, result)
