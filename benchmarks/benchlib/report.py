"""What a benchmark prints and writes: the machine's facts, the tables,
Spark's and eoskit's phases, the comparison with the plain loop, and the
``--json-out`` records that benchmarks/peers.py reads."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

import psutil
import pyspark

from eoskit.runtime.devtools.demo.orders import ORDER_VALUE_BYTES
from eoskit.core import timings

from benchlib.results import BaselineResult, StreamResult


def rate(rows: int, seconds: float) -> float:
    return rows / seconds if seconds > 0 else float("nan")


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``; psutil does not give
    it): runs on different hosts differ by it first."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_facts() -> list[tuple[str, str]]:
    """The machine is shared: the load average says whether the numbers were
    quiet ones, the CPU model and the share of time stolen by the hypervisor
    since boot on which host they were taken (issue 33: a run on another
    host doubled every stage, and nothing recorded it)."""
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    times = psutil.cpu_times()
    stolen = getattr(times, "steal", 0.0) / max(sum(times), 1e-9)
    return [
        ("cpu model", cpu_model()),
        ("steal since boot", f"{stolen:.3%}"),
        ("cores (os.cpu_count)", str(os.cpu_count())),
        ("cores usable (affinity)", str(len(os.sched_getaffinity(0)))),
        ("load average 1/5/15 min", load),
        ("platform", platform.platform()),
        ("python", platform.python_version()),
        ("pyspark", pyspark.__version__),
    ]


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"\n{title}")
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}")


DURATION_KEYS = ("triggerExecution", "addBatch", "queryPlanning", "latestOffset",
                 "walCommit", "commitOffsets")


def print_stream(label: str, result: StreamResult) -> None:
    """Spark's own per-batch split: addBatch is the job (read, parse, write,
    commit); the rest is the engine's bookkeeping around it."""
    failed = "unknown" if result.failed_tasks is None else str(result.failed_tasks)
    print(f"\n{label}: {result.batches} batches, {failed} failed task attempts; "
          "durationMs per batch: " + " / ".join(DURATION_KEYS))
    for i, (rows, d) in enumerate(zip(result.batch_rows, result.durations_ms)):
        print(f"  batch {i} ({rows:,} rows): " + " / ".join(str(d.get(k, "-")) for k in DURATION_KEYS))


#: Spark's phases of a batch (StreamingQueryProgress.durationMs), as rows of
#: the breakdown table; addBatch holds the write job, so every task phase.
SPARK_PHASES = ("triggerExecution", "queryPlanning", "getBatch", "latestOffset", "walCommit",
                "addBatch", "commitOffsets")
#: eoskit's spans (eoskit.core.timings) in the order a batch runs them;
#: an indented name is part of the one above it. Phases not listed follow.
EOSKIT_PHASES = (
    ("plan.writer", "sink planning (streamWriter), driver"),
    ("plan.check", "  sink check (first batch of a process)"),
    ("plan.sweep", "  start-up sweep"),
    ("sweep.clear_aborted", "    decision log: clear aborts"),
    ("sweep.list_prepared", "    list prepared ids"),
    ("plan.decision_log", "  decision log: create, identity"),
    ("source.fetch", "source: Kafka fetch (slowest task)"),
    ("source.convert", "source: records to Arrow"),
    ("task", "sink task, whole (slowest task)"),
    ("task.input", "  waiting for input rows"),
    ("task.read_decision", "  decision log reads"),
    ("task.claim", "  claim marker"),
    ("task.write", "  write"),
    ("task.write.encode", "    Arrow to COPY CSV"),
    ("task.prepare", "  prepare"),
    ("task.commit", "  commit (marked)"),
    ("driver.commit", "commit process, whole"),
    ("commit.read_decision", "  decision log read"),
    ("commit.list_prepared", "  list prepared ids"),
    ("commit.decide", "  decision log write"),
    ("commit.commit_prepared", "  COMMIT PREPARED"),
    ("commit.roll_back_others", "  roll back others"),
    ("commit.decision_applied", "  sink's batch hook"),
    ("commit.mark_done", "  decision log: done"),
)


