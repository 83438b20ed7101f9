"""Issues 21 and 33's peers in one command: every benchmark script in rotated rounds, one table per
group, then the growth curves.

What: runs the benchmark scripts of this folder, each as a fresh process
(``kafka_to_postgres.py --spark-jdbc --foreach-batch --plain-script
--commit-modes``, ``kafka_to_kafka.py --spark-kafka --flink --flink-sql``,
``kafka_to_parquet.py --spark-parquet``, ``fixed_cost.py``, ``latency.py``,
``restart.py``), ``--rounds`` times (3 by default), the order of the
scripts rotated each round so that no script always runs first, and the
peers inside the two scripts that run several in turn (``--rotate``, the
round: ``harness.run_benchmark``) rotated too. Each script measures its
peers on one topic of the dev broker and
verifies every output with an independent reader, as it does alone; with
``--json-out`` it also writes its figures, which this command reads. It
samples the resident memory of each script's whole process tree (the
script, its Spark JVM, Spark's Python workers, the peers it starts in
processes of their own) every 0.2 s, and prints, per group, the median over
the rounds of each figure and every round's value, then the issues' targets,
met or not. Then the growth curves (``--growth``): ``kafka_to_postgres.py``
(the plain loop and eoskit, both verified) once per point, records 100k to
10M, partitions 1 to 64, record size about 100 B to 10 KB, batch size, and
records and partitions again on the two-worker dev cluster, a table per
curve. It writes everything as JSON (``--out``) and, where matplotlib is
importable, the tables as PNG charts (``--charts``: one per group, and
``growth.png``).

Why: the issue asks for figures that can be compared, taken the same way on
the same machine, rather than single runs of scripts started by hand in an
order that favours whichever runs first; and for one command that prints
them all.

    .venv/bin/python benchmarks/peers.py [--rounds 3] [--records N] [--max-offsets-per-trigger N] \\
        [--only kafka-postgres,latency|none] [--growth records,batch|none] [--growth-scale 0.01] \\
        [--out results.json] [--charts DIR] [--make-quix-venv] [--make-flink-venv] \\
        [--args 'latency=--seconds 10'] [--dry-run]
    .venv/bin/python benchmarks/peers.py --from results.json --charts DIR   # print and draw again
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchlib.growth import (
    SERIES_BY_NAME,
    draw_growth,
    growth_command,
    growth_lines,
    growth_points,
    run_growth,
)
from benchlib.rounds import rotated  # round n runs the groups rotated by n places
from benchlib.sampling import run_sampled

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Script:
    file: str
    args: tuple[str, ...]
    records: bool  # takes --records and --max-offsets-per-trigger
    rotates: bool = False  # takes --rotate N (harness.run_benchmark): its peers rotated each round


#: Each group: the script that measures its peers, with the options that bring in the peers.
GROUPS = {
    "kafka-postgres": Script("kafka_to_postgres.py",
                             ("--spark-jdbc", "--foreach-batch", "--plain-script", "--commit-modes", "--decoded",
                              "--chained"), True, True),
    "kafka-kafka": Script("kafka_to_kafka.py", ("--spark-kafka", "--flink", "--flink-sql"), True, True),
    "kafka-files": Script("kafka_to_parquet.py", ("--spark-parquet",), True),
    "fixed-cost": Script("fixed_cost.py", (), False),
    "latency": Script("latency.py", (), False),
    "restart": Script("restart.py", ("--standby",), False),
}
TITLES = {
    "kafka-postgres": "Kafka -> PostgreSQL",
    "kafka-kafka": "Kafka -> Kafka",
    "kafka-files": "Kafka -> files (Parquet)",
    "fixed-cost": "Fixed cost of a small batch (fixed_cost.py, 1,000 rows a batch by default)",
    "latency": "Produce -> visible latency (latency.py, 1 s trigger)",
    "restart": "Restart after kill -9 to the first committed batch (restart.py, its rounds' median)",
}
#: Peers of the issue that no script measures yet: listed, not silently left out.
NOT_BUILT: dict[str, list[str]] = {}

Column = tuple[str, Callable[[dict], float | None], str]  # title, figure of a peer, format


def key(name: str, scale: float = 1.0) -> Callable[[dict], float | None]:
    def figure(peer: dict) -> float | None:
        value = peer.get(name)
        return None if value is None else value * scale
    return figure


THROUGHPUT: list[Column] = [
    ("rows/s (whole run)", key("rows_per_s"), "{:,.0f}"),
    ("rows/s (steady)", key("steady_rows_per_s"), "{:,.0f}"),
    ("first batch s", key("first_batch_s"), "{:.2f}"),
    ("later batch s", key("later_batch_s"), "{:.2f}"),
    ("wall s", key("wall_s"), "{:.1f}"),
    # A peer in a process of its own: its process's start to caught up.
    ("s from process start", key("process_s"), "{:.1f}"),
]
COLUMNS: dict[str, list[Column]] = {
    "kafka-postgres": THROUGHPUT,
    "kafka-kafka": THROUGHPUT,
    "kafka-files": THROUGHPUT,
    "fixed-cost": [("first batch ms", key("first_batch_s", 1000), "{:,.0f}"),
                   ("median later batch ms", key("later_batch_s", 1000), "{:,.0f}")],
    "latency": [("p50 ms", key("p50_ms"), "{:,.0f}"), ("p90 ms", key("p90_ms"), "{:,.0f}"),
                ("p99 ms", key("p99_ms"), "{:,.0f}"), ("max ms", key("max_ms"), "{:,.0f}")],
    "restart": [("restart s", key("restart_s"), "{:.1f}")],
}
#: What each group's chart shows: (legend, figure) bars per peer, and the axis label.
CHARTS: dict[str, tuple[list[tuple[str, Callable[[dict], float | None]]], str]] = {
    **{group: ([("whole run", key("rows_per_s")), ("steady (all but batch 1)", key("steady_rows_per_s"))],
               "rows/s") for group in ("kafka-postgres", "kafka-kafka", "kafka-files")},
    "fixed-cost": ([("first batch", key("first_batch_s", 1000)),
                    ("median later batch", key("later_batch_s", 1000))], "ms per batch"),
    "latency": ([("p50", key("p50_ms")), ("p99", key("p99_ms"))], "produce -> visible, ms"),
    "restart": ([("to the first committed batch", key("restart_s"))], "seconds after the restart"),
}


def first_extra(peer: dict) -> float | None:
    """How much longer the first batch took than a (median) later one."""
    first, later = peer.get("first_batch_s"), peer.get("later_batch_s")
    return None if first is None or later is None else first - later


@dataclass(frozen=True)
class Goal:
    """One target of the issue: ``ours``' figure (over ``theirs``' when given)
    at least or at most ``bound``, taken per round, the median compared."""

    text: str
    group: str
    ours: str  # peer id
    figure: Callable[[dict], float | None]
    bound: float
    at_most: bool = False
    theirs: str | None = None
    their_figure: Callable[[dict], float | None] = key("rows_per_s")
    unit: str = "x"


GOALS = [
    Goal("Kafka -> PostgreSQL: eoskit exactly-once, whole run, / Spark kafka + foreachBatch(write.jdbc), "
         "Spark's defaults", "kafka-postgres", "eoskit", key("rows_per_s"), 1.0, theirs="spark_jdbc"),
    Goal("Kafka -> PostgreSQL: eoskit exactly-once, whole run, / Spark kafka + foreachBatch(write.jdbc), "
         "tuned (issue 33)", "kafka-postgres", "eoskit", key("rows_per_s"), 1.5, theirs="spark_jdbc_tuned"),
    # The plain-script path (issue 33), timed from its process's start, as its user waits.
    Goal("Kafka -> PostgreSQL: plain script (from process start) / the plain loop",
         "kafka-postgres", "plain_script", key("rows_per_s"), 1.0, theirs="baseline"),
    Goal("Kafka -> PostgreSQL: plain script, steady, / the plain loop (whole run)",
         "kafka-postgres", "plain_script", key("steady_rows_per_s"), 1.5, theirs="baseline"),
    Goal("Kafka -> PostgreSQL: plain script / Spark jdbc tuned, both from process start",
         "kafka-postgres", "plain_script", key("rows_per_s"), 1.5, theirs="spark_jdbc_tuned",
         their_figure=key("process_rows_per_s")),
    Goal("Kafka -> PostgreSQL: eoskit exactly-once, whole run, / the plain loop",
         "kafka-postgres", "eoskit", key("rows_per_s"), 1.0, theirs="baseline"),
    Goal("Kafka -> PostgreSQL: eoskit exactly-once, steady, / the plain loop (whole run)",
         "kafka-postgres", "eoskit", key("steady_rows_per_s"), 1.5, theirs="baseline"),
    # Chained (issue 33, item 2): it runs after the default run in the same session, so its whole
    # run is a warm one; steady is the like-for-like figure.
    Goal("Kafka -> PostgreSQL: eoskit chained, steady, / the plain loop (whole run)",
         "kafka-postgres", "eoskit_chained", key("steady_rows_per_s"), 1.5, theirs="baseline"),
    Goal("Kafka -> PostgreSQL: eoskit chained, whole run (warm), / the plain loop",
         "kafka-postgres", "eoskit_chained", key("rows_per_s"), 1.0, theirs="baseline"),
    Goal("Kafka -> Kafka: eoskit exactly-once, whole run, / Spark kafka source + sink",
         "kafka-kafka", "eoskit", key("rows_per_s"), 1.0, theirs="spark_kafka"),
    Goal("Kafka -> Kafka: eoskit exactly-once, whole run, / PyFlink KafkaSink EXACTLY_ONCE",
         "kafka-kafka", "eoskit", key("rows_per_s"), 1.5, theirs="flink"),
    Goal("Kafka -> Kafka: eoskit exactly-once, whole run, / PyFlink from its first record (issue 33)",
         "kafka-kafka", "eoskit", key("rows_per_s"), 1.5, theirs="flink_from_first_record"),
    Goal("Kafka -> files: eoskit-parquet (in-session turns), whole run, / Spark kafka + parquet "
         "(own process; its query is its JVM's first)",
         "kafka-files", "eoskit_parquet", key("rows_per_s"), 1.0, theirs="spark_parquet_process"),
    # Only where eoskit's query is its JVM's first: kafka_to_parquet.py's
    # eoskit turns follow Spark's parquet turn in the same session, so their
    # first batch is a warm one and says nothing of this target.
    *(Goal(f"{title}: eoskit's first batch - its median later batch", group, peer, first_extra, 1.0,
           at_most=True, unit=" s")
      for group, peer, title in (("kafka-postgres", "eoskit", "Kafka -> PostgreSQL, 250,000-row batches"),
                                 ("kafka-kafka", "eoskit", "Kafka -> Kafka, 250,000-row batches"),
                                 ("fixed-cost", "eoskit_postgres", "Kafka -> PostgreSQL, 1,000-row batches"))),
    Goal("latency: eoskit-postgres (two-phase) p99 at a 1 s trigger", "latency", "eoskit_postgres",
         key("p99_ms"), 1500.0, at_most=True, unit=" ms"),
    Goal("restart after kill -9 to the first committed batch, locally", "restart", "eoskit_restart",
         key("restart_s"), 5.0, at_most=True, unit=" s"),
    Goal("a standby's takeover after kill -9 to the first committed batch, locally", "restart",
         "eoskit_standby", key("restart_s"), 5.0, at_most=True, unit=" s"),
]


# ------------------------------------------------------------------- the rounds

def command(group: str, args: argparse.Namespace, json_out: Path, round_no: int = 0) -> list[str]:
    """The group's script's command line in round ``round_no`` (from 0)."""
    script = GROUPS[group]
    argv = [sys.executable, str(HERE / script.file), *script.args, "--services-dir", args.services_dir,
            "--json-out", str(json_out)]
    if script.rotates and round_no:
        argv += ["--rotate", str(round_no)]
    if script.records and args.records is not None:
        argv += ["--records", str(args.records)]
    if script.records and args.max_offsets_per_trigger is not None:
        argv += ["--max-offsets-per-trigger", str(args.max_offsets_per_trigger)]
    if group == "kafka-kafka" and args.make_quix_venv:
        argv.append("--make-quix-venv")
    if group == "kafka-kafka" and args.make_flink_venv:
        argv.append("--make-flink-venv")
    return argv + shlex.split(args.extra.get(group, ""))


def start_services(services_dir: str) -> None:
    """The dev services, started here before the rounds (``eoskit dev up``,
    a no-op when they run): a script that started them would count the
    broker and the databases in its memory."""
    done = subprocess.run([sys.executable, "-m", "eoskit.runtime.devtools.services", "up", "--dir", services_dir])
    if done.returncode != 0:
        raise SystemExit(f"the dev services in {services_dir} did not start (exit {done.returncode})")


def run_rounds(args: argparse.Namespace, groups: list[str], logs: Path) -> dict[str, Any]:
    """Every group's script once a round, rotated; what they wrote, and each run's exit, wall and memory."""
    results: dict[str, Any] = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_average_at_start": os.getloadavg(), "cpus": os.cpu_count(),
        "rounds": args.rounds, "groups": groups}
    runs, peers = [], []
    for round_no in range(args.rounds):
        for group in rotated(groups, round_no):
            name = f"round{round_no + 1}-{group}"
            json_out, log = logs / f"{name}.json", logs / f"{name}.log"
            argv = command(group, args, json_out, round_no)
            print(f"==> round {round_no + 1}/{args.rounds}: {group}: {shlex.join(argv[1:])}", flush=True)
            run = run_sampled(argv, log)
            found = json.loads(json_out.read_text()) if json_out.is_file() else []
            print(f"    exit {run.exit}, {run.wall_s:.0f} s, peak RSS of the process tree "
                  f"{run.peak_rss / 2**20:,.0f} MiB ({run.peak_processes} processes at most), "
                  f"{len(found)} peers, log {log}", flush=True)
            runs.append({"round": round_no + 1, "group": group, "command": argv, "log": str(log),
                         "exit": run.exit, "wall_s": run.wall_s, "peak_rss_bytes": run.peak_rss,
                         "peak_processes": run.peak_processes, "peers": len(found)})
            peers += [{**peer, "group": group, "round": round_no + 1} for peer in found]
    return {**results, "load_average_at_end": os.getloadavg(), "runs": runs, "peers": peers}


# ------------------------------------------------------------------ the report

def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def cell(values: list[float | None], fmt: str, wrong: frozenset[int] = frozenset()) -> str:
    """The median, then each round's value in brackets (one round: the value).
    The rounds in ``wrong`` (their output failed its reader) are shown with a
    "!" and left out of the median."""
    shown = [("-" if v is None else fmt.format(v) + ("!" if i in wrong else "")) for i, v in enumerate(values)]
    middle = median(v for i, v in enumerate(values) if i not in wrong)
    if len(values) == 1:
        return shown[0]
    return f"{'-' if middle is None else fmt.format(middle)} [{' '.join(shown)}]"


def by_peer(peers: list[dict], group: str, rounds: int) -> dict[str, list[dict | None]]:
    """Peer id -> its record in each round (None where it has none), in the order first seen."""
    table: dict[str, list[dict | None]] = {}
    for peer in peers:
        if peer.get("group") == group:
            table.setdefault(peer["id"], [None] * rounds)[peer["round"] - 1] = peer
    return table


def verified_cell(records: list[dict | None]) -> str:
    seen = [r.get("verified") for r in records if r is not None and "not_run" not in r]
    if not seen:
        return "-"
    wrong = [str(i + 1) for i, r in enumerate(records) if r is not None and r.get("verified") is False]
    if wrong:
        return f"NO (round {', '.join(wrong)})"
    return "yes" if all(seen) else "no reader"


def group_table(group: str, results: dict[str, Any]) -> list[str]:
    """The group's table: a row per peer (median [each round]), its notes, its script's memory."""
    rounds = results["rounds"]
    columns = COLUMNS[group]
    rows = [["peer", *(title for title, _, _ in columns), "verified"]]
    notes = []
    for records in by_peer(results["peers"], group, rounds).values():
        label = next(r["peer"] for r in records if r is not None)
        measured = [None if r is None or "not_run" in r else r for r in records]
        wrong = frozenset(i for i, r in enumerate(measured) if r is not None and r.get("verified") is False)
        rows.append([label, *(cell([None if r is None else figure(r) for r in measured], fmt, wrong)
                              for _, figure, fmt in columns), verified_cell(records)])
        for i, r in enumerate(records):
            if r is not None and "not_run" in r:
                notes.append(f"  {label}: NOT RUN in round {i + 1}: {r['not_run'].splitlines()[0]}")
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [f"\n{TITLES[group]} (median [round 1, round 2, ...]; "
             "!: the output failed its reader, left out of the median)"]
    lines += ["  " + "  ".join(text.ljust(w) if i == 0 else text.rjust(w)
                               for i, (text, w) in enumerate(zip(row, widths))) for row in rows]
    lines += notes + [f"  {text}" for text in NOT_BUILT.get(group, [])]
    runs = [next((r for r in results["runs"] if r["group"] == group and r["round"] == n), None)
            for n in range(1, rounds + 1)]
    lines.append("  peak RSS of the script's whole process tree, MiB (every peer it runs, in turn, "
                 "so not split per peer): "
                 + cell([None if r is None else r["peak_rss_bytes"] / 2**20 for r in runs], "{:,.0f}"))
    failed = [f"round {r['round']} exit {r['exit']} (log {r['log']})" for r in runs
              if r is not None and r["exit"] != 0]
    if failed:
        lines.append("  the script FAILED: " + "; ".join(failed))
    return lines


def evaluate(goal: Goal, results: dict[str, Any]) -> tuple[float | None, list[float | None], str]:
    """The goal's figure in each round (only where every peer it names has
    its output verified or has no reader), its median, and met / NOT met /
    no figures."""
    rounds = results["rounds"]
    table = by_peer(results["peers"], goal.group, rounds)

    def usable(record: dict | None) -> bool:
        return record is not None and "not_run" not in record and record.get("verified") is not False

    per_round: list[float | None] = []
    for ours, theirs in zip(table.get(goal.ours, [None] * rounds),
                            table.get(goal.theirs or "", [None] * rounds)):
        value = None
        if usable(ours) and (goal.theirs is None or usable(theirs)):
            value = goal.figure(ours)
            if value is not None and goal.theirs is not None:
                denominator = goal.their_figure(theirs)
                value = value / denominator if denominator else None
        per_round.append(value)
    middle = median(per_round)
    if middle is None:
        return None, per_round, "no figures (none from a verified run)"
    met = middle <= goal.bound if goal.at_most else middle >= goal.bound
    return middle, per_round, "met" if met else "NOT met"


def targets_lines(results: dict[str, Any]) -> list[str]:
    lines = ["\nthe targets of issues 21 and 33 (median of the per-round figures [each round])"]
    groups = set(results["groups"])
    for goal in GOALS:
        if goal.group not in groups:
            continue
        middle, per_round, verdict = evaluate(goal, results)
        fmt = "{:.2f}" if goal.unit.strip() in ("x", "s") else "{:,.0f}"
        sign = "<=" if goal.at_most else ">="
        lines.append(f"  {goal.text}: {cell(per_round, fmt)}{goal.unit if middle is not None else ''} "
                     f"(target {sign} {fmt.format(goal.bound)}{goal.unit}): {verdict}")
    return lines


#: Characters per line of a peer's label in the charts.
LABEL_WIDTH = 40


def draw_charts(results: dict[str, Any], directory: Path) -> list[Path] | None:
    """One PNG per group: each peer's figures as horizontal bars (the
    medians), every round's value as a dot. None when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import StrMethodFormatter

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for group in results["groups"]:
        series, axis = CHARTS[group]
        table = {pid: [r for r in records if r is not None and "not_run" not in r
                       and r.get("verified") is not False]
                 for pid, records in by_peer(results["peers"], group, results["rounds"]).items()}
        table = {pid: records for pid, records in table.items() if records}
        if not table:
            continue
        fig, ax = plt.subplots(figsize=(9, 1.0 + 0.7 * len(table) * len(series)))
        height = 0.8 / len(series)
        for j, (legend, figure) in enumerate(series):
            ys, widths = [], []
            for i, records in enumerate(table.values()):
                values = [v for v in (figure(r) for r in records) if v is not None]
                y = i + (j - (len(series) - 1) / 2) * height
                ys.append(y)
                widths.append(statistics.median(values) if values else 0)
                ax.scatter(values, [y] * len(values), color="black", s=12, zorder=3)
            ax.barh(ys, widths, height=height * 0.9, label=legend)
        # A peer's label is a sentence; wrapped, it leaves the bars the figure's width.
        labels = [textwrap.fill(records[0]["peer"], LABEL_WIDTH) for records in table.values()]
        ax.set_yticks(range(len(table)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(axis)
        ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
        ax.set_title(f"{TITLES[group].split(' (')[0]}: median of {results['rounds']} round(s)\n"
                     "dots: each round (verified outputs only)", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = directory / f"{group}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def report(results: dict[str, Any], charts: Path | None) -> None:
    for group in results["groups"]:
        print("\n".join(group_table(group, results)))
    if results["groups"]:
        print("\n".join(targets_lines(results)))
    points = results.get("growth", [])
    if points:
        if results.get("growth_scale", 1.0) != 1.0:
            print(f"\n(the growth curves' record counts scaled by {results['growth_scale']}: "
                  "the counts in their titles are before that)")
        print("\n".join(growth_lines(points)))
    if charts is not None:
        written = draw_charts(results, charts)
        if written is None:
            print("\ncharts: not drawn, matplotlib is not importable here "
                  "(pip install matplotlib, or pip install '.[bench]')")
        else:
            growth = draw_growth(points, charts) if points else None
            print("\ncharts: " + ", ".join(str(p) for p in [*written, *([growth] if growth else [])]))


# ------------------------------------------------------------------------ main

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds, each script once a round, the scripts and the peers inside the "
                             "throughput scripts in another order each round (3)")
    parser.add_argument("--records", type=int, default=None,
                        help="records per throughput run (default: each script's own); "
                             "fixed_cost.py and latency.py take none (see --args)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None,
                        help="records per batch of the throughput runs (default: each script's own)")
    parser.add_argument("--services-dir", default=".eoskit/dev")
    parser.add_argument("--only", default=",".join(GROUPS),
                        help=f"comma-separated groups, of {', '.join(GROUPS)} (all); 'none' for none")
    parser.add_argument("--growth", default=",".join(SERIES_BY_NAME),
                        help=f"comma-separated growth curves, of {', '.join(SERIES_BY_NAME)} (all), run "
                             "once each after the rounds; 'none' for none")
    parser.add_argument("--growth-scale", type=float, default=1.0,
                        help="multiply the growth curves' record counts by this (a smoke run: 0.01)")
    parser.add_argument("--cluster-dir", default=".eoskit/cluster",
                        help="the dev cluster's folder, for the cluster curves (started if not running)")
    parser.add_argument("--out", default=None, help="write every result here as JSON "
                                                    "(default: results.json in the logs folder)")
    parser.add_argument("--charts", default=None,
                        help="draw the PNG charts into this folder (default: charts/ in the logs folder)")
    parser.add_argument("--logs", default=None, help="each run's output and JSON (default: a new temp folder)")
    parser.add_argument("--make-quix-venv", action="store_true",
                        help="let kafka_to_kafka.py create its Quix Streams virtualenv (pip install)")
    parser.add_argument("--make-flink-venv", action="store_true",
                        help="let kafka_to_kafka.py create its PyFlink virtualenv (pip install, and the "
                             "Kafka connector jar from Maven Central)")
    parser.add_argument("--args", action="append", default=[], metavar="GROUP=ARGS",
                        help="more options for one group's script, e.g. 'fixed-cost=--batches 5' "
                             "or 'latency=--seconds 10 --warmup 5' (repeatable)")
    parser.add_argument("--dry-run", action="store_true", help="print each round's commands, run nothing")
    parser.add_argument("--from", dest="source", default=None, metavar="RESULTS_JSON",
                        help="run nothing: print the tables and draw the charts of an earlier --out")
    args = parser.parse_args(argv)
    args.groups = [g.strip() for g in args.only.split(",") if g.strip() and g.strip() != "none"]
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown or (not args.groups and args.only.strip() != "none"):
        parser.error(f"--only: unknown group(s) {', '.join(unknown) or '(none given)'}; "
                     f"groups: {', '.join(GROUPS)}, or none")
    args.growth = [g.strip() for g in args.growth.split(",") if g.strip() and g.strip() != "none"]
    unknown = [g for g in args.growth if g not in SERIES_BY_NAME]
    if unknown:
        parser.error(f"--growth: unknown curve(s) {', '.join(unknown)}; "
                     f"curves: {', '.join(SERIES_BY_NAME)}, or none")
    if not args.groups and not args.growth and not args.source:
        parser.error("--only none and --growth none: nothing to run")
    if args.growth_scale <= 0:
        parser.error("--growth-scale must be more than 0")
    args.extra = {}
    for item in args.args:
        group, _, options = item.partition("=")
        if group not in GROUPS:
            parser.error(f"--args {item!r}: GROUP=ARGS, GROUP one of {', '.join(GROUPS)}")
        args.extra[group] = f"{args.extra.get(group, '')} {options}".strip()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.source:
        results = json.loads(Path(args.source).read_text())
        report(results, Path(args.charts) if args.charts else None)
        return 0
    if args.dry_run:
        logs = Path(args.logs or "LOGS")
        for round_no in range(args.rounds):
            for group in rotated(args.groups, round_no):
                argv_ = command(group, args, logs / f"round{round_no + 1}-{group}.json", round_no)
                print(f"round {round_no + 1}: {shlex.join(argv_)}")
        for point in growth_points(args):
            argv_ = growth_command(point, args, logs / f"{point.label}.json",
                                   "CLUSTER_MASTER" if point.series.cluster else None)
            print(f"growth {point.series.name}: {shlex.join(argv_)}")
        return 0
    logs = Path(args.logs) if args.logs else Path(tempfile.mkdtemp(prefix="eoskit-peers-"))
    logs.mkdir(parents=True, exist_ok=True)
    start_services(args.services_dir)
    results = run_rounds(args, args.groups, logs)
    if args.growth:
        results["growth"] = run_growth(args, logs)
        results["growth_scale"] = args.growth_scale
    out = Path(args.out) if args.out else logs / "results.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    report(results, Path(args.charts) if args.charts else logs / "charts")
    print(f"\nresults: {out}; each run's output: {logs}")
    runs = [*results["runs"], *results.get("growth", [])]
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
