"""Issue 33's changes to the peers benchmark, their pure parts: every
batch's progress kept past Spark's 100 (benchlib.progress), Spark's jdbc
peer with its defaults and tuned, the plain-script line timed from its
process's start, the peers inside a script rotated each round, PyFlink's
other timings and its SQL job's statements. Nothing here starts Spark, a
JVM, a broker or a database: Spark's listener bus and a query are fakes of
the few attributes our code reads."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import threading
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))


def load(name: str):
    """A script of benchmarks/ by path (the folder is no package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


from benchlib import progress, rounds  # noqa: E402 - after benchmarks/ is on the path


# ----------------------------------------------------------- every batch's progress

def report(run: str, batch: int, rows: int = 10_000) -> dict:
    return {"runId": run, "batchId": batch, "numInputRows": rows, "durationMs": {"triggerExecution": batch}}


class FakeStreams:
    """``spark.streams``: the listeners added and removed."""

    def __init__(self) -> None:
        self.added: list = []
        self.removed: list = []

    def addListener(self, listener) -> None:  # noqa: N802 - PySpark's name
        self.added.append(listener)

    def removeListener(self, listener) -> None:  # noqa: N802
        self.removed.append(listener)


def deliver(listener, reports: list[dict], run: str) -> None:
    """What Spark's listener bus does, in its own thread: each progress, then the end."""
    for r in reports:
        listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps(r))))
    listener.onQueryTerminated(SimpleNamespace(runId=run))


def test_a_run_of_250_batches_keeps_every_batch_not_the_last_100():
    """The 10,000-row growth point: 1M records are 100 batches and more; Spark's
    recentProgress keeps the last 100 (numRecentProgressUpdates), the listener all."""
    pytest.importorskip("pyspark")
    spark = SimpleNamespace(streams=FakeStreams())
    reports = [report("r1", b) for b in range(250)]
    query = SimpleNamespace(runId="r1", recentProgress=reports[-100:])  # what Spark would keep
    with progress.recording(spark) as log:
        [listener] = spark.streams.added
        bus = threading.Thread(target=deliver, args=(listener, reports, "r1"))
        bus.start()
        batches = log.batches(query, timeout=10)
        bus.join()
    assert [b["batchId"] for b in batches] == list(range(250))
    assert batches[0]["durationMs"]["triggerExecution"] == 0  # the first batch is there
    assert spark.streams.removed == [listener]
    # Read the way the benchmarks read before: the first 150 batches are gone.
    assert [p["batchId"] for p in query.recentProgress][0] == 150


def test_another_querys_reports_and_idle_reports_are_left_out():
    log = progress.ProgressLog()
    for r in [report("r1", 0), report("other", 0), report("r1", 1, rows=0), report("r1", 1), report("r1", 2, 0)]:
        log.add(r)
    log.end("r1")
    batches = log.batches(SimpleNamespace(runId="r1", recentProgress=[]), timeout=1)
    assert [(b["batchId"], b["numInputRows"]) for b in batches] == [(0, 10_000), (1, 10_000)]
    assert log.count_with_rows("r1") == 2 and log.count_with_rows("other") == 1


def test_a_late_bus_is_made_up_from_recent_progress_and_a_gap_is_an_error():
    log = progress.ProgressLog()
    for b in range(120):
        log.add(report("r1", b))
    # The bus has not delivered batches 120..149 nor the end: recentProgress has them.
    query = SimpleNamespace(runId="r1", recentProgress=[report("r1", b) for b in range(50, 150)])
    assert [b["batchId"] for b in log.batches(query, timeout=0.05)] == list(range(150))
    # Listener and window both short: batches 120..129 are nowhere, said, not skipped.
    query = SimpleNamespace(runId="r1", recentProgress=[report("r1", b) for b in range(130, 230)])
    with pytest.raises(progress.ProgressLost, match=r"10 batch\(es\) \(120, 121, .* of 0..229"):
        log.batches(query, timeout=0.05)


def test_a_run_with_no_batch_has_no_figures():
    assert progress.complete([], 0, "r") == []


# ------------------------------------------------------------- Spark's jdbc peer

