"""The chaos command's report (issue 24): text, JSON and HTML say the same
facts; values are escaped in HTML; the exit code follows the verdict."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from eoskit.runtime.devtools.chaos.compare import compare, nondeterministic_columns
from eoskit.runtime.devtools.chaos.plan import Fault
from eoskit.runtime.devtools.chaos.report import (NONDETERMINISM_HINT, BatchEvent, ChaosReport, FaultEvent,
                                         OutputResult, RestartEvent)

COLUMNS = ("id", "name", "amount", "ts")
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
ROWS = [(i, f"n{i}", Decimal(i), START) for i in range(20)]
FAULT = Fault(1, "driver", 2, 0.25)


def timeline() -> list:
    events: list = [BatchEvent(n, START + timedelta(seconds=n)) for n in range(6)]
    events += [FaultEvent(FAULT, START + timedelta(seconds=2.25)),
               RestartEvent(START + timedelta(seconds=3.5))]
    return events


def exact_report() -> ChaosReport:
    return ChaosReport("jobs/orders.py", 42, [
        OutputResult("table public.orders", compare(ROWS, ROWS, COLUMNS), compare(ROWS, ROWS, COLUMNS))],
        timeline=timeline())


def different_report() -> ChaosReport:
    evil = (99, "<script>alert(1)</script>", Decimal("1.5"), START)
    chaos = ROWS + [ROWS[3]] + [evil]
    second = [(*row[:3], row[3] + timedelta(hours=1)) for row in ROWS]
    return ChaosReport(
        "jobs/<orders>.py", 7,
        [OutputResult("table public.orders", compare(ROWS, chaos, COLUMNS, key=["id"]),
                      compare(ROWS, second, COLUMNS),
                      tuple(nondeterministic_columns(ROWS, second, COLUMNS))),
         OutputResult("topic orders", compare(ROWS, ROWS, COLUMNS))],
        timeline=timeline(), first_difference_after=FAULT, first_difference_batch=3,
        notes=["database faults skipped: the sink's database is not eoskit's dev service"])


def test_exit_codes():
    assert exact_report().exact and exact_report().exit_code() == 0
    report = different_report()
    assert not report.exact and report.exit_code() == 1


def test_a_nondeterministic_job_is_not_exact_even_when_the_chaos_run_matches():
    second = [(*row[:3], row[3] + timedelta(hours=1)) for row in ROWS]
    output = OutputResult("path s3://b/x", compare(ROWS, ROWS, COLUMNS), compare(ROWS, second, COLUMNS),
                          ("ts",))
    assert output.comparison.exact and output.deterministic is False and not output.exact
    assert ChaosReport("job.py", 1, [output]).exit_code() == 1
    assert output.hint() == (f"path s3://b/x: column ts differs between two runs without faults: "
                             f"{NONDETERMINISM_HINT.format(them='it')}")
    assert "Compute it from the record" in output.hint()


def test_text_lists_outputs_examples_and_the_hint():
    text = different_report().to_text()
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("output"))
    row = next(line for line in lines if line.startswith("table public.orders"))
    assert row.index("different") == header.index("verdict")  # aligned under its header
    assert "not deterministic" in row
    assert "1 duplicated row" in text and "1 unexpected row" in text
    assert "first difference by batch 3, after fault 1 (driver): 0.250 s after batch 2 commits" in text
    assert "database faults skipped" in text
    assert "column ts differs between two runs without faults" in text
    assert "the two-phase commit mode, which writes each batch once" in text
    assert lines[-1] == "different: 1 of 2 outputs differ"
    assert exact_report().to_text().splitlines()[-1].startswith("exact:")


def test_text_shows_at_most_ten_examples():
    chaos = ROWS + ROWS  # 20 duplicated rows
    text = ChaosReport("j.py", 1, [OutputResult("topic t", compare(ROWS, chaos, COLUMNS))]).to_text()
    assert "20 duplicated rows (10 shown)" in text
    block = text.split("20 duplicated rows (10 shown)\n")[1].split("\n\n")[0].splitlines()
    assert block[0].split() == ["id", "name", "amount", "ts", "reference", "chaos"]
    assert len(block) == 1 + 10


def test_json_round_trips_with_stable_keys():
    report = different_report()
    text = report.to_json()
    loaded = json.loads(text)
    assert text == report.to_json()
    assert loaded["exact"] is False and loaded["exit_code"] == 1 and loaded["seed"] == 7
    orders = loaded["outputs"][0]
    assert orders["comparison"]["duplicated"] == {
        "count": 1, "examples": [{"row": [3, "n3", "3", START.isoformat()], "reference": 1, "chaos": 2}]}
    assert orders["comparison"]["unexpected"]["count"] == 1
    assert orders["nondeterministic_columns"] == ["ts"]
    assert orders["determinism"]["verdict"] == "different"
    assert loaded["outputs"][1]["determinism"] is None
    assert loaded["timeline"][0] == {"kind": "batch", "batch": 0, "time": "2026-03-01T12:00:00+00:00"}
    fault = {"index": 1, "kind": "driver", "after_batch": 2, "delay_s": 0.25, "step": None, "down_s": 0.0,
             "cut": None}
    assert {"kind": "fault", "time": "2026-03-01T12:00:02.250000+00:00", "fault": fault, "landed": "",
            "window": "a moment after a batch's commit"} in loaded["timeline"]
    assert loaded["first_difference_after"]["kind"] == "driver" and loaded["first_difference_batch"] == 3
    assert list(loaded) == sorted(loaded)


def test_json_values_without_a_json_type():
    rows = [(b"\x00k", float("nan"), {"a": [1, 2]})]
    report = ChaosReport("j.py", 1, [OutputResult("topic t", compare([], rows, ("key", "x", "doc")))])
    loaded = json.loads(report.to_json())
    assert loaded["outputs"][0]["comparison"]["unexpected"]["examples"][0]["row"] == [
        "b'\\x00k'", "nan", {"a": [1, 2]}]


def test_html_is_self_contained_escaped_and_has_a_timeline():
    page = different_report().to_html()
    assert page.startswith("<!DOCTYPE html>")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "jobs/&lt;orders&gt;.py" in page
    assert "<svg" in page and "</svg>" in page and "<circle" in page  # the fault's dot
    assert "restart" in page
    assert "src=" not in page and "href=" not in page and "<link" not in page
    assert "sink&#x27;s database" in page
    assert "No timeline was recorded" in ChaosReport("j.py", 1, []).to_html()


def test_the_report_says_which_windows_of_the_protocol_the_faults_hit():
    from eoskit.core import crash

    aimed = Fault(2, "driver", 3, 0.1, crash.DRIVER_AFTER_TASK_COMMIT)
    missed = Fault(3, "driver", 4, 0.2, crash.DRIVER_AFTER_DECISION)
    cut = Fault(4, "network", 5, 0.3, None, 2.5, "lost replies")
    report = ChaosReport("job.py", 1, [OutputResult("t", compare(ROWS, ROWS, COLUMNS))], timeline=[
        FaultEvent(aimed, START, f"at {crash.DRIVER_AFTER_TASK_COMMIT}"),
        FaultEvent(missed, START, "the step did not come: 0.200 s after batch 5"),
        FaultEvent(cut, START, "0.300 s after batch 5; the job's host and postgres: lost replies for 2.500 s")])
    assert report.windows() == ["a task committed by itself, its batch not yet recorded (1)",
                                "a moment after a batch's commit (1)",
                                "the network to the sink's server cut (lost replies) (1)"]
    assert "windows hit: a task committed by itself, its batch not yet recorded (1); " in report.to_text()
    data = json.loads(report.to_json())
    assert data["windows"] == report.windows()
    assert data["timeline"][2]["fault"]["cut"] == "lost replies" and data["timeline"][0]["landed"].startswith("at ")