def phase_rows(result: StreamResult) -> list[tuple[str, list[float]]]:
    """Per batch (ms): Spark's phases, then eoskit's (a task phase is its
    slowest task's, see timings.per_batch)."""
    rows = [(f"spark {key}", [float(d.get(key, 0)) for d in result.durations_ms])
            for key in SPARK_PHASES if any(key in d for d in result.durations_ms)]
    table = timings.per_batch(result.spans)
    seen = {p for b in result.batch_ids for p in table.get(b, {})}
    known = dict(EOSKIT_PHASES)
    order = [p for p, _ in EOSKIT_PHASES if p in seen] + sorted(seen - set(known))
    rows += [(f"eoskit {known.get(p, p)}", [table.get(b, {}).get(p, 0.0) for b in result.batch_ids])
             for p in order]
    return rows


def print_phases(label: str, result: StreamResult) -> None:
    """The breakdown table: batch 1, the median and the maximum of the later
    batches, then every batch."""
    rows = phase_rows(result)
    if not rows:
        return
    width = max(len(name) for name, _ in rows)
    ids = result.batch_ids
    print(f"\n{label}: where each batch's time goes (ms; batches {ids[0]}..{ids[-1]}; "
          "'later' = every batch but the first)")
    head = f"  {'phase':<{width}} {'first':>7} {'median':>7} {'max':>7}  " + " ".join(
        f"{b:>6}" for b in ids)
    print(head)
    for name, values in rows:
        later = values[1:]
        median = statistics.median(later) if later else float("nan")
        peak = max(later) if later else float("nan")
        print(f"  {name:<{width}} {values[0]:>7.0f} {median:>7.0f} {peak:>7.0f}  "
              + " ".join(f"{v:>6.0f}" for v in values))


def stream_rows(label: str, result: StreamResult) -> list[tuple[str, int, float]]:
    """Wall (start() to termination), every batch, and every batch but the first."""
    rows = [
        (f"{label} (wall)", result.rows, result.wall_s),
        (f"{label} (batches only)", result.rows, result.batch_seconds()),
    ]
    if result.batches > 1:
        rows.append((f"{label} (all but batch 1)", result.batch_rows_from(1),
                     result.batch_seconds(1)))
    return rows


def report(args: argparse.Namespace, produce_s: float, spark_start_s: float,
           baselines: list[tuple[str, BaselineResult]], eoskit: StreamResult,
           others: list[tuple[str, StreamResult]],
           facts_before: list[tuple[str, str]], sink: str, master: str = "local[2]",
           not_run: list[tuple[str, str]] | None = None) -> None:
    """``baselines``: the plain loop first, then any other contender; the
    ``x baseline`` column divides by the first one's rate. ``others``: more
    queries of this session (other commit modes, the --breakdown runs)."""
    print_table("machine (at start)", facts_before)
    print_table("parameters", [
        ("records", f"{args.records:,}"),
        ("partitions", str(args.partitions)),
        ("record value, bytes", f"about {args.value_bytes or ORDER_VALUE_BYTES:,}"),
        ("maxOffsetsPerTrigger", f"{args.max_offsets_per_trigger:,}"),
        ("spark master", master),
        ("produce (not timed in results)", f"{produce_s:.1f} s"),
        ("Spark session start (not in results)", f"{spark_start_s:.1f} s"),
    ])
    for label, result in baselines:
        print(f"\n{label} phases: " + ", ".join(
            f"{k} {v:.1f} s" for k, v in result.phases.seconds.items()))
    for label, reason in not_run or []:
        print(f"\n{label}: NOT RUN: {reason}")
    print_stream(sink, eoskit)
    for label, result in others:
        print_stream(label, result)
    if eoskit.spans:
        print_phases(f"eoskit -> {sink}", eoskit)
        for label, result in others:
            print_phases(label, result)
    base_rate = rate(baselines[0][1].rows, baselines[0][1].wall_s)
    rows = [(label, result.rows, result.wall_s) for label, result in baselines]
    rows += stream_rows("eoskit", eoskit)
    for label, result in others:
        rows += stream_rows(label, result)
    width = max(len(label) for label, _, _ in rows)
    print(f"\n  {'run':<{width}} {'rows':>10} {'seconds':>8} {'rows/s':>9} {'x baseline':>11}")
    for label, count, seconds in rows:
        r = rate(count, seconds)
        print(f"  {label:<{width}} {count:>10,} {seconds:>8.1f} {r:>9,.0f} {r / base_rate:>11.2f}")
    if len(baselines) > 1:
        print("\neoskit's rate over each other run's (whole run: wall; steady: all but batch 1):")
        ours = stream_rows("eoskit", eoskit)
        for label, result in baselines:
            theirs = rate(result.rows, result.wall_s)
            ratios = ", ".join(f"{mine.split('(')[-1].rstrip(')')} {rate(n, t) / theirs:.2f}x"
                               for mine, n, t in ours)
            print(f"  eoskit / {label}: {ratios}")
    print_table("machine (at end)", machine_facts()[2:3])


