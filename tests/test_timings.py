"""The span recorder (eoskit.core.timings): off by default, one JSON line
per span per process when on, and the per-batch aggregation the benchmarks print."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from eoskit.core import timings
from eoskit.twophase.contract import CommitMode
from eoskit.twophase.coordinator import Coordinator
from eoskit.twophase.decision_log import DecisionLog
from eoskit.twophase.task import write_task
from eoskit.core.timings import Span

# The fake sink of the protocol's own unit tests, loaded by path (tests is no package).
_spec = importlib.util.spec_from_file_location(
    "twophase_fakes", Path(__file__).with_name("test_twophase.py"))
fakes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fakes)  # type: ignore[union-attr]


@pytest.fixture
def recording(tmp_path, monkeypatch):
    target = tmp_path / "timings"
    target.mkdir()
    monkeypatch.setenv(timings.ENV, str(target))
    return target


def lines(target: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(target.glob("*.jsonl")) for line in f.read_text().splitlines()]


def test_off_by_default_records_nothing_and_returns_one_shared_noop(tmp_path, monkeypatch):
    monkeypatch.delenv(timings.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert not timings.enabled()
    assert timings.span("a", 1) is timings.span("b", 2)
    with timings.span("a", 1):
        timings.record("b", 3.0, 1, 0)
    assert list(tmp_path.iterdir()) == []


def test_a_span_writes_one_line_to_its_process_file_and_nested_spans_inherit_the_batch(recording):
    with timings.span("outer", 7, 2):
        with timings.span("inner"):
            pass
        timings.record("measured", 12.5)
    assert [p.name for p in recording.iterdir()] == [f"{os.getpid()}.jsonl"]
    rows = lines(recording)
    assert [(r["phase"], r["batch"], r["partition"], r["pid"]) for r in rows] == [
        ("inner", 7, 2, os.getpid()), ("measured", 7, 2, os.getpid()), ("outer", 7, 2, os.getpid())]
    assert rows[1]["ms"] == 12.5
    assert rows[2]["ms"] >= rows[0]["ms"] >= 0


def test_a_span_is_recorded_when_its_block_raises_and_the_error_is_untouched(recording):
    with pytest.raises(KeyError, match="boom"):
        with timings.span("failing", 1):
            raise KeyError("boom")
    assert [r["phase"] for r in lines(recording)] == ["failing"]


def test_an_unwritable_directory_never_fails_the_timed_code(tmp_path, monkeypatch):
    monkeypatch.setenv(timings.ENV, str(tmp_path / "missing"))
    with timings.span("a", 1):
        timings.record("b", 1.0)


def test_torn_lines_are_skipped_and_load_can_clear(recording):
    with timings.span("kept", 1, 0):
        pass
    with open(recording / "999.jsonl", "w") as handle:
        handle.write('{"batch": 1, "partition": 0, "phase": "x", "ms": 1.0, "pid": 999}\n{"batch": 1, "pa')
    spans = timings.load(str(recording), clear=True)
    assert sorted(s.phase for s in spans) == ["kept", "x"]
    assert list(recording.iterdir()) == []
    assert timings.load(str(recording / "nothing")) == []


def test_per_batch_takes_the_slowest_partition_of_per_partition_sums():
    spans = [
        Span(0, 0, "task.write", 10, 1), Span(0, 0, "task.write", 5, 1),  # partition 0: 15
        Span(0, 1, "task.write", 12, 2),                                  # partition 1: 12
        Span(0, None, "commit.decide", 3, 3),
        Span(1, 0, "task.write", 4, 1),
        Span(None, None, "plan.check", 99, 4),  # no batch: left out
    ]
    table = timings.per_batch(spans)
    assert table == {0: {"task.write": 15, "commit.decide": 3}, 1: {"task.write": 4}}
    # A phase missing from a batch counts as 0 ms in the median.
    assert timings.medians(table, [0, 1]) == {"commit.decide": 1.5, "task.write": 9.5}
    assert timings.medians(table, []) == {}


def test_the_protocol_records_its_task_and_commit_phases(recording, tmp_path):
    db = fakes.FakeDatabase()
    sink = fakes.FakeSink(db)
    decisions = DecisionLog(str(tmp_path / "checkpoint"), "s1")
    decisions.create()
    acks = [write_task(sink, decisions, CommitMode.TWOPHASE, iter(fakes.batches(p, p + 1)),
                       identity=(4, p, 0)) for p in range(2)]
    Coordinator(sink.committer(), decisions).commit(acks, 4)
    assert sorted(v for _, values in db.committed for v in values) == [0, 1, 1, 2]
    table = timings.per_batch(timings.load(str(recording)))
    assert set(table) == {4}
    assert {"task", "task.input", "task.read_decision", "task.write", "task.prepare",
            "commit.read_decision", "commit.list_prepared", "commit.decide",
            "commit.commit_prepared", "commit.roll_back_others", "commit.decision_applied",
            "commit.mark_done"} <= set(table[4])
    partitions = {s.partition for s in timings.load(str(recording)) if s.phase == "task.prepare"}
    assert partitions == {0, 1}


def test_reading_a_kafka_range_is_untouched_when_off(monkeypatch):
    """The reader returns its plain generator when recording is off."""
    from eoskit.connectors.kafka import reader
    from eoskit.connectors.kafka.schema import arrow_schema

    monkeypatch.delenv(timings.ENV, raising=False)
    generator = reader.read_range(reader.OffsetRange("t", 0, 0, 0), {}, arrow_schema(False), 1000, True)
    assert generator.__name__ == "_read_range"
    monkeypatch.setenv(timings.ENV, "/nonexistent")
    assert reader.read_range(reader.OffsetRange("t", 0, 0, 0), {}, arrow_schema(False), 1000, True).__name__ == "time_inside"
