"""`eoskit status` and `eoskit list` from what a run keeps beside its
checkpoint (runtime/cli/status.py, listeners.CheckpointStatus,
control.LocalRuns). Files only: the real run is in
integration_tests/test_cli_run.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from eoskit.runtime.cli.main import main
from eoskit.runtime.cli.errors import FAILED
from eoskit.runtime.job.control import ControlDir, LocalRuns
from eoskit.runtime.job.listeners import CheckpointStatus
from eoskit.runtime.cli.status import BARS, render, sparkline, view


def progress(batch: int, lag: int, rate: float) -> dict:
    return {"batchId": batch, "timestamp": "2026-11-26T22:00:00.000Z", "inputRowsPerSecond": rate,
            "processedRowsPerSecond": rate * 2, "durationMs": {"triggerExecution": 120},
            "sources": [{"description": "KafkaV2[Subscribe[t]]", "endOffset": {"t": {"0": 10}},
                         "latestOffset": {"t": {"0": 10 + lag}}}]}


class Recorder:
    """A fake of ControlDir's status store."""

    def __init__(self) -> None:
        self.written: list[dict] = []

    def write_status(self, state: dict) -> None:
        self.written.append(json.loads(json.dumps(state)))


def test_sparkline_scales_between_the_least_and_the_greatest():
    assert sparkline([0, 5, 10]) == BARS[0] + BARS[4] + BARS[-1]
    assert sparkline([3, None, 3]) == BARS[0] + " " + BARS[0]
    assert sparkline([None]) == ""