# ------------------------------------------------- machine-readable (--json-out)

def per_s(rows: int, seconds: float) -> float | None:
    """``rate``, with None where it is not a number (JSON has no NaN)."""
    return rows / seconds if seconds > 0 else None


def batch_figures(batch_rows: list[int], batch_s: list[float]) -> dict[str, Any]:
    """From each batch's rows and seconds: the first batch, the median of the
    later ones, and the steady rate (every batch but the first, as the
    "all but batch 1" rows of the reports)."""
    return {"batches": len(batch_s), "first_batch_s": batch_s[0] if batch_s else None,
            "later_batch_s": statistics.median(batch_s[1:]) if len(batch_s) > 1 else None,
            "steady_rows_per_s": per_s(sum(batch_rows[1:]), sum(batch_s[1:])),
            "batch_rows": list(batch_rows), "batch_s": list(batch_s)}


def stream_figures(result: StreamResult) -> dict[str, Any]:
    """An availableNow query's figures: wall (start() to termination), and
    per batch Spark's triggerExecution."""
    seconds = [d.get("triggerExecution", 0) / 1000 for d in result.durations_ms]
    return {"rows": result.rows, "wall_s": result.wall_s, "rows_per_s": per_s(result.rows, result.wall_s),
            "failed_tasks": result.failed_tasks, **batch_figures(result.batch_rows, seconds)}


def runner_figures(line: dict[str, Any]) -> dict[str, Any]:
    """A Spark peer's figures from the JSON line its runner printed
    (spark_peer.run_available_now): wall is its query's run_s, as in the
    reports, or process_s where the peer is timed from its process's start
    (``"timed": "process"``, the plain-script path); process_s (from the
    process's start to caught up, where the runner says) and its rate beside."""
    process_s = line.get("process_s")
    wall = process_s if line.get("timed") == "process" and process_s is not None else line["run_s"]
    return {"rows": line["rows"], "wall_s": wall, "rows_per_s": per_s(line["rows"], wall),
            "process_s": process_s,
            "process_rows_per_s": None if process_s is None else per_s(line["rows"], process_s),
            "failed_tasks": line.get("failed_tasks"),
            **batch_figures(line.get("batch_rows", []), line.get("batch_s", [])), "runner": line}


def baseline_figures(result: BaselineResult) -> dict[str, Any]:
    """A run outside this process's Spark: rows and wall; a Spark peer's batches too."""
    figures = {"rows": result.rows, "wall_s": result.wall_s, "rows_per_s": per_s(result.rows, result.wall_s),
               "phases": dict(result.phases.seconds)}
    if "batch_s" in result.extra:
        figures.update(runner_figures(result.extra))
    elif result.extra:
        figures["runner"] = result.extra
    return figures


def write_json_out(path: str | None, peers: list[dict[str, Any]]) -> None:
    """--json-out: one object per peer the run measured (or could not run),
    for benchmarks/peers.py; nothing when the option is not given."""
    if path:
        Path(path).write_text(json.dumps(peers, indent=1) + "\n")


def peer_record(group: str, peer_id: str, label: str, figures: dict[str, Any],
                problems: list[str] | None) -> dict[str, Any]:
    """``problems``: what the output's reader found wrong, None when no reader checks it."""
    return {"peer": label, "id": peer_id, "group": group, **figures,
            "verified": None if problems is None else not problems, "problems": problems or []}


def say(text: str) -> None:
    print(f"==> {text}", flush=True)


def fail(problems: list[str]) -> int:
    print("\n" + "!" * 72, file=sys.stderr)
    print("VERIFICATION FAILED: the output does not hold every order exactly once", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    print("!" * 72, file=sys.stderr)
    return 1
