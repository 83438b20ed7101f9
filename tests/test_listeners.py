"""The listener seam's views (``eoskit.runtime.job.listeners``, ``progress``):
what reaches the status file, the Prometheus endpoint and the run summary.
Fed by hand here; integration_tests/test_runtime_ops.py feeds them from a
real run."""

from __future__ import annotations

import json
import socket
import urllib.request
from io import StringIO

from eoskit.runtime.job.listeners import Listeners, PrometheusMetrics, StatusFile
from eoskit.runtime.job.progress import ProgressPrinter


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_in_doubt_transactions_settled_reach_every_view(tmp_path):
    status = StatusFile(str(tmp_path / "status.json"))
    printer = ProgressPrinter("orders", StringIO())
    port = free_port()
    metrics = PrometheusMetrics(port)
    seam = Listeners(printer, status, metrics)
    seam.on_start("orders", str(tmp_path / "ck"))
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'eoskit_in_doubt_transactions_settled_total{eoskit_job="orders",outcome="committed"} 0.0' in text
    seam.on_in_doubt_settled(3, 1)
    seam.on_in_doubt_settled(0, 2)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'eoskit_in_doubt_transactions_settled_total{eoskit_job="orders",outcome="committed"} 3.0' in text
    assert 'eoskit_in_doubt_transactions_settled_total{eoskit_job="orders",outcome="rolled_back"} 3.0' in text
    seam.on_end(None)
    state = json.loads((tmp_path / "status.json").read_text())
    assert (state["in_doubt_settled"], state["in_doubt_committed"], state["in_doubt_rolled_back"]) == (6, 3, 3)
    assert "recovery settled 4 in-doubt transaction(s): 3 committed, 1 rolled back" in printer.out.getvalue()
    assert "in-doubt transactions settled 6 (3 committed, 3 rolled back)" in printer.summary.render("orders")
    assert seam.parts == [printer, status, metrics]  # none failed


def test_each_batch_reaches_every_view_once_whichever_way_it_came(tmp_path):
    """Spark's listener and the runner's read of recentProgress at the end
    (events still queued when a short run ended) may both bring a batch: the
    status file counts it once, and one that came only the second way is
    there (a resumed run once finished with no lag in its status file)."""
    status = StatusFile(str(tmp_path / "status.json"))
    printer = ProgressPrinter("orders", StringIO())
    seam = Listeners(printer, status)
    seam.on_start("orders", str(tmp_path / "ck"))

    def batch(run: str, n: int, lag: int) -> dict:
        return {"runId": run, "batchId": n, "numInputRows": 10, "sources": [{
            "endOffset": json.dumps({"t": {"0": 100 - lag}}), "latestOffset": json.dumps({"t": {"0": 100}})}]}

    seam.on_progress(batch("r1", 0, 50))
    seam.on_progress(batch("r1", 0, 50))  # again, from recentProgress
    seam.on_progress(batch("r1", 1, 0))  # only from recentProgress
    seam.on_progress(batch("r2", 1, 0))  # the same batch replayed by a restarted run
    state = json.loads((tmp_path / "status.json").read_text())
    assert state["batches"] == 3 and state["last_batch"] == 1
    assert state["total_lag"] == 0


def test_a_run_of_weeks_keeps_the_printer_flat():
    """30,000 batches (8 hours at a 1 s trigger): the printer keeps the last
    batch id, not every one, and the last DURATIONS_KEPT batch durations."""
    from eoskit.runtime.job.progress import DURATIONS_KEPT

    printer = ProgressPrinter("orders", StringIO())
    for n in range(30_000):
        printer.observe({"batchId": n, "numInputRows": 1, "durationMs": {"triggerExecution": n % 7}})
    printer.observe({"batchId": 29_999, "numInputRows": 1})  # a repeat is not counted
    summary = printer.summary
    assert summary.batches == 30_000 and summary.last_batch == 29_999
    assert len(summary.batch_ms) == DURATIONS_KEPT
    assert f"(last {DURATIONS_KEPT} batches)" in summary.render("orders")
    assert vars(printer).keys() == {"name", "bar", "out", "summary", "_last_batch"}
