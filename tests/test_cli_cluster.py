"""``eoskit list --cluster`` and ``eoskit cancel`` without a job, and the
arguments a job file takes under spark-submit (``pipeline.main()``); the
runs themselves are integration_tests/test_spark_submit.py."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from eoskit.runtime.cli.main import main
from eoskit.runtime.cli.status import with_cluster_apps

APPS = [{"id": "app-1", "name": "orders", "state": "RUNNING", "starttime": 1_700_000_000_000},
        {"id": "app-2", "name": "adhoc", "state": "RUNNING", "starttime": 1_700_000_100_000}]


def test_this_machine_s_runs_are_matched_to_the_cluster_s_applications():
    ours = [{"pid": 42, "app": "app-1", "job": "orders", "checkpoint": "/ck/orders", "state": "running",
             "batches": 3, "last_batch": 2, "total_lag": 0, "processed_rows_per_second": 10.0}]
    rows = with_cluster_apps([dict(r) for r in ours], APPS)
    assert rows[0] == ours[0]  # matched by id: listed once, as this machine knows it
    assert [(r["app"], r["job"], r["pid"], r["checkpoint"]) for r in rows[1:]] == [("app-2", "adhoc", None, None)]
    assert rows[1]["state"] == "running (not run from this machine)"


@pytest.fixture
def master_ui():
    """A web server answering ``/json/`` as a standalone master's web UI does."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            body = json.dumps({"status": "ALIVE", "activeapps": APPS}).encode()
            self.send_response(200 if self.path == "/json/" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_list_shows_the_cluster_s_applications(master_ui, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EOSKIT_RUNS_DIR", str(tmp_path / "runs"))  # no run on this machine
    assert main(["list", "--cluster", master_ui, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["app"], r["job"]) for r in rows] == [("app-1", "orders"), ("app-2", "adhoc")]


@pytest.mark.parametrize("given, code, says", [
    ("spark://127.0.0.1:7077", 2, "give the master's web UI"),
    ("http://127.0.0.1:9", 3, "cannot be read"),
])
def test_list_names_a_bad_or_unreachable_master(given, code, says, capsys):
    assert main(["list", "--cluster", given]) == code
    assert says in capsys.readouterr().err.splitlines()[0]


def test_cancel_needs_a_running_job(tmp_path, capsys):
    (tmp_path / "ck").mkdir()
    assert main(["cancel", "--checkpoint-dir", str(tmp_path / "ck")]) == 1
    assert "no job is running on checkpoint" in capsys.readouterr().err


def test_a_submitted_job_file_refuses_spark_submit_s_own_options(capsys):
    from eoskit.runtime.cli.main import submit_main

    class Named:
        name = "orders"

    with pytest.raises(SystemExit) as exited:
        submit_main(Named(), "job.py", ["--checkpoint-dir", "/ck", "--master", "local[2]"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --master" in capsys.readouterr().err