def test_progress_is_written_at_most_once_a_second_and_state_changes_at_once(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("eoskit.runtime.job.listeners.time.time", lambda: clock[0])
    recorder = Recorder()
    status = CheckpointStatus(recorder)
    status.on_start("orders", "/ck")
    for batch in range(5):  # five batches within the same second: one write
        status.on_progress(progress(batch, lag=4 - batch, rate=100.0))
    assert len(recorder.written) == 1 and recorder.written[0]["state"] == "running"
    clock[0] += 1.5
    status.on_progress(progress(5, lag=0, rate=100.0))
    assert len(recorder.written) == 2 and recorder.written[-1]["batches"] == 6
    status.on_restart(1, "broker gone", 1.0)
    status.on_end(None)
    assert [w["state"] for w in recorder.written[2:]] == ["restarting", "finished"]
    assert recorder.written[-1]["restarts"] == 1 and recorder.written[-1]["last_batch"] == 5


def test_progress_held_back_by_the_bound_is_written_by_the_next_flush(monkeypatch):
    """Two batches in one second, then an idle job: the run loop's flush
    writes the second once the bound has passed, and nothing more after;
    the same in each of several periods of the bound, as a job that runs
    for weeks goes through them."""
    clock = [1000.0]
    monkeypatch.setattr("eoskit.runtime.job.listeners.time.time", lambda: clock[0])
    recorder = Recorder()
    status = CheckpointStatus(recorder)
    status.on_start("orders", "/ck")
    expected = [0]
    for period in range(4):
        clock[0] += 5.0  # idle since the last write: the first batch is written at once
        status.on_progress(progress(2 * period, lag=1, rate=100.0))
        status.on_progress(progress(2 * period + 1, lag=0, rate=100.0))
        status.flush()  # within the bound: held
        expected.append(2 * period + 1)
        assert [w["batches"] for w in recorder.written] == expected, f"period {period}"
        clock[0] += CheckpointStatus.EVERY_S
        status.flush()
        status.flush()
        expected.append(2 * period + 2)
        assert [w["batches"] for w in recorder.written] == expected, f"period {period}"
        assert recorder.written[-1]["last_batch"] == 2 * period + 1


def test_a_run_s_state_as_status_shows_it(tmp_path):
    control = ControlDir(str(tmp_path))
    assert view(control) is None
    control.write_status({"state": "running", "job": "orders", "batches": 3, "last_batch": 41,
                          "total_lag": 1500, "lag": {"t-0": 1000, "t-1": 500}, "updated": 1.0})
    # No live run record: the run ended without a word (killed).
    assert view(control)["state"] == "not running"
    record = control.claim("orders")
    try:
        shown = view(control)
        assert shown["state"] == "running" and shown["live"] and shown["run"]["pid"] == os.getpid()
        lines = render(shown, now=5.0)
        assert lines[0].startswith(f"job orders on {control.checkpoint}: running (pid {os.getpid()}")
        assert "  lag          1,500 records (t-0 1,000, t-1 500)" in lines
    finally:
        record.release()
    control.write_status({"state": "failed", "failure": "PostgreSQL refused a row", "job": "orders"})
    shown = view(control)
    assert shown["state"] == "failed" and "  failure      PostgreSQL refused a row" in render(shown)


def test_status_verb(tmp_path, capsys):
    code = main(["status", "--checkpoint-dir", str(tmp_path)])
    assert code == FAILED and "no eoskit run has kept a status" in capsys.readouterr().err
    control = ControlDir(str(tmp_path))
    control.write_status({"state": "finished", "job": "orders", "batches": 7, "total_lag": 0})
    assert main(["status", "--checkpoint-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"job orders on {control.checkpoint}: finished") and "batches      7 this run" in out
    assert main(["status", "--checkpoint-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "finished"


def test_watch_draws_the_samples_it_has_seen_and_stops_when_the_run_is_not_live(tmp_path):
    """A run that is live (this process holds the run record) and changes
    between refreshes; --count ends the watch."""
    control = ControlDir(str(tmp_path))
    record = control.claim("orders")
    # A second between refreshes, and each new status written as soon as a
    # block is read: the watcher samples each status once however slowly it
    # started (a busy machine once let it start after all the writes).
    script = (f"import sys; from eoskit.runtime.cli.main import main; "
              f"sys.exit(main(['status', '--checkpoint-dir', {str(tmp_path)!r}, '--watch', '1', '--count', '4']))")

    def read_block(stream) -> None:
        while stream.readline() not in ("\n", ""):
            pass

    try:
        control.write_status({"state": "running", "job": "orders", "total_lag": 100,
                              "processed_rows_per_second": 10})
        watcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        for lag in (80, 40, 0):
            read_block(watcher.stdout)
            record.beat()
            control.write_status({"state": "running", "job": "orders", "total_lag": lag,
                                  "processed_rows_per_second": 100 - lag})
        out, _ = watcher.communicate(timeout=30)
    finally:
        record.release()
    assert watcher.returncode == 0
    blocks = [b for b in out.split("\n\n") if b.strip()]
    assert len(blocks) == 1  # the last; the three before it were read above
    lag_line = [line for line in blocks[-1].splitlines() if line.startswith("  lag          ") and "records" not in line]
    bars = lag_line[0].removeprefix("  lag          ")
    assert len(bars) == 4 and bars[0] == BARS[-1] and bars[-1] == BARS[0]  # lag fell to 0


def test_list_shows_this_machine_s_live_runs_and_drops_dead_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EOSKIT_RUNS_DIR", str(tmp_path / "runs"))
    runs = LocalRuns()
    assert main(["list"]) == 0 and "no eoskit job is running" in capsys.readouterr().out
    checkpoint = tmp_path / "ck"
    checkpoint.mkdir()
    ControlDir(str(checkpoint)).write_status({"state": "running", "job": "orders", "batches": 12,
                                              "total_lag": 3})
    mine = runs.add(str(checkpoint), "orders")
    dead = tmp_path / "runs" / "999999999.json"
    dead.write_text(json.dumps({"pid": 999999999, "checkpoint": "/gone", "job": "old"}))
    assert main(["list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["pid"], r["job"], r["batches"]) for r in listed] == [(os.getpid(), "orders", 12)]
    assert not dead.exists()
    assert main(["list"]) == 0
    table = capsys.readouterr().out
    assert "orders" in table and str(checkpoint) in table
    LocalRuns.remove(mine)
    assert runs.running() == []


@pytest.mark.parametrize("argv", [["status"], ["list"]])
def test_the_verbs_start_no_spark(argv, tmp_path, capsys):
    """tests/conftest.py fails a unit test that starts Spark."""
    main([*argv, "--checkpoint-dir", str(tmp_path)] if argv == ["status"] else argv)


def test_a_run_where_the_runs_folder_cannot_be_written_goes_on_unlisted(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert LocalRuns(str(blocked / "runs")).add("/ck", "orders") is None
