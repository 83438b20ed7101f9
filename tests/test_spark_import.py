"""``eoskit checkpoint import-spark`` on checkpoint logs laid out as Spark
3.5 and 4.x write them (the files below are Spark's formats, written by
hand: the real job's run is integration_tests/test_spark_import.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eoskit.runtime.cli.main import main
from eoskit.runtime.state.checkpoints import Checkpoint

#: An offset-log entry's metadata line as Spark 3.5 writes it, and as 4.x
#: does (more pinned settings; the shape is the same).
META_35 = {"batchWatermarkMs": 0, "batchTimestampMs": 1700000000000,
           "conf": {"spark.sql.shuffle.partitions": "200"}}
META_4 = {"batchWatermarkMs": 0, "batchTimestampMs": 1760000000000,
          "conf": {"spark.sql.shuffle.partitions": "2",
                   "spark.sql.streaming.stateStore.providerClass":
                       "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
                   "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": "false"}}


def spark_checkpoint(root: Path, ends: list[dict], committed: int | None, meta: dict,
                     sources: int = 1) -> Path:
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"5f1c3e0a-old"}')
    for batch, end in enumerate(ends):
        lines = ["v1", json.dumps(meta)] + [json.dumps(end, separators=(",", ":"))] * sources
        (root / "offsets" / str(batch)).write_text("\n".join(lines))
        (root / "offsets" / f".{batch}.crc").write_bytes(b"crc")
    for batch in range(0 if committed is None else committed + 1):
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["checkpoint", "import-spark", *argv])
    out, err = capsys.readouterr()
    return code, out, err


ENDS = [{"orders": {"0": 10, "1": 7}}, {"orders": {"0": 20, "1": 15}},
        {"orders": {"0": 26, "1": 15, "2": 4}}]


@pytest.mark.parametrize("meta", [META_35, META_4], ids=["spark-3.5", "spark-4.x"])
def test_the_new_checkpoint_resumes_after_the_last_committed_batch(meta, tmp_path, capsys):
    old = spark_checkpoint(tmp_path / "old", ENDS, committed=1, meta=meta)
    code, out, _ = run(capsys, str(old), str(tmp_path / "new"), "--json")
    assert code == 0
    said = json.loads(out)
    assert said["batch"] == 1 and said["startOffsets"] == ENDS[1]
    # Spark's open batch 2: 6 more in partition 0, none in 1, 4 in the new partition 2.
    assert said["replayedEndOffsets"] == ENDS[2]
    assert said["replayedRecords"] == {"orders:0": 6, "orders:2": 4} and said["replayedTotal"] == 10
    new = Checkpoint(str(tmp_path / "new"))
    assert new.latest_committed() == 1 and new.batch_ids() == [0, 1, 2]
    assert new.batch(1).offsets == (ENDS[1],) and new.batch(2).offsets == (ENDS[2],)
    assert json.loads((tmp_path / "new" / "offsets" / "1").read_text().splitlines()[1]) == meta
    assert new.query_id() not in (None, "5f1c3e0a-old")  # a new query


def test_nothing_is_re_read_when_spark_planned_no_further_batch(tmp_path, capsys):
    old = spark_checkpoint(tmp_path / "old", ENDS[:2], committed=1, meta=META_4)
    code, out, _ = run(capsys, str(old), str(tmp_path / "new"))
    assert code == 0
    assert "re-reads     nothing" in out
    assert Checkpoint(str(tmp_path / "new")).batch_ids() == [0, 1]


def test_a_first_batch_committed_needs_no_earlier_entry(tmp_path, capsys):
    old = spark_checkpoint(tmp_path / "old", ENDS[:1], committed=0, meta=META_35)
    assert run(capsys, str(old), str(tmp_path / "new"))[0] == 0
    assert Checkpoint(str(tmp_path / "new")).batch_ids() == [0]


@pytest.mark.parametrize("case, expected", [
    ("no commit", "has no committed batch"),
    ("state", "kept state"),
    ("two sources", "holds 2 sources' offsets"),
    ("not kafka", "not Kafka's per-partition offsets"),
    ("not empty", "must be a new or empty directory"),
])
def test_what_cannot_be_carried_on_from_is_refused_by_name(case, expected, tmp_path, capsys):
    ends = [{"logOffset": 3}] if case == "not kafka" else ENDS[:1]
    old = spark_checkpoint(tmp_path / "old", ends, committed=None if case == "no commit" else 0,
                           meta=META_4, sources=2 if case == "two sources" else 1)
    new = tmp_path / "new"
    if case == "state":
        (old / "state" / "0" / "0").mkdir(parents=True)
        (old / "state" / "0" / "0" / "1.delta").write_bytes(b"x")
    if case == "not empty":
        new.mkdir()
        (new / "left").write_text("x")
    code, _, err = run(capsys, str(old), str(new))
    assert code == 2
    assert expected in err.splitlines()[0] and err.startswith("eoskit checkpoint import-spark: ")
    assert case == "not empty" or not new.exists()