def test_the_jdbc_peer_runs_with_spark_defaults_and_tuned():
    pytest.importorskip("sqlalchemy")
    from sqlalchemy.engine import make_url

    runner = load("spark_jdbc_runner")
    url = make_url("postgresql://bench:secret@db:5433/orders")
    plain, properties = runner.jdbc_target(url)
    assert plain == "jdbc:postgresql://db:5433/orders"
    assert properties == {"user": "bench", "password": "secret", "driver": "org.postgresql.Driver"}
    tuned, properties = runner.jdbc_target(url, 10_000, True, 4)
    assert tuned == "jdbc:postgresql://db:5433/orders?reWriteBatchedInserts=true"
    assert (properties["batchsize"], properties["numPartitions"]) == ("10000", "4")
    args = runner.parse_args(["--bootstrap", "b", "--topic", "t", "--table", "x", "--batchsize", "10000",
                              "--rewrite-batched-inserts", "--num-partitions", "4"])
    assert (args.batchsize, args.rewrite_batched_inserts, args.num_partitions) == (10_000, True, 4)


def test_kafka_to_postgres_runs_both_jdbc_lines_each_into_its_table():
    pytest.importorskip("pyspark")
    k2p = load("kafka_to_postgres")
    default, tuned = k2p.spark_jdbc_contender(250_000), k2p.spark_jdbc_contender(250_000, tuned=True)
    assert (default.table, tuned.table) == ("bench_spark_jdbc", "bench_spark_jdbc_tuned")
    assert "defaults" in default.label and "tuned" in tuned.label
    argv = k2p.spark_jdbc_argv("b:1", "t", 250_000, 4, tuned=True)
    runner = load("spark_jdbc_runner").parse_args(argv)  # the runner takes every option given
    assert (runner.batchsize, runner.rewrite_batched_inserts, runner.num_partitions) == (10_000, True, 4)
    assert runner.table == "bench_spark_jdbc_tuned" and runner.topic == "t"
    assert "--batchsize" not in k2p.spark_jdbc_argv("b:1", "t", 250_000, 4, tuned=False)
    assert k2p.plain_script_contender(250_000).table == "bench_plain_script"
    cold = k2p.plain_script_contender(250_000, warm=False)
    assert cold.table == "bench_plain_script_cold" and "EOSKIT_WARM_START=0" in cold.label


