"""``eoskit state rescale``'s checks and its journal (``eoskit.runtime.state.rescale``),
without Spark: synthetic checkpoints laid out as Spark 4 writes them (the
tree builder of tests/test_checkpoints.py). The repartition itself runs in
integration_tests/test_state_rescale.py."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

from eoskit.runtime.state.checkpoints import Checkpoint
from eoskit.runtime.cli.main import main
from eoskit.runtime.job.control import ControlDir
from eoskit.runtime.state.rescale import (
    JOURNAL,
    RescaleError,
    RescaleFailed,
    _listing,
    _write_journal,
    finish_unfinished,
    plan,
    refuse_unfinished,
    require_spark,
    roll_back,
)

_spec = importlib.util.spec_from_file_location("checkpoint_trees", Path(__file__).with_name("test_checkpoints.py"))
trees = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trees)  # type: ignore[union-attr]


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HASHMAP = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def with_partitions(tree, batches: range, partitions: int, provider: str = ROCKSDB) -> None:
    """Record ``spark.sql.shuffle.partitions`` and the state store provider in
    these offset-log entries, as Spark does."""
    for n in batches:
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000 + n,
                "conf": {"spark.sql.shuffle.partitions": str(partitions),
                         "spark.sql.streaming.stateStore.providerClass": provider}}
        tree.write(f"offsets/{n}", f"v1\n{json.dumps(meta)}\n{json.dumps(trees.end_offsets(n))}")


@pytest.fixture
def stopped(tmp_path: Path) -> str:
    """A stopped job: batches 0..4 planned and committed, two state partitions."""
    location = str(tmp_path / "ck")
    tree = trees.make_checkpoint(location, planned=5, committed=5)
    with_partitions(tree, range(5), 2)
    return location


def digest(location: str) -> dict[str, str]:
    root = Path(location)
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_stopped_committed_checkpoint_is_planned(stopped):
    planned = plan(stopped, 4)
    assert (planned.batch, planned.repartition_batch, planned.partitions, planned.target) == (4, 5, 2, 4)
    assert planned.operators == ("0 (dedupe)", "1 (tws)")


@pytest.mark.parametrize("value", [0, -3, True, "4", 2.5])
def test_partitions_must_be_a_whole_number_of_at_least_one(stopped, value):
    with pytest.raises(RescaleError, match="--partitions must be a whole number of at least 1"):
        plan(stopped, value)


def test_a_last_batch_that_did_not_commit_is_refused_and_nothing_changes(tmp_path):
    location = str(tmp_path / "ck")
    tree = trees.make_checkpoint(location, planned=5, committed=4)
    with_partitions(tree, range(5), 2)
    before = digest(location)
    with pytest.raises(RescaleError) as err:
        plan(location, 4)
    assert "its last batch 4 did not commit (offsets/4 has no commits/4)" in str(err.value)
    assert digest(location) == before


def test_a_running_job_is_refused_naming_it(stopped):
    record = ControlDir(stopped).claim("totals")
    try:
        with pytest.raises(RescaleError, match=r"is in use by job 'totals' \(pid \d+"):
            plan(stopped, 4)
    finally:
        record.release()
    assert plan(stopped, 4).target == 4


def test_no_batch_no_state_and_the_same_count_are_refused(tmp_path, stopped):
    empty = tmp_path / "empty"
    (empty / "offsets").mkdir(parents=True)
    with pytest.raises(RescaleError, match="has no batch yet"):
        plan(str(empty), 4)
    stateless = str(tmp_path / "stateless")
    with_partitions(trees.make_checkpoint(stateless, planned=2, committed=2, state=False), range(2), 2)
    with pytest.raises(RescaleError, match="has no keyed state"):
        plan(stateless, 4)
    with pytest.raises(RescaleError, match="already has 2 state partitions"):
        plan(stopped, 2)
    with pytest.raises(RescaleError, match="no such directory"):
        plan(str(tmp_path / "nope"), 4)


def test_state_on_the_hashmap_backend_is_refused_naming_it(tmp_path):
    location = str(tmp_path / "ck")
    with_partitions(trees.make_checkpoint(location, planned=2, committed=2), range(2), 2, HASHMAP)
    with pytest.raises(RescaleError) as err:
        plan(location, 4)
    assert ("keeps its state in 'hashmap' (HDFSBackedStateStoreProvider, recorded in offsets/1); "
            "Spark's state repartition supports the rocksdb backend only") in str(err.value)


def test_spark_before_4_2_is_refused_naming_both_versions():
    with pytest.raises(RescaleError) as err:
        require_spark("4.1.1")
    assert "needs Spark 4.2 or later" in str(err.value) and "this is Spark 4.1.1" in str(err.value)
    require_spark("4.2.0")
    require_spark("4.3.0")
    require_spark("5.0.0-preview1")


def test_the_cli_reports_bad_input_in_one_line_with_exit_2(stopped, tmp_path, capsys):
    assert main(["state", "rescale", "--checkpoint-dir", stopped, "--partitions", "0"]) == 2
    assert capsys.readouterr().err.startswith("eoskit state rescale: --partitions must be")
    assert main(["state", "rescale", "--checkpoint-dir", str(tmp_path / "nope"), "--partitions", "4"]) == 2
    assert "eoskit state rescale: checkpoint" in capsys.readouterr().err
    assert main(["state", "rescale", "--checkpoint-dir", stopped, "--partitions", "4", "--dry-run"]) == 0
    assert "would rescale the state of" in capsys.readouterr().out
    assert main(["state", "rescale", "--checkpoint-dir", stopped, "--partitions", "3", "--dry-run",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["partitions"], out["target"], out["repartitionBatch"], out["dryRun"]) == (2, 3, 5, True)


def _half_rescaled(location: str) -> dict:
    """The journal a rescale writes, then some of what Spark writes before it dies."""
    ck = Checkpoint(location)
    files, dirs = _listing(ck)
    journal = {"from": 2, "to": 4, "batch": 4, "at": 0.0, "files": files, "dirs": dirs}
    _write_journal(ck, journal)
    tree = trees.Tree(location)
    with_partitions(tree, range(5, 6), 4)  # offsets/5, uncommitted
    for p in range(4):
        tree.write(f"state/0/{p}/6.snapshot", b"rewritten")
    return journal


def test_an_interrupted_rescale_is_rolled_back_file_for_file(stopped):
    before = digest(stopped)
    _half_rescaled(stopped)
    with pytest.raises(RescaleError, match="holds an unfinished rescale"):
        refuse_unfinished(stopped)  # what `eoskit run` does
    with pytest.raises(RescaleError, match="holds an unfinished rescale"):
        plan(stopped, 4)
    assert "rolled back an interrupted rescale to 4 partitions" in finish_unfinished(stopped)
    assert digest(stopped) == before
    assert not (Path(stopped) / "state/0/3").exists()  # new partition directories go too
    refuse_unfinished(stopped)


def test_an_interrupted_rescale_that_had_committed_is_kept(stopped):
    _half_rescaled(stopped)
    trees.Tree(stopped).write("commits/5", 'v1\n{"nextBatchWatermarkMs":0}')
    assert "had completed" in finish_unfinished(stopped)
    assert not (Path(stopped) / JOURNAL).exists()
    assert Checkpoint(stopped).latest_committed() == 5


def test_a_roll_back_that_finds_a_listed_file_gone_says_so_and_keeps_the_journal(stopped):
    journal = _half_rescaled(stopped)
    (Path(stopped) / "commits/4").unlink()
    with pytest.raises(RescaleFailed, match=r"files it found are gone or changed \(commits/4\)"):
        roll_back(Checkpoint(stopped), journal)
    assert (Path(stopped) / JOURNAL).exists()
