"""The run loop and Spark's listener bus (issue 32's plug-in trial: a
``Py4JException`` from ``StreamingQueryListenerBus`` after the summary of
clean ``eoskit run --until-caught-up`` runs).

The bus delivers a query's events on a JVM thread of its own, through py4j
callbacks into the driver's Python, behind the query. A run that ended soon
after its query removed the listener and ended the process while the bus
was still inside a callback. Here the bus is a thread that runs ``LAG_S``
behind a query that is over at once; the rest is the real runner."""

from __future__ import annotations

import io
import json
import threading
import time
from types import SimpleNamespace

from eoskit.runtime.job import runner as runner_module
from eoskit.runtime.job.runner import Runner
from eoskit.runtime.job.settings import JobSettings

LAG_S = 0.3

#: The session's application, as the run records it.
CONTEXT = SimpleNamespace(applicationId="local-1", master="local[1]")


class FakeBus:
    """``spark.streams`` as the runner uses it, and Spark's listener bus:
    ``post`` delivers events ``LAG_S`` later on a thread of its own, to the
    listeners registered then, each callback in turn; ``log`` is what
    happened, in order."""

    def __init__(self) -> None:
        self.listeners: list = []
        self.log: list[str] = []
        self.in_callback = 0
        self.threads: list[threading.Thread] = []

    def addListener(self, listener) -> None:  # noqa: N802 - PySpark's name
        self.listeners.append(listener)

    def removeListener(self, listener) -> None:  # noqa: N802 - PySpark's name
        self.log.append("removed during a callback" if self.in_callback else "removed")
        self.listeners.remove(listener)

    def post(self, *events: tuple[str, object]) -> None:
        def deliver() -> None:
            time.sleep(LAG_S)
            for method, event in events:
                for listener in list(self.listeners):
                    self.in_callback += 1
                    try:
                        getattr(listener, method)(event)
                    finally:
                        self.in_callback -= 1
                    self.log.append(method)

        thread = threading.Thread(target=deliver, daemon=True)
        thread.start()
        self.threads.append(thread)


class CaughtUpQuery:
    """An availableNow query that read one batch and is over at once: its
    progress and its end are still on their way through the bus."""

    runId = "run-1"
    isActive = False
    status = {"isTriggerActive": False}
    recentProgress: list = []

    def __init__(self, bus: FakeBus, name: str) -> None:
        progress = {"name": name, "runId": self.runId, "batchId": 0, "numInputRows": 5}
        self.lastProgress = progress
        bus.post(("onQueryProgress", SimpleNamespace(progress=SimpleNamespace(json=json.dumps(progress)))),
                 ("onQueryTerminated", SimpleNamespace(runId=self.runId)))

    def awaitTermination(self) -> None:  # noqa: N802 - PySpark's name
        pass

    def exception(self) -> None:
        return None


class Pipeline:
    name = "orders"
    chained = False
    source = None

    def __init__(self, bus: FakeBus) -> None:
        self.bus = bus

    def start(self, spark, checkpoint, until_caught_up, settings, stop_gate=None):
        return CaughtUpQuery(self.bus, self.name)


def test_a_run_until_caught_up_ends_after_the_bus_delivered_its_query_end(tmp_path, monkeypatch):
    """The listener is removed (and the process may end) only once the bus
    has delivered the query's last events and left the callback; the batch
    came to the views through the listener."""
    monkeypatch.setenv("EOSKIT_RUNS_DIR", str(tmp_path / "runs"))
    bus = FakeBus()
    out = io.StringIO()
    runner = Runner(Pipeline(bus), str(tmp_path / "ck"), SimpleNamespace(streams=bus, sparkContext=CONTEXT),
                    JobSettings.of(), out, until_caught_up=True)
    summary = runner.run()
    for thread in bus.threads:
        thread.join(5)
    assert bus.log == ["onQueryProgress", "onQueryTerminated", "removed"], bus.log
    assert summary.batches == 1 and "[orders] batch 0: 5 rows" in out.getvalue()


def test_a_bus_that_never_delivers_the_end_costs_the_wait_and_no_more(tmp_path, monkeypatch, caplog):
    """An end event lost (a full queue drops events) does not hold the run:
    it goes on after ``LISTENER_DRAIN_S``, saying so."""
    monkeypatch.setenv("EOSKIT_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(runner_module, "LISTENER_DRAIN_S", 0.2)
    bus = FakeBus()
    bus.post = lambda *events: None  # nothing is ever delivered
    runner = Runner(Pipeline(bus), str(tmp_path / "ck"), SimpleNamespace(streams=bus, sparkContext=CONTEXT),
                    JobSettings.of(), io.StringIO(), until_caught_up=True)
    started = time.monotonic()
    runner.run()
    assert 0.2 <= time.monotonic() - started < 5
    assert bus.log == ["removed"]
    # A warning of eoskit's logger: on stderr, or a JSON line with --log-format json.
    assert "Spark's listener was not told of the query's end within 0.2 s" in caplog.text


def test_without_the_summary_lines_the_run_returns_the_summary_run_json_prints(tmp_path, monkeypatch):
    """``eoskit run --json``: the text summary is left out, the returned
    summary is one JSON object with what the text said."""
    monkeypatch.setenv("EOSKIT_RUNS_DIR", str(tmp_path / "runs"))
    bus = FakeBus()
    out = io.StringIO()
    runner = Runner(Pipeline(bus), str(tmp_path / "ck"), SimpleNamespace(streams=bus, sparkContext=CONTEXT),
                    JobSettings.of(), out, until_caught_up=True, print_summary=False)
    summary = runner.run()
    assert "[orders] batch 0: 5 rows" in out.getvalue() and "done:" not in out.getvalue()
    printed = json.loads(json.dumps(summary.to_json("orders", str(tmp_path / "ck"))))
    assert {k: printed[k] for k in ("job", "batches", "rows", "first_batch", "last_batch",
                                    "restarts", "failed_batches", "in_doubt_committed")} == {
        "job": "orders", "batches": 1, "rows": 5, "first_batch": 0, "last_batch": 0,
        "restarts": 0, "failed_batches": 0, "in_doubt_committed": 0}
    assert printed["checkpoint"] == str(tmp_path / "ck") and printed["seconds"] >= 0