def test_the_plain_script_runs_in_a_user_s_environment(monkeypatch):
    """No PYSPARK_PYTHON and no eoskit setting the benchmark's own session
    left behind (its startup hook decides, as for a user); the cold line
    turns the hook off and has the venv's bin first on PATH."""
    pytest.importorskip("pyspark")
    k2p = load("kafka_to_postgres")
    seen: list[dict] = []
    monkeypatch.setattr(k2p, "spark_runner", lambda label, runner, argv, env, **_: seen.append(env))
    for name in k2p.USER_UNSET:
        monkeypatch.setenv(name, "left-by-the-benchmark")
    k2p.plain_script_contender(1000).run("b:1", "postgresql://u@h/db", "t", 4)
    k2p.plain_script_contender(1000, warm=False).run("b:1", "postgresql://u@h/db", "t", 4)
    warm, cold = seen
    assert all(warm[name] is None and cold[name] is None for name in k2p.USER_UNSET)
    assert "EOSKIT_WARM_START" not in warm and cold["EOSKIT_WARM_START"] == "0"
    assert cold["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)


def test_the_plain_script_is_timed_from_its_process_start():
    pytest.importorskip("pyspark")
    report_ = importlib.import_module("benchlib.report")
    line = {"rows": 1000, "run_s": 4.0, "process_s": 10.0, "batch_rows": [500, 500], "batch_s": [3.0, 1.0]}
    query_only = report_.runner_figures(line)
    assert query_only["wall_s"] == 4.0 and query_only["rows_per_s"] == 250
    assert query_only["process_s"] == 10.0 and query_only["process_rows_per_s"] == 100
    whole = report_.runner_figures({**line, "timed": "process"})
    assert whole["wall_s"] == 10.0 and whole["rows_per_s"] == 100 and whole["steady_rows_per_s"] == 500


# ------------------------------------------------------- rotated peers in a script

def test_the_rotation_gives_each_round_another_first():
    peers_ = ["loop", "jdbc", "jdbc tuned", "plain", "eoskit"]
    orders = [rounds.rotated(peers_, r) for r in range(3)]
    assert [o[0] for o in orders] == ["loop", "jdbc", "jdbc tuned"]
    assert all(sorted(o) == sorted(peers_) for o in orders)
    assert rounds.rotated([], 2) == []


def _stubbed_harness(monkeypatch, calls: list[str]):
    harness, results = (importlib.import_module(f"benchlib.{m}") for m in ("harness", "results"))
    from eoskit.runtime.devtools.demo.orders import OrderTotals

    right = results.TableStats(1000, 1000, Decimal("5.00"), results.CREATED_AT, results.CREATED_AT)
    monkeypatch.setattr(harness, "LocalServices", lambda _dir: SimpleNamespace(up=lambda: SimpleNamespace(
        kafka_bootstrap="b:9092", postgres_url="postgresql://u@h/db")))
    monkeypatch.setattr(harness, "produce", lambda *a: (OrderTotals(1000, Decimal("5.00")), 0.1))
    monkeypatch.setattr(harness, "delete_topic", lambda *a: None)
    monkeypatch.setattr(harness, "spark_session", lambda master, extra=None: (
        calls.append("eoskit"), SimpleNamespace(stop=lambda: None))[1])
    monkeypatch.setattr(harness, "kafka_stream", lambda *a: None)
    monkeypatch.setattr(harness, "run_stream", lambda *a: results.StreamResult(
        rows=1000, wall_s=2.0, batches=2, batch_rows=[500, 500],
        durations_ms=[{"triggerExecution": 1500}, {"triggerExecution": 250}], failed_tasks=0))

    def peer(name: str, seconds: float, extra: dict | None = None):
        return lambda *a: (calls.append(name), results.BaselineResult(1000, seconds, results.Timings(),
                                                                       extra or {}))[1]

    def view(result):
        return [("flink_from_first_record", "from its first record",
                 results.BaselineResult(result.rows, result.extra["first_s"], results.Timings()))]

    target = harness.Target(
        sink="eoskit-postgres", baseline="loop", url_of=lambda e: e.postgres_url,
        reset_table=lambda *a: None, table_stats=lambda url, table: right,
        run_baseline=peer("loop", 0.5), writer=lambda url: None, transform=lambda raw: raw,
        contenders=(harness.Contender("a", "bench_a", peer("a", 1.0)),
                    harness.Contender("flink", "bench_flink", peer("flink", 4.0, {"first_s": 0.5}), views=view)))
    return harness, target


def test_run_benchmark_rotates_its_peers_and_reports_them_in_the_usual_order(monkeypatch, tmp_path):
    pytest.importorskip("pyspark")
    calls: list[str] = []
    harness, target = _stubbed_harness(monkeypatch, calls)
    out = tmp_path / "peers.json"
    args = harness.parse_args(["--records", "1000", "--json-out", str(out), "--rotate", "2"], "test")
    assert harness.run_benchmark(args, target) == 0
    assert calls == ["flink", "eoskit", "loop", "a"]  # the usual loop, a, flink, eoskit rotated 2 places
    found = [(p["id"], p["rows_per_s"], p["verified"]) for p in json.loads(out.read_text())]
    assert found == [("baseline", 2000, True), ("a", 1000, True), ("flink", 250, True),
                     ("flink_from_first_record", 2000, True), ("eoskit", 500, True)]
    assert harness.parse_args([], "test").rotate == 0
    calls.clear()
    assert harness.run_benchmark(harness.parse_args(["--records", "1000"], "test"), target) == 0
    assert calls == ["loop", "a", "flink", "eoskit"]


def test_peers_passes_its_round_to_the_scripts_that_rotate_and_runs_three_rounds(capsys):
    peers = load("peers")
    args = peers.parse_args(["--growth", "none", "--only", "kafka-postgres,kafka-kafka,latency"])
    assert args.rounds == 3
    assert "--rotate" not in peers.command("kafka-postgres", args, Path("x.json"), 0)
    assert peers.command("kafka-postgres", args, Path("x.json"), 2)[-2:] == ["--rotate", "2"]
    assert "--rotate" not in peers.command("latency", args, Path("x.json"), 2)
    kafka = peers.command("kafka-kafka", args, Path("x.json"), 1)
    assert "--flink-sql" in kafka and "--plain-script" in peers.command("kafka-postgres", args, Path("x"))


def test_the_plain_script_targets_compare_from_process_start():
    peers = load("peers")
    kp = "kafka-postgres"

    def rec(peer_id: str, **figures) -> dict:
        return {"peer": peer_id, "id": peer_id, "group": kp, "round": 1, "verified": True, **figures}
    results = {"rounds": 1, "groups": [kp], "runs": [], "peers": [
        rec("baseline", rows_per_s=100.0), rec("plain_script", rows_per_s=90.0, steady_rows_per_s=200.0),
        rec("spark_jdbc_tuned", rows_per_s=200.0, process_rows_per_s=50.0),
        rec("eoskit", rows_per_s=150.0)]}
    goals = {g.text: peers.evaluate(g, results)[0] for g in peers.GOALS if g.group == kp}
    assert goals["Kafka -> PostgreSQL: plain script / Spark jdbc tuned, both from process start"] == 1.8
    assert goals["Kafka -> PostgreSQL: plain script (from process start) / the plain loop"] == 0.9
    assert goals["Kafka -> PostgreSQL: plain script, steady, / the plain loop (whole run)"] == 2.0
    tuned = next(t for t in goals if "tuned (issue 33)" in t)
    assert goals[tuned] == 0.75


# ---------------------------------------------------------------------- PyFlink

def test_pyflink_is_timed_whole_and_from_its_first_record_or_its_jobs_start():
    flink_peer = load("flink_peer")
    results = importlib.import_module("benchlib.results")
    run = results.BaselineResult(1000, 20.0, results.Timings(), {"from_first_record_s": 5.0})
    [(view_id, label, view)] = flink_peer.first_record_view(run)
    assert view_id == "flink_from_first_record" and view.wall_s == 5.0 and view.rows == 1000
    assert "first record" in label
    assert flink_peer.first_record_view(results.BaselineResult(1000, 20.0, results.Timings(), {})) == []
    sql = results.BaselineResult(1000, 15.0, results.Timings(), {"from_job_start_s": 6.0})
    [(view_id, _, view)] = flink_peer.job_start_view(sql)
    assert view_id == "flink_sql_from_job_start" and view.wall_s == 6.0
    contender = flink_peer.flink_sql_contender(Path("/no/venv"), 1000)
    assert contender.table == "bench_flink_sql" and contender.views is flink_peer.job_start_view
    assert flink_peer.flink_contender(Path("/no/venv"), 1000).views is flink_peer.first_record_view


def test_the_sql_job_is_the_enrichment_in_sql_into_an_exactly_once_table():
    flink_runner, flink_peer = load("flink_runner"), load("flink_peer")
    from eoskit.runtime.devtools.demo import enrich

    command = flink_peer.runner_command(Path("/v/bin/python"), Path("/v/c.jar"), "h:1", "in", 10, "/e.py",
                                        sql=True)
    assert command[-1] == "--sql" and command[command.index("--output") + 1] == "bench_flink_sql"
    args = flink_runner.parse_args(command[2:])
    assert args.sql and args.output == "bench_flink_sql"
    source, sink, insert = flink_runner.sql_statements(args, "run-1", enrich)
    assert "'scan.bounded.mode' = 'latest-offset'" in source and "'format' = 'json'" in source
    assert "'properties.isolation.level' = 'read_committed'" in source
    assert "'sink.delivery-guarantee' = 'exactly-once'" in sink and "'key.fields' = 'k'" in sink
    assert "'sink.transactional-id-prefix' = 'run-1'" in sink and "'topic' = 'bench_flink_sql'" in sink
    assert "ROUND(CAST(amount AS DECIMAL(12, 2)) * 1.20, 2)" in insert
    assert ("CASE WHEN CAST(amount AS DECIMAL(12, 2)) >= 500.00 THEN 'gold' "
            "WHEN CAST(amount AS DECIMAL(12, 2)) >= 100.00 THEN 'silver' ELSE 'bronze' END") in insert
    assert flink_runner.literal("it's") == "'it''s'"
