"""How eoskit's cost grows, for ``benchmarks/peers.py --growth``:
``kafka_to_postgres.py`` (the plain loop and eoskit, both verified) once per
point of each series (records, partitions, record size, batch size, and
records and partitions again on the dev cluster), a table per curve and,
where matplotlib is importable, ``growth.png``."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eoskit.runtime.devtools.demo.orders import ORDER_VALUE_BYTES

from benchlib.sampling import run_sampled

#: benchmarks/, where kafka_to_postgres.py is.
BENCHMARKS = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Series:
    """One growth curve: kafka_to_postgres.py (the plain loop and eoskit's
    default, two-phase run, on the same topic) once per value of ``option``,
    with ``records`` records (None: the script's default) and its other
    options at their defaults; on the dev cluster when ``cluster``.
    ``chart``: the panel it is drawn in (a cluster series beside its local one)."""

    name: str
    chart: str
    option: str
    values: tuple[int, ...]
    records: int | None = None
    cluster: bool = False

    def counts(self) -> bool:
        """Whether ``values`` are record counts (scaled by --growth-scale)."""
        return self.option == "--records"


#: The issue's curves: records 100k to 10M, partitions 1 to 64, record size
#: 100 B to 10 KB, batch size; on one machine and on the two-worker cluster.
SERIES = [
    Series("records", "records", "--records", (100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)),
    Series("partitions", "partitions", "--partitions", (1, 4, 16, 64), 1_000_000),
    Series("value-bytes", "value-bytes", "--value-bytes", (ORDER_VALUE_BYTES, 1_000, 10_000), 200_000),
    Series("batch", "batch", "--max-offsets-per-trigger", (10_000, 50_000, 250_000, 1_000_000), 1_000_000),
    Series("cluster-records", "records", "--records", (100_000, 1_000_000, 3_000_000), cluster=True),
    Series("cluster-partitions", "partitions", "--partitions", (4, 16, 64), 1_000_000, cluster=True),
]
SERIES_BY_NAME = {series.name: series for series in SERIES}
#: Each panel's x axis and title.
PANELS = {
    "records": ("records in the run (4 partitions, batches of 250,000)", "log"),
    "partitions": ("topic partitions (1,000,000 records, batches of 250,000)", "log"),
    "value-bytes": ("record value, bytes (200,000 records)", "log"),
    "batch": ("maxOffsetsPerTrigger (1,000,000 records)", "log"),
}
#: What each growth point's table shows: title, figure of its eoskit / loop record, format.
GROWTH_COLUMNS: list[tuple[str, Callable[[dict, dict], float | None], str]] = [
    ("eoskit rows/s", lambda e, b: e.get("rows_per_s"), "{:,.0f}"),
    ("steady rows/s", lambda e, b: e.get("steady_rows_per_s"), "{:,.0f}"),
    ("first batch s", lambda e, b: e.get("first_batch_s"), "{:.2f}"),
    ("later batch s", lambda e, b: e.get("later_batch_s"), "{:.2f}"),
    ("loop rows/s", lambda e, b: b.get("rows_per_s"), "{:,.0f}"),
    ("eoskit/loop", lambda e, b: (e["rows_per_s"] / b["rows_per_s"]
                                  if e.get("rows_per_s") and b.get("rows_per_s") else None), "{:.2f}x"),
]


def scaled_count(count: int, scale: float) -> int:
    """A record count times --growth-scale, 1,000 at least."""
    return max(1_000, round(count * scale))


@dataclass(frozen=True)
class Point:
    """One run of a growth curve: its series, and the value it runs at (a
    record count already scaled)."""

    series: Series
    value: int

    @property
    def label(self) -> str:
        """The name of its log and JSON."""
        return f"growth-{self.series.name}-{self.value}"


def growth_points(args: argparse.Namespace) -> list[Point]:
    """Every point of the --growth curves, in the order they run."""
    points = []
    for name in args.growth:
        series = SERIES_BY_NAME[name]
        for value in series.values:
            value = scaled_count(value, args.growth_scale) if series.counts() else value
            points.append(Point(series, value))
    return points


def growth_command(point: Point, args: argparse.Namespace, json_out: Path, master: str | None) -> list[str]:
    """kafka_to_postgres.py at ``point`` (a fixed record count scaled by --growth-scale)."""
    series = point.series
    argv = [sys.executable, str(BENCHMARKS / "kafka_to_postgres.py"), "--services-dir", args.services_dir,
            "--json-out", str(json_out)]
    if series.records is not None:
        argv += ["--records", str(scaled_count(series.records, args.growth_scale))]
    argv += [series.option, str(point.value)]
    return argv if master is None else [*argv, "--master", master]


class DevCluster:
    """The dev cluster of ``cluster_dir`` (``eoskit dev cluster``) for the
    cluster curves: started on first use if it is not running, and then
    stopped by ``close``; one that was running before is left running."""

    def __init__(self, cluster_dir: str) -> None:
        from eoskit.runtime.devtools.services.cluster import SparkCluster

        self.cluster = SparkCluster(cluster_dir)
        self.url: str | None = None
        self.started_here = False

    def master(self) -> str:
        if self.url is None:
            self.url = self.cluster.master_url()
            if self.url is None:
                self.url, self.started_here = self.cluster.up(), True
            print(f"==> the dev cluster: {self.url}" + (" (started here)" if self.started_here else ""),
                  flush=True)
        return self.url

    def close(self) -> None:
        if self.started_here:
            self.cluster.down()


def run_growth(args: argparse.Namespace, logs: Path) -> list[dict[str, Any]]:
    """Every point of the --growth series, once each, in order; each with its run and its peers."""
    done = []
    cluster = DevCluster(args.cluster_dir)
    try:
        for point in growth_points(args):
            json_out, log = logs / f"{point.label}.json", logs / f"{point.label}.log"
            argv = growth_command(point, args, json_out, cluster.master() if point.series.cluster else None)
            print(f"==> growth {point.series.name} = {point.value:,}: {shlex.join(argv[1:])}", flush=True)
            run = run_sampled(argv, log)
            found = json.loads(json_out.read_text()) if json_out.is_file() else []
            print(f"    exit {run.exit}, {run.wall_s:.0f} s, peak RSS {run.peak_rss / 2**20:,.0f} MiB, "
                  f"log {log}", flush=True)
            done.append({"series": point.series.name, "value": point.value, "command": argv, "log": str(log),
                         "exit": run.exit, "wall_s": run.wall_s, "peak_rss_bytes": run.peak_rss,
                         "peers": found})
    finally:
        cluster.close()
    return done


def growth_pair(point: dict) -> tuple[dict, dict]:
    """The point's eoskit and plain-loop records ({} where missing)."""
    peers = {peer.get("id"): peer for peer in point["peers"]}
    return peers.get("eoskit", {}), peers.get("baseline", {})


def growth_lines(points: list[dict]) -> list[str]:
    """A table per series: a row per point."""
    lines = []
    for name in dict.fromkeys(p["series"] for p in points):
        series = SERIES_BY_NAME[name]
        rows = [[series.option.lstrip("-"), *(t for t, _, _ in GROWTH_COLUMNS), "peak RSS MiB", "verified"]]
        for point in (p for p in points if p["series"] == name):
            eoskit, loop = growth_pair(point)
            cells = [f"{point['value']:,}"]
            for _, figure, fmt in GROWTH_COLUMNS:
                value = figure(eoskit, loop)
                cells.append("-" if value is None else fmt.format(value))
            ok = [r.get("verified") for r in (eoskit, loop) if r]
            cells += [f"{point['peak_rss_bytes'] / 2**20:,.0f}",
                      ("FAILED, exit %d" % point["exit"]) if point["exit"] != 0
                      else ("yes" if ok and all(ok) else "NO")]
            rows.append(cells)
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        where = "the two-worker dev cluster" if series.cluster else "local[2]"
        fixed = "the script's defaults" if series.records is None else f"--records {series.records}"
        lines.append(f"\nHow cost grows: {name} ({where}; kafka_to_postgres.py {fixed}; one run per point)")
        lines += ["  " + "  ".join(text.rjust(w) for text, w in zip(row, widths)) for row in rows]
    return lines


def draw_growth(points: list[dict], directory: Path) -> Path | None:
    """growth.png: a panel per curve, rows/s against the varied value
    (eoskit whole run and steady, the plain loop; the cluster's beside)."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import StrMethodFormatter

    panels = [c for c in PANELS if any(SERIES_BY_NAME[p["series"]].chart == c for p in points)]
    if not panels:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3.2 * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        for name in dict.fromkeys(p["series"] for p in points):
            series = SERIES_BY_NAME[name]
            if series.chart != panel:
                continue
            mine = [p for p in points if p["series"] == name and p["exit"] == 0]
            where = " (cluster)" if series.cluster else ""
            style = "--" if series.cluster else "-"
            for legend, pick, colour in (("eoskit whole run", lambda e, b: e.get("rows_per_s"), "tab:blue"),
                                         ("eoskit steady", lambda e, b: e.get("steady_rows_per_s"), "tab:orange"),
                                         ("plain loop", lambda e, b: b.get("rows_per_s"), "tab:green")):
                if series.cluster and legend == "plain loop":
                    continue  # the loop does not run on the cluster: the same as the local one
                xy = [(p["value"], pick(*growth_pair(p))) for p in mine]
                xy = [(x, y) for x, y in xy if y is not None]
                if xy:
                    ax.plot([x for x, _ in xy], [y for _, y in xy], style, marker="o", color=colour,
                            label=legend + where)
        title, scale = PANELS[panel]
        ax.set_xscale(scale)
        shown = sorted({p["value"] for p in points if SERIES_BY_NAME[p["series"]].chart == panel})
        ax.set_xticks(shown, [f"{v:,}" for v in shown], fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel(title, fontsize=8)
        ax.set_ylabel("rows/s")
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.suptitle("Kafka -> PostgreSQL: how cost grows (one run per point)", fontsize=10)
    fig.tight_layout()
    path = directory / "growth.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
