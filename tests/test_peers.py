"""benchmarks/peers.py, the one command of issue 21's peers: the rounds'
order, the tables and targets from canned results, the memory of a process
tree, the charts with and without matplotlib. Nothing here starts a
benchmark, a broker or Spark."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

# benchmarks/ is no package: its scripts import their library (benchlib)
# by name, so the folder goes on the path and the script is loaded by path.
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
_spec = importlib.util.spec_from_file_location("peers", BENCHMARKS / "peers.py")
peers = importlib.util.module_from_spec(_spec)
sys.modules["peers"] = peers  # dataclasses look their module up
_spec.loader.exec_module(peers)  # type: ignore[union-attr]

from benchlib import growth, sampling  # noqa: E402 - after benchmarks/ is on the path


def record(group: str, peer_id: str, round_no: int, verified: bool | None = True, **figures) -> dict:
    return {"peer": f"the {peer_id} peer", "id": peer_id, "group": group, "round": round_no,
            "verified": verified, "problems": [], **figures}


def canned() -> dict:
    """Two rounds of Kafka -> PostgreSQL, Kafka -> Kafka (Quix not run in
    round 2, Spark's pair wrong in round 2) and latency."""
    kp, kk = "kafka-postgres", "kafka-kafka"
    peers_ = [
        record(kp, "baseline", 1, rows_per_s=100_000.0, wall_s=10.0),
        record(kp, "spark_jdbc", 1, rows_per_s=30_000.0, steady_rows_per_s=50_000.0, first_batch_s=10.0,
               later_batch_s=4.0, wall_s=33.3),
        record(kp, "eoskit", 1, rows_per_s=50_000.0, steady_rows_per_s=140_000.0, first_batch_s=5.0,
               later_batch_s=1.5, wall_s=20.0),
        record(kp, "baseline", 2, rows_per_s=120_000.0, wall_s=8.3),
        record(kp, "spark_jdbc", 2, rows_per_s=32_000.0, steady_rows_per_s=52_000.0, first_batch_s=9.0,
               later_batch_s=4.2, wall_s=31.0),
        record(kp, "eoskit", 2, rows_per_s=70_000.0, steady_rows_per_s=200_000.0, first_batch_s=2.0,
               later_batch_s=1.2, wall_s=14.3),
        record(kk, "baseline", 1, rows_per_s=100_000.0),
        record(kk, "quix", 1, rows_per_s=40_000.0),
        record(kk, "spark_kafka", 1, rows_per_s=80_000.0),
        record(kk, "eoskit", 1, rows_per_s=90_000.0),
        record(kk, "baseline", 2, rows_per_s=100_000.0),
        {"peer": "the quix peer", "id": "quix", "group": kk, "round": 2,
         "not_run": "no virtualenv at .eoskit/quix-venv\nsecond line"},
        record(kk, "spark_kafka", 2, verified=False, rows_per_s=50_000.0),
        record(kk, "eoskit", 2, rows_per_s=95_000.0),
        record("latency", "eoskit_postgres", 1, p50_ms=780.0, p90_ms=1000.0, p99_ms=1280.0, max_ms=1400.0),
        record("latency", "eoskit_postgres", 2, p50_ms=800.0, p90_ms=1100.0, p99_ms=1700.0, max_ms=1900.0),
    ]
    runs = [{"round": r, "group": g, "exit": 0, "log": f"/logs/round{r}-{g}.log",
             "peak_rss_bytes": (1000 + 48 * (r - 1)) * 2**20}
            for r in (1, 2) for g in (kp, kk, "latency")]
    runs[-1]["exit"] = 1
    return {"rounds": 2, "groups": [kp, kk, "latency"], "runs": runs, "peers": peers_}


# ------------------------------------------------------------------ the rounds

def test_each_round_rotates_the_order_so_no_script_always_runs_first():
    groups = list(peers.GROUPS)
    orders = [peers.rotated(groups, r) for r in range(len(groups))]
    assert orders[0] == groups
    assert orders[1] == groups[1:] + groups[:1]
    assert {order[0] for order in orders} == set(groups)
    assert all(sorted(order) == sorted(groups) for order in orders)
    assert peers.rotated(groups, len(groups)) == groups
    assert peers.rotated(["a", "b"], 1) == ["b", "a"]


def test_the_dry_run_prints_every_round_with_the_options_passed_through(capsys):
    assert peers.main(["--dry-run", "--rounds", "2", "--records", "2000", "--max-offsets-per-trigger", "500",
                       "--only", "kafka-postgres,latency", "--services-dir", "/srv/dev",
                       "--args", "latency=--seconds 5 --warmup 5", "--growth", "none"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[3].rsplit("/", 1)[1] for line in lines] == [
        "kafka_to_postgres.py", "latency.py", "latency.py", "kafka_to_postgres.py"]
    postgres, latency = lines[0], lines[1]
    assert "--spark-jdbc" in postgres and "--records 2000" in postgres
    assert "--foreach-batch" in postgres and "--commit-modes" in postgres
    assert "--max-offsets-per-trigger 500" in postgres
    assert "--services-dir /srv/dev" in postgres and "--json-out LOGS/round1-kafka-postgres.json" in postgres
    assert "--records" not in latency and latency.endswith("--seconds 5 --warmup 5")


def test_an_unknown_group_or_curve_or_nothing_at_all_is_refused(capsys):
    for argv, said in ((["--only", "kafka-postgres,kafka-mysql"], "unknown group(s) kafka-mysql"),
                       (["--growth", "records,colour"], "unknown curve(s) colour"),
                       (["--only", "none", "--growth", "none"], "nothing to run"),
                       (["--growth-scale", "0"], "--growth-scale must be more than 0")):
        with pytest.raises(SystemExit):
            peers.parse_args(argv)
        assert said in capsys.readouterr().err


def test_the_growth_curves_dry_run_scales_the_counts_and_names_the_cluster(capsys):
    assert peers.main(["--dry-run", "--only", "none", "--growth", "records,batch,cluster-partitions",
                       "--growth-scale", "0.01", "--services-dir", "/srv/dev"]) == 0
    lines = capsys.readouterr().out.splitlines()
    records = [line for line in lines if line.startswith("growth records:")]
    assert [line.split("--records ")[1].split()[0] for line in records] == [
        "1000", "3000", "10000", "30000", "100000"]  # 100k .. 10M, a hundredth
    batch = [line for line in lines if line.startswith("growth batch:")]
    assert all("--records 10000 " in line for line in batch)  # the fixed count is scaled too
    assert [line.rsplit("--max-offsets-per-trigger ", 1)[1] for line in batch] == [
        "10000", "50000", "250000", "1000000"]  # not counts: as they are
    cluster = [line for line in lines if line.startswith("growth cluster-partitions:")]
    assert len(cluster) == 3 and all(line.endswith("--master CLUSTER_MASTER") for line in cluster)
    assert not any("--master" in line for line in records + batch)
    assert all("--json-out LOGS/growth-" in line for line in lines)
    assert "LOGS/growth-records-1000.json" in records[0]  # named by the count it runs


def growth_points() -> list[dict]:
    def point(series, value, eoskit, loop, exit=0, verified=True):
        return {"series": series, "value": value, "exit": exit, "peak_rss_bytes": 900 * 2**20, "peers": [
            record("kafka-postgres", "baseline", 1, verified=verified, rows_per_s=loop),
            record("kafka-postgres", "eoskit", 1, rows_per_s=eoskit, steady_rows_per_s=eoskit * 2,
                   first_batch_s=2.5, later_batch_s=1.0)]}
    return [point("records", 100_000, 20_000.0, 80_000.0), point("records", 1_000_000, 60_000.0, 100_000.0),
            point("cluster-records", 100_000, 10_000.0, 80_000.0, verified=False),
            point("cluster-records", 1_000_000, 40_000.0, 100_000.0, exit=1)]


def test_growth_tables_show_each_point_and_what_failed():
    text = "\n".join(growth.growth_lines(growth_points()))
    assert "How cost grows: records (local[2]" in text and "How cost grows: cluster-records (the two-worker" in text
    local = [line for line in text.splitlines() if line.strip().startswith(("100,000", "1,000,000"))]
    assert "20,000" in local[0] and "40,000" in local[0] and "0.25x" in local[0] and local[0].endswith("yes")
    assert "0.60x" in local[1]
    assert local[2].rstrip().endswith("NO")  # the loop's output failed its reader
    assert local[3].rstrip().endswith("FAILED, exit 1")


def test_growth_chart_is_one_png_with_a_panel_per_curve(tmp_path):
    pytest.importorskip("matplotlib")
    path = growth.draw_growth(growth_points(), tmp_path)
    assert path == tmp_path / "growth.png" and path.read_bytes().startswith(b"\x89PNG")
    assert growth.draw_growth([], tmp_path / "none") is None


# ----------------------------------------------------------------- the tables

def test_a_group_table_shows_the_median_and_every_round():
    table = "\n".join(peers.group_table("kafka-postgres", canned()))
    eoskit = next(line for line in table.splitlines() if "the eoskit peer" in line)
    assert "60,000 [50,000 70,000]" in eoskit  # whole run
    assert "170,000 [140,000 200,000]" in eoskit  # steady
    assert "3.50 [5.00 2.00]" in eoskit  # first batch
    assert eoskit.rstrip().endswith("yes")
    baseline = next(line for line in table.splitlines() if "the baseline peer" in line)
    assert "110,000 [100,000 120,000]" in baseline and "- [- -]" in baseline
    # the script's memory is shown
    assert "peak RSS of the script's whole process tree" in table and "1,024 [1,000 1,048]" in table
    assert "not split per peer" in table
    assert "FAILED" not in table


def test_not_run_wrong_outputs_not_built_and_failed_scripts_are_said(monkeypatch):
    monkeypatch.setattr(peers, "NOT_BUILT", {"kafka-kafka": ["a peer nobody built: not built"]})
    results = canned()
    kafka = "\n".join(peers.group_table("kafka-kafka", results))
    assert "the quix peer: NOT RUN in round 2: no virtualenv at .eoskit/quix-venv" in kafka
    assert "second line" not in kafka
    quix = next(line for line in kafka.splitlines() if line.strip().startswith("the quix peer") and "[" in line)
    assert "40,000 [40,000 -]" in quix
    spark = next(line for line in kafka.splitlines() if "the spark_kafka peer" in line)
    assert spark.rstrip().endswith("NO (round 2)")
    assert "80,000 [80,000 50,000!]" in spark  # the wrong round is not in the median
    assert "a peer nobody built: not built" in kafka
    latency = "\n".join(peers.group_table("latency", results))
    assert "1,490 [1,280 1,700]" in latency  # p99
    assert "the script FAILED: round 2 exit 1 (log /logs/round2-latency.log)" in latency


def test_one_round_shows_the_value_alone():
    assert peers.cell([12.345], "{:.1f}") == "12.3"
    assert peers.cell([None], "{:.1f}") == "-"
    assert peers.cell([1.0, None, 3.0], "{:.1f}") == "2.0 [1.0 - 3.0]"
    assert peers.cell([1.0, 3.0], "{:.1f}", frozenset({1})) == "1.0 [1.0 3.0!]"


# ---------------------------------------------------------------- the targets

def goal(text: str):
    return next(g for g in peers.GOALS if g.text.startswith(text))


def test_targets_met_and_not_met_from_the_per_round_figures():
    results = canned()
    jdbc = peers.evaluate(goal("Kafka -> PostgreSQL: eoskit exactly-once, whole run, / Spark"), results)
    assert jdbc[1] == pytest.approx([50 / 30, 70 / 32]) and jdbc[2] == "met"
    loop = peers.evaluate(goal("Kafka -> PostgreSQL: eoskit exactly-once, whole run, / the plain"), results)
    assert loop[0] == pytest.approx((0.5 + 70 / 120) / 2) and loop[2] == "NOT met"
    steady = peers.evaluate(goal("Kafka -> PostgreSQL: eoskit exactly-once, steady"), results)
    assert steady[0] == pytest.approx((1.4 + 200 / 120) / 2) and steady[2] == "met"  # 1.53
    first = peers.evaluate(goal("Kafka -> PostgreSQL, 250,000-row batches: eoskit's first batch"), results)
    assert first[1] == pytest.approx([3.5, 0.8]) and first[2] == "NOT met"  # median 2.15 s > 1 s
    latency = peers.evaluate(goal("latency"), results)
    assert latency[0] == pytest.approx(1490) and latency[2] == "met"


def test_a_round_whose_output_is_wrong_does_not_count_and_missing_figures_say_so():
    results = canned()
    # round 2's Spark pair failed its reader: only round 1 counts (90k / 80k)
    kafka = peers.evaluate(goal("Kafka -> Kafka"), results)
    assert kafka[1] == [pytest.approx(90 / 80), None] and kafka[2] == "met"
    files = peers.evaluate(goal("Kafka -> files: eoskit-parquet"), results)
    assert files == (None, [None, None], "no figures (none from a verified run)")
    lines = "\n".join(peers.targets_lines(results))
    assert "Kafka -> files" not in lines  # the group was not run
    assert "(target <= 1,500 ms): met" in lines
    assert "1.12 [1.12 -]x (target >= 1.00x): met" in lines


def test_the_restart_target_is_five_seconds_at_most():
    results = canned()
    results["groups"].append("restart")
    results["peers"] += [record("restart", "eoskit_restart", 1, restart_s=10.4),
                         record("restart", "eoskit_restart", 2, restart_s=9.8)]
    restart = peers.evaluate(goal("restart after kill -9"), results)
    assert restart[0] == pytest.approx(10.1) and restart[2] == "NOT met"
    assert "10.10 [10.40 9.80] s (target <= 5.00 s): NOT met" in "\n".join(peers.targets_lines(results))
    assert "10.1 [10.4 9.8]" in "\n".join(peers.group_table("restart", results))


def test_a_target_is_met_at_its_bound_and_not_below():
    results = canned()
    for peer in results["peers"]:
        if peer["id"] == "eoskit" and peer["group"] == "kafka-postgres":
            peer["steady_rows_per_s"] = 1.5 * (100_000.0 if peer["round"] == 1 else 120_000.0)
    assert peers.evaluate(goal("Kafka -> PostgreSQL: eoskit exactly-once, steady"), results)[2] == "met"
    results["peers"][2]["steady_rows_per_s"] = 140_000.0  # round 1: 1.4x, the median 1.45x
    assert peers.evaluate(goal("Kafka -> PostgreSQL: eoskit exactly-once, steady"), results)[2] == "NOT met"


# ------------------------------------------------------------ memory of a tree

def test_a_process_gone_is_skipped_in_the_resident_sets():
    me, gone = os.getpid(), 2 ** 22 + 12345  # above the kernel's largest pid
    total, count = sampling.tree_rss([me, gone])
    assert count == 1 and total == pytest.approx(sampling.tree_rss([me])[0], rel=0.1) and total > 0
    assert sampling.tree_rss([gone]) == (0, 0)


SLEEPER = "import time; time.sleep({s})"
#: A python that starts two sleeping pythons, one of which starts a third.
TREE = ("import subprocess, sys, time\n"
        "kids = [subprocess.Popen([sys.executable, '-c', {inner!r}]) for _ in range(2)]\n"
        "time.sleep({s}); [k.wait() for k in kids]\n")


def test_a_real_tree_of_sleeping_pythons_is_summed(tmp_path):
    inner = TREE.format(inner=SLEEPER.format(s=30), s=30)  # a child with a child of its own
    root = subprocess.Popen([sys.executable, "-c", TREE.format(inner=inner, s=30)], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while len(sampling.tree_pids(root.pid)) < 7 and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = sampling.tree_pids(root.pid)
        assert len(pids) == 7  # the root, 2 children, 4 grandchildren
        total, count = sampling.tree_rss(pids)
        alone, _ = sampling.tree_rss(pids[-1:])
        assert count == 7 and total > 6 * alone > 0
    finally:
        for pid in reversed(sampling.tree_pids(root.pid)):
            os.kill(pid, signal.SIGTERM)
        root.wait()


def test_run_sampled_keeps_the_peak_of_the_whole_tree(tmp_path):
    log = tmp_path / "run.log"
    script = TREE.format(inner=SLEEPER.format(s=1.5), s=1.5) + "print('done')"
    run = sampling.run_sampled([sys.executable, "-c", script], log, every=0.05)
    assert run.exit == 0 and run.wall_s >= 1.5
    assert run.peak_processes == 3
    assert run.peak_rss > 3 * 5 * 2**20  # three interpreters, a few MiB each at least
    assert log.read_text().strip() == "done"


# ------------------------------------------------------------------ the charts

def test_without_matplotlib_the_charts_are_skipped_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert peers.draw_charts(canned(), tmp_path / "charts") is None
    peers.report(canned(), tmp_path / "charts")
    out = capsys.readouterr().out
    assert ("charts: not drawn, matplotlib is not importable here (pip install matplotlib, "
            "or pip install '.[bench]')") in out
    assert "the targets of issues 21 and 33" in out
    assert not (tmp_path / "charts").exists()


def test_with_matplotlib_each_group_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    written = peers.draw_charts(canned(), tmp_path / "charts")
    assert [p.name for p in written] == ["kafka-postgres.png", "kafka-kafka.png", "latency.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)


def test_from_an_earlier_results_file(tmp_path, capsys):
    source = tmp_path / "results.json"
    source.write_text(json.dumps(canned()))
    assert peers.main(["--from", str(source)]) == 0
    out = capsys.readouterr().out
    assert "Kafka -> PostgreSQL (median" in out and "the targets of issues 21 and 33" in out
    assert "charts:" not in out  # none asked for


# ------------------------------------- what the scripts write for --json-out

def _benchlib(*names: str) -> tuple:
    """benchmarks/benchlib's modules ``names``, as the scripts import them
    (the test is skipped where PySpark is missing)."""
    import importlib

    pytest.importorskip("pyspark")
    return tuple(importlib.import_module(f"benchlib.{name}") for name in names)



def test_the_scripts_figures_carry_what_peers_reads(monkeypatch):
    """benchlib's report helpers (shared by every script): a query's
    figures and a Spark runner's line, as peer records (imports PySpark,
    starts nothing)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    report, results = _benchlib("report", "results")
    result = results.StreamResult(rows=1000, wall_s=4.0, batches=3, batch_rows=[400, 300, 300],
                            durations_ms=[{"triggerExecution": 2000}, {"triggerExecution": 500},
                                          {"triggerExecution": 700}])
    eoskit = report.peer_record("kafka-postgres", "eoskit", "eoskit", report.stream_figures(result), [])
    assert eoskit["rows_per_s"] == 250 and eoskit["steady_rows_per_s"] == 500
    assert eoskit["first_batch_s"] == 2.0 and eoskit["later_batch_s"] == 0.6 and eoskit["verified"]
    line = {"rows": 1000, "run_s": 5.0, "batch_rows": [500, 500], "batch_s": [4.0, 1.0],
            "failed_tasks": 0, "pyspark": "4.2.0"}
    spark = report.baseline_figures(results.BaselineResult(1000, 5.0, results.Timings({"query": 5.0}), line))
    assert spark["rows_per_s"] == 200 and spark["steady_rows_per_s"] == 500
    assert spark["later_batch_s"] == 1.0 and spark["runner"]["pyspark"] == "4.2.0"
    loop = report.peer_record("kafka-postgres", "baseline", "loop",
                         report.baseline_figures(results.BaselineResult(1000, 0.0, results.Timings())), ["wrong"])
    assert loop["rows_per_s"] is None and loop["verified"] is False
    assert report.peer_record("g", "i", "l", {}, None)["verified"] is None  # no reader


def test_run_benchmark_writes_every_peer_with_spark_broker_and_tables_stubbed(monkeypatch, tmp_path):
    """The path every throughput benchmark shares (benchlib.harness), down to
    --json-out, with nothing started: the services, the topic, Spark's
    query and the tables are stand-ins. A wrong table is a peer not verified;
    a contender that cannot run is a peer not run."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    harness, results = _benchlib("harness", "results")
    from decimal import Decimal

    from eoskit.runtime.devtools.demo.orders import OrderTotals

    expected = OrderTotals(1000, Decimal("5.00"))
    right = results.TableStats(1000, 1000, Decimal("5.00"), results.CREATED_AT, results.CREATED_AT)
    monkeypatch.setattr(harness, "LocalServices", lambda _dir: type("S", (), {"up": lambda self: type(
        "E", (), {"kafka_bootstrap": "b:9092", "postgres_url": "postgresql://u@h/db"})()})())
    monkeypatch.setattr(harness, "produce", lambda *a: (expected, 0.1))
    monkeypatch.setattr(harness, "delete_topic", lambda *a: None)
    monkeypatch.setattr(harness, "spark_session", lambda master, extra=None: type("Spark", (), {"stop": lambda self: None})())
    monkeypatch.setattr(harness, "kafka_stream", lambda *a: None)
    monkeypatch.setattr(harness, "run_stream", lambda *a: results.StreamResult(
        rows=1000, wall_s=2.0, batches=2, batch_rows=[500, 500],
        durations_ms=[{"triggerExecution": 1500}, {"triggerExecution": 250}], failed_tasks=0))

    def unavailable(*a):
        raise harness.Unavailable("no venv\nmore")
    spark_line = {"rows": 1000, "run_s": 4.0, "batch_rows": [500, 500], "batch_s": [3.0, 1.0],
                  "failed_tasks": 0, "pyspark": "4.2.0"}
    target = harness.Target(
        sink="eoskit-postgres", baseline="loop", url_of=lambda e: e.postgres_url,
        reset_table=lambda *a: None,
        table_stats=lambda url, table: right if table != "bench_spark_jdbc" else results.TableStats(
            999, 999, Decimal("4.99"), results.CREATED_AT, results.CREATED_AT),
        run_baseline=lambda *a: results.BaselineResult(1000, 0.5, results.Timings({"copy": 0.4})),
        writer=lambda url: None, transform=lambda raw: raw,
        commit_modes=("idempotent",), mode_writer=lambda url, table, mode: None,
        contenders=(harness.Contender("quix-like", "bench_quix", unavailable),
                    harness.Contender("spark-like", "bench_spark_jdbc", lambda *a: results.BaselineResult(
                        1000, 4.0, results.Timings(), spark_line))))
    out = tmp_path / "peers.json"
    args = harness.parse_args(["--records", "1000", "--json-out", str(out)], "test")
    assert harness.run_benchmark(args, target) == 1  # the Spark peer's table is wrong
    found = {p["id"]: p for p in json.loads(out.read_text())}
    assert list(found) == ["baseline", "spark_jdbc", "quix", "eoskit", "eoskit_idempotent"]
    assert {p["group"] for p in found.values()} == {"kafka-postgres"}
    assert found["baseline"]["rows_per_s"] == 2000 and found["baseline"]["verified"] is True
    assert found["spark_jdbc"]["verified"] is False and found["spark_jdbc"]["problems"]
    assert found["spark_jdbc"]["first_batch_s"] == 3.0 and found["spark_jdbc"]["steady_rows_per_s"] == 500
    assert found["quix"]["not_run"] == "no venv\nmore"
    eoskit = found["eoskit"]
    assert eoskit["verified"] is True and eoskit["rows_per_s"] == 500 and eoskit["steady_rows_per_s"] == 2000
    assert eoskit["first_batch_s"] == 1.5 and eoskit["later_batch_s"] == 0.25
    assert eoskit["peer"] == "eoskit-kafka -> from_json -> eoskit-postgres (default commitMode)"
    assert eoskit["cpu"]["wall_s"] >= 0 and eoskit["cpu"]["available_s"] >= eoskit["cpu"]["wall_s"]
    assert "machine_busy_s" in found["baseline"]["cpu"]
    idempotent = found["eoskit_idempotent"]
    assert idempotent["verified"] is True and "commitMode=idempotent" in idempotent["peer"]


def test_a_restarts_phases_are_taken_between_milestones_seen_in_order(monkeypatch):
    """restart.py splits each restart at the milestones it saw (its JVM
    running, the crashed run's transactions committed, the batch in the
    commit log); a phase whose start was not seen is left out, not merged
    into the next."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    restart = pytest.importorskip("restart")
    rounds = [{"jvm": 1.0, "swept": 6.0, "committed": 9.5}, {"jvm": 1.2, "swept": 6.5, "committed": 10.0},
              {"jvm": 1.1, "committed": 8.0}]
    phases = restart.phase_seconds(rounds)
    assert list(phases.values()) == [[1.0, 1.2, 1.1], [5.0, pytest.approx(5.3)], [3.5, 3.5]]
    assert list(phases) == [restart.PHASES[m] for m in restart.MILESTONES]


def test_cpu_share_counts_the_machines_busy_time_over_a_span(monkeypatch):
    """cpu_share.py: the machine's busy time over a span takes in a process that spins in it."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import cpu_share

    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys; subprocess.run([sys.executable, '-c', "
        "'import time; t = time.process_time()\\nwhile time.process_time() - t < 0.6: pass'])")])
    try:
        span = cpu_share.Cpu({"tree": parent.pid}).start()
        parent.wait(timeout=30)
    finally:
        parent.kill()
    figures = span.stop()
    assert figures["machine_busy_s"] >= 0.5  # the child's spin, at least
    assert figures["steal_s"] >= 0
    assert figures["wall_s"] > 0 and figures["available_s"] == pytest.approx(
        figures["wall_s"] * os.cpu_count())
    assert "machine busy" in cpu_share.describe(figures) and "tree" in cpu_share.describe(figures)


def test_cpu_share_counts_steal_time_in_neither_busy_nor_available(monkeypatch):
    """Issue 33: time the hypervisor gave another guest is not this machine's busy time."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import types

    import cpu_share

    times = types.SimpleNamespace(user=10.0, nice=1.0, system=5.0, idle=100.0, iowait=3.0, irq=0.5,
                                  softirq=1.5, steal=7.0, guest=2.0, guest_nice=0.0)  # guest: in user
    assert cpu_share.machine_s(times) == (18.0, 7.0)
    busy, steal = cpu_share.machine_s()  # this machine's, since boot
    assert busy > 0 and steal >= 0
    line = cpu_share.describe({"wall_s": 1.0, "available_s": 2.0, "machine_busy_s": 1.0, "steal_s": 0.5,
                               "db_s": 0.3})
    assert line == "machine busy 1.0 of 1.5 CPU-s (of 2.0, 0.5 stolen by the hypervisor), db 0.3 CPU-s"
    assert cpu_share.describe({"wall_s": 1.0, "available_s": 2.0, "machine_busy_s": 1.0, "steal_s": 0.0}) \
        == "machine busy 1.0 of 2.0 CPU-s"


def test_cpu_share_reads_a_live_tree_with_its_reaped_children(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import cpu_share

    script = ("import subprocess, sys, time\n"
              "subprocess.run([sys.executable, '-c', 'import time; t = time.process_time()\\n"
              "while time.process_time() - t < 0.5: pass'])\n"
              "print('reaped', flush=True); time.sleep(30)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "reaped"
        assert cpu_share.tree_cpu_s(parent.pid) >= 0.5  # the child's time, in the parent's cutime
        assert cpu_share.tree_cpu_s(os.getpid()) >= cpu_share.tree_cpu_s(parent.pid)  # it is below us
    finally:
        parent.kill()
        parent.wait()


def test_a_peer_in_a_process_of_its_own_gives_its_last_json_line_or_says_why_not(monkeypatch):
    """benchlib.harness.run_peer_process, which every peer in a process of
    its own goes through (Spark's runners, Quix Streams, PyFlink)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    [harness] = _benchlib("harness")
    result, wall = harness.run_peer_process("a peer", [sys.executable, "-c", (
        "import json, os; print('starting'); print(json.dumps({'rows': 3, 'who': os.environ['WHO']}))")],
        {"WHO": "me"})
    assert result == {"rows": 3, "who": "me"} and wall > 0
    with pytest.raises(harness.Unavailable, match=r"a peer exited with 2:\n    line 6\n    line 7\n(.|\n)*line 20$") as failed:
        harness.run_peer_process("a peer", [sys.executable, "-c", (
            "import sys\nfor i in range(21): print('line', i, file=sys.stderr)\nsys.exit(2)")])
    assert "line 5\n" not in str(failed.value)  # the last 15 lines only
    with pytest.raises(harness.Unavailable, match="a peer exited with 0"):  # nothing printed
        harness.run_peer_process("a peer", [sys.executable, "-c", "pass"])
    with pytest.raises(harness.Unavailable, match="a peer did not finish within 0 minutes"):
        harness.run_peer_process("a peer", [sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.5)


def test_the_session_settings_and_the_record_size_are_checked(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    [harness] = _benchlib("harness")
    args = harness.parse_args(["--spark-conf", "spark.a=1", "--spark-conf", " spark.b = x=y"], "test")
    assert dict(args.spark_conf) == {"spark.a": "1", "spark.b": " x=y"}
    with pytest.raises(SystemExit):
        harness.parse_args(["--spark-conf", "spark.a"], "test")
    assert "'spark.a': give KEY=VALUE" in capsys.readouterr().err
    assert harness.parse_args(["--value-bytes", "1000"], "test").value_bytes == 1000
    with pytest.raises(SystemExit):
        harness.parse_args(["--value-bytes", "-5"], "test")
    assert "argument --value-bytes: -5: give 0 or more" in capsys.readouterr().err


def test_the_growth_curves_stop_the_cluster_they_started_and_only_that(monkeypatch):
    """growth.DevCluster: started on first use when not running, stopped at
    the end; a cluster that was running before is used and left running."""
    from eoskit.runtime.devtools.services import cluster as dev_cluster

    class FakeCluster:
        running: str | None = None
        calls: list[str] = []

        def __init__(self, root):
            self.root = root

        def master_url(self):
            return FakeCluster.running

        def up(self):
            FakeCluster.calls.append("up")
            FakeCluster.running = "spark://127.0.0.1:7077"
            return FakeCluster.running

        def down(self):
            FakeCluster.calls.append("down")
            FakeCluster.running = None

    monkeypatch.setattr(dev_cluster, "SparkCluster", FakeCluster)
    unused = growth.DevCluster("/c")
    unused.close()
    assert FakeCluster.calls == []  # never asked for: never started
    started = growth.DevCluster("/c")
    assert started.master() == started.master() == "spark://127.0.0.1:7077"
    started.close()
    assert FakeCluster.calls == ["up", "down"]
    FakeCluster.running, FakeCluster.calls = "spark://127.0.0.1:9999", []
    kept = growth.DevCluster("/c")
    assert kept.master() == "spark://127.0.0.1:9999"
    kept.close()
    assert FakeCluster.calls == [] and FakeCluster.running == "spark://127.0.0.1:9999"
