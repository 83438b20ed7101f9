"""``eoskit state inspect | read`` and ``savepoint inspect --state`` on real
checkpoints: a running count on the hash map backend, and a
``transformWithState`` with a list and a value state on RocksDB."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from eoskit.runtime import Pipeline
from eoskit.runtime.cli.main import main
from eoskit.runtime.job.jobfile import load_module
from eoskit.runtime.state.savepoints import create_savepoint
from eoskit.runtime.state.inspection import StateInspectError, read_state, summarize

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "keyed_state.py"


@pytest.fixture(scope="module")
def checkpoints(spark, tmp_path_factory, json_files_type, gathered):
    """(hash map checkpoint, RocksDB transformWithState checkpoint)."""
    JsonFiles, Gathered = json_files_type, gathered  # noqa: N806
    examples = load_module(EXAMPLES, "eoskit_examples_keyed_state")
    base = tmp_path_factory.mktemp("state")
    words = JsonFiles(base / "words", "word string")
    words.add(*({"word": w} for w in "a b a c a".split()))
    Pipeline("counts", words, Gathered(), transform=lambda df: df.groupBy("word").agg(F.count("*").alias("n"))
             ).run(base / "counts", until_caught_up=True, spark=spark, out=io.StringIO())
    events = JsonFiles(base / "events", "device string, seq long, kind string, value long")
    events.add({"device": "d1", "seq": 1, "kind": "start"}, {"device": "d1", "seq": 2, "kind": "reading", "value": 5},
               {"device": "d1", "seq": 3, "kind": "reading", "value": 6}, {"device": "d2", "seq": 1, "kind": "start"})
    Pipeline("sessions", events, Gathered(), transform=examples.sessions_between_markers,
             state_backend="rocksdb").run(base / "tws", until_caught_up=True, spark=spark, out=io.StringIO())
    return str(base / "counts"), str(base / "tws")


def test_inspect_summarises_operators_stores_keys_and_bytes(spark, checkpoints):
    counts, tws = checkpoints
    summary = summarize(spark, counts)
    assert summary.backend == "hashmap" and summary.batch == 0
    assert [(r.operator_id, r.store, r.variable, r.partitions, r.keys, r.entries) for r in summary.rows] == [
        (0, "default", None, 2, 3, 3)]
    assert summary.bytes[0] > 0
    summary = summarize(spark, tws)
    assert summary.backend == "rocksdb"
    assert [(r.variable, r.kind, r.ttl, r.partitions, r.keys, r.entries) for r in summary.rows] == [
        ("buffer", "ListState", False, 2, 1, 2), ("open", "ValueState", False, 2, 2, 2)]


def test_read_gives_keys_and_values_of_a_store_or_state_variable(spark, checkpoints):
    counts, tws = checkpoints
    rows = read_state(spark, counts, 0, key=["a"])
    assert [(r["key"], r["value"]) for r in rows] == [({"word": "a"}, {"count": 3})]  # the aggregate buffer
    rows = read_state(spark, tws, 0, variable="buffer", key=["device=d1"])
    assert [(r["key"], r["list_element"]) for r in rows] == [
        ({"device": "d1"}, {"seq": 2, "value": 5}), ({"device": "d1"}, {"seq": 3, "value": 6})]
    with pytest.raises(StateInspectError, match="runs without timers"):
        read_state(spark, tws, 0, timers=True)


@pytest.mark.parametrize("which, kwargs, message", [
    (0, {"operator": 7}, "has no stateful operator 7; its stateful operators: 0 (stateStoreSave, store default)"),
    (1, {"operator": 0}, "is a transformWithState operator: name one of its state variables with --state-var (buffer, open)"),
    (1, {"operator": 0, "variable": "nope"}, "has no state variable 'nope'"),
    (0, {"operator": 0, "variable": "open"}, "is not a transformWithState operator"),
    (0, {"operator": 0, "key": ["colour=red"]}, "has no key column 'colour'; its key columns: word"),
])
def test_bad_reads_are_refused_naming_what_is_wrong(spark, checkpoints, which, kwargs, message):
    with pytest.raises(StateInspectError) as err:
        read_state(spark, checkpoints[which], kwargs.pop("operator"), **kwargs)
    assert message in str(err.value)


def test_the_cli_prints_the_summary_and_the_rows(checkpoints, capsys):
    counts, tws = checkpoints
    assert main(["state", "inspect", tws]) == 0
    out = capsys.readouterr().out
    assert "state backend   rocksdb" in out and "transformWithStateInPySparkExec" in out and "ListState" in out
    assert main(["state", "read", tws, "--operator", "0", "--state-var", "open", "--key", "d2", "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["value"] == {"open": True}
    assert main(["state", "read", counts, "--operator", "3"]) == 2
    assert "eoskit state read: checkpoint" in capsys.readouterr().err


def test_savepoint_inspect_shows_the_same_state_summary(checkpoints, tmp_path, capsys):
    _, tws = checkpoints
    create_savepoint(tws, str(tmp_path / "sp"), job_name="sessions")
    moved = shutil.copytree(tws, tmp_path / "elsewhere")
    shutil.rmtree(tws)  # the savepoint alone: its schema paths name a checkpoint that is gone
    try:
        assert main(["savepoint", "inspect", str(tmp_path / "sp"), "--state", "--json"]) == 0
        state = json.loads(capsys.readouterr().out)["state"]
        assert [(s["variable"], s["kind"], s["keys"]) for s in state["stores"]] == [
            ("buffer", "ListState", 1), ("open", "ValueState", 2)]
        assert state["backend"] == "rocksdb" and state["batch"] == 0
    finally:
        shutil.copytree(moved, tws)
