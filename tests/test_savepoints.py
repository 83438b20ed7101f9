"""Savepoint storage (``eoskit.runtime.state.savepoints``) and ``eoskit savepoint
inspect|dispose`` on synthetic checkpoint trees: which files a savepoint of
batch b holds, the manifest written last, restore into an empty directory
only, dispose of savepoints only. Spark resuming from a restored savepoint
is integration_tests/test_savepoints.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import uuid
from pathlib import Path

import fsspec
import pytest

from eoskit.runtime.state.checkpoints import Checkpoint
from eoskit.runtime.cli.main import main
from eoskit.runtime.state.savepoints import (
    DISPOSING,
    MANIFEST,
    IncompatibleSavepointError,
    NotASavepointError,
    SavepointError,
    SavepointOfAnotherJobError,
    create_savepoint,
    dispose_savepoint,
    inspect_savepoint,
    restore_savepoint,
    restored_from,
)

# The synthetic tree builder of tests/test_checkpoints.py (tests/ is no package).
_spec = importlib.util.spec_from_file_location("checkpoint_trees", Path(__file__).with_name("test_checkpoints.py"))
trees = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trees)  # type: ignore[union-attr]


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> str:
    trees.make_checkpoint(str(tmp_path / "ck"))  # batches 0..4 planned, 0..3 committed
    return str(tmp_path / "ck")


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


# -- what a savepoint holds ----------------------------------------------------------------

def test_a_savepoint_of_the_latest_committed_batch_holds_what_spark_resumes_from(checkpoint_dir, tmp_path):
    manifest = create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders")
    held = files_under(tmp_path / "sp")
    assert manifest.batch == 3
    assert held == {rel for rel, _ in manifest.files} | {MANIFEST}
    logs = {rel for rel in held if rel.split("/")[0] in ("offsets", "commits")}
    # Batch 4 was planned and not committed: its offsets come along, so the
    # restored job replays it with the same offsets, as a restart in place would.
    assert logs == {"offsets/2", "offsets/.2.crc", "offsets/3", "offsets/.3.crc",
                    "offsets/4", "offsets/.4.crc",
                    "commits/2", "commits/.2.crc", "commits/3", "commits/.3.crc"}
    assert {"metadata", ".metadata.crc"} <= held
    # State: versions up to b+1 = 4 (the snapshot below them too); SSTs kept;
    # operator metadata and schema files of batches after b left out.
    assert {rel for rel in held if rel.startswith("state/0/0/")} == {
        "state/0/0/_metadata/schema", "state/0/0/_metadata/.schema.crc", "state/0/0/2.snapshot",
        "state/0/0/.2.snapshot.crc"} | {f"state/0/0/{n}" for v in range(1, 5) for n in (f"{v}.delta", f".{v}.delta.crc")}
    assert "state/1/1/3.zip" in held and "state/1/1/5.zip" not in held and "state/1/1/5.changelog" not in held
    assert any(rel.startswith("state/1/0/SSTs/") for rel in held)
    assert "state/1/_metadata/v2/0" in held and "state/1/_metadata/v2/4" not in held
    assert "state/1/_stateSchema/default/0_aaa" in held and "state/1/_stateSchema/default/4_bbb" not in held
    # Sinks: decisions up to the planned b+1 (a sink may have committed it
    # before the stop), no aborts of a failed run; metadata of task-commit sinks.
    assert {rel for rel in held if rel.startswith("eoskit/")} == {
        "eoskit/sinks/pg1/sink.json", "eoskit/sinks/kf1/sink.json", "eoskit/sinks/kf1/meta/kafka-tasks.json",
    } | {f"eoskit/sinks/pg1/decisions/{n}.json" for n in range(5)}


def test_the_manifest_says_what_the_savepoint_is(checkpoint_dir, tmp_path):
    created = create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders",
                               extra={"trigger": "test"}, spark_version="4.9.9")
    manifest = inspect_savepoint(str(tmp_path / "sp"))
    assert manifest == created
    assert (manifest.job_name, manifest.batch, manifest.query_id) == ("orders", 3, "query-1")
    assert manifest.checkpoint == checkpoint_dir and manifest.location == str(tmp_path / "sp")
    assert manifest.offsets == (trees.end_offsets(3),) and manifest.batch_timestamp_ms == 1_700_000_003_000
    assert (manifest.spark_version, manifest.extra) == ("4.9.9", {"trigger": "test"})
    assert manifest.eoskit_version
    assert manifest.sink_decisions == {"kf1": "none", "pg1": "done"}
    assert [s.decided_batches for s in manifest.sinks] == [(), (0, 1, 2, 3, 4)]
    assert [(op.name, op.version, op.rows) for op in manifest.state_operators] == [
        ("dedupe", 4, 2 * trees.hdfs_rows(4)), ("tws", 4, None)]
    on_disk = {str(p.relative_to(tmp_path / "sp")): p.stat().st_size for p in (tmp_path / "sp").rglob("*") if p.is_file()}
    assert dict(manifest.files) == {k: v for k, v in on_disk.items() if k != MANIFEST}
    raw = json.loads((tmp_path / "sp" / MANIFEST).read_text())
    assert raw["format"] == 1 and raw["sinks"][1] == dict(raw["sinks"][1], sinkId="pg1", decision="done")


def test_an_earlier_batch_takes_the_offset_log_entry_before_it(checkpoint_dir, tmp_path):
    manifest = create_savepoint(checkpoint_dir, str(tmp_path / "sp"), batch=1, job_name="orders")
    held = files_under(tmp_path / "sp")
    assert {r for r in held if r.startswith("offsets/") and "crc" not in r} == {"offsets/0", "offsets/1"}
    assert "state/0/0/2.delta" in held and "state/0/0/2.snapshot" in held and "state/0/0/3.delta" not in held
    assert manifest.offsets == (trees.end_offsets(1),)
    zero = dict(create_savepoint(checkpoint_dir, str(tmp_path / "sp0"), batch=0, job_name="orders").files)
    assert {r for r in zero if r.split("/")[0] in ("offsets", "commits")} == {
        "offsets/0", "offsets/.0.crc", "commits/0", "commits/.0.crc"}


@pytest.mark.parametrize("batch, expected", [
    (4, r"batch 4 of .* is not a committed batch \(committed and retained: 0\.\.3\)"),
    (9, "batch 9 of .* is not a committed batch"),
    (2, r"offsets/1 is gone from .*: Spark needs the offset-log entry before batch 2"),
], ids=["uncommitted", "unknown", "previous-offsets-gone"])
def test_a_batch_spark_cannot_resume_from_is_refused(checkpoint_dir, tmp_path, batch, expected):
    (Path(checkpoint_dir) / "offsets" / "1").unlink()
    with pytest.raises(SavepointError, match=expected):
        create_savepoint(checkpoint_dir, str(tmp_path / "sp"), batch=batch, job_name="orders")
    assert not (tmp_path / "sp").exists()


def test_a_checkpoint_without_a_committed_batch_has_no_savepoint(tmp_path):
    trees.make_checkpoint(str(tmp_path / "ck"), planned=1, committed=0, state=False)
    with pytest.raises(SavepointError, match=f"checkpoint {tmp_path / 'ck'} has no committed batch"):
        create_savepoint(str(tmp_path / "ck"), str(tmp_path / "sp"), job_name="orders")


def test_a_non_empty_target_is_refused_and_an_empty_one_used(checkpoint_dir, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("mine")
    with pytest.raises(SavepointError, match=f"savepoint target {tmp_path / 'busy'} is not empty"):
        create_savepoint(checkpoint_dir, str(tmp_path / "busy"), job_name="orders")
    assert files_under(tmp_path / "busy") == {"x"}
    (tmp_path / "empty").mkdir()
    assert create_savepoint(checkpoint_dir, str(tmp_path / "empty"), job_name="orders").batch == 3


def test_a_failed_copy_leaves_no_savepoint_and_no_partial_directory(checkpoint_dir, tmp_path, monkeypatch):
    from eoskit.runtime.state import savepoints

    real = savepoints.savepoint_files

    def vanishing(checkpoint, batch):
        files = real(checkpoint, batch)
        (Path(checkpoint_dir) / "state/0/1/4.delta").unlink()  # purged by a running job
        return files

    monkeypatch.setattr(savepoints, "savepoint_files", vanishing)
    with pytest.raises(SavepointError, match="state/0/1/4.delta vanished while it was copied"):
        create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders")
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_a_savepoint_on_another_file_system_gets_its_manifest_last(checkpoint_dir):
    target = f"memory://sp-{uuid.uuid4().hex[:8]}"
    memory = fsspec.filesystem("memory")
    try:
        manifest = create_savepoint(checkpoint_dir, target, job_name="orders")
        assert manifest.location == target
        assert inspect_savepoint(target) == manifest
        memory.rm(target[len("memory://"):] + "/state/0/0/1.delta")
        with pytest.raises(SavepointError, match=f"savepoint {target} is damaged: 1 file.*state/0/0/1.delta"):
            inspect_savepoint(target)
    finally:
        memory.rm(target[len("memory://"):], recursive=True)


# -- inspect --------------------------------------------------------------------------------------

def test_inspect_names_what_is_not_a_savepoint(checkpoint_dir, tmp_path):
    with pytest.raises(SavepointError, match=f"savepoint {tmp_path / 'nope'}: no such file or directory"):
        inspect_savepoint(str(tmp_path / "nope"))
    with pytest.raises(NotASavepointError, match="it looks like a checkpoint directory"):
        inspect_savepoint(checkpoint_dir)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotASavepointError, match="is not a savepoint: it is a file"):
        inspect_savepoint(str(tmp_path / "file"))


def test_inspect_reads_the_manifest_path_itself_and_refuses_newer_formats(checkpoint_dir, tmp_path):
    create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders")
    assert inspect_savepoint(str(tmp_path / "sp" / MANIFEST)).location == str(tmp_path / "sp")
    data = json.loads((tmp_path / "sp" / MANIFEST).read_text())
    (tmp_path / "sp" / MANIFEST).write_text(json.dumps(dict(data, format=99)))
    with pytest.raises(SavepointError, match="has manifest format 99"):
        inspect_savepoint(str(tmp_path / "sp"))
    (tmp_path / "sp" / MANIFEST).write_text(json.dumps({"format": 1}))
    with pytest.raises(SavepointError, match=f"{MANIFEST} is incomplete or malformed"):
        inspect_savepoint(str(tmp_path / "sp"))


# -- restore -------------------------------------------------------------------------------------------

def test_restore_copies_the_savepoint_into_a_new_checkpoint(checkpoint_dir, tmp_path):
    manifest = create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders")
    restore_savepoint(str(tmp_path / "sp"), str(tmp_path / "new"), job_name="orders")
    restored = Checkpoint(str(tmp_path / "new"))
    assert restored.latest_committed() == 3 and restored.batch_ids() == [2, 3, 4]
    assert restored.query_id() == "query-1" and restored.batch(3).sinks == {"kf1": "none", "pg1": "done"}
    rewritten_crc = "state/1/_metadata/v2/.0.crc"  # see the next test
    assert files_under(tmp_path / "new") == {rel for rel, _ in manifest.files} - {rewritten_crc} | {
        "eoskit/restored.json"}
    record = restored_from(str(tmp_path / "new"))
    assert record == dict(record, savepoint=str(tmp_path / "sp"), fromCheckpoint=checkpoint_dir,
                          batch=3, jobName="orders", sinkIds=["kf1", "pg1"])
    # A savepoint of the restored checkpoint does not carry the restore record.
    assert "eoskit/restored.json" not in dict(create_savepoint(str(tmp_path / "new"), str(tmp_path / "sp2"),
                                                               job_name="orders").files)


def test_restore_points_operator_metadata_at_the_new_checkpoint(checkpoint_dir, tmp_path):
    create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders")
    restore_savepoint(str(tmp_path / "sp"), str(tmp_path / "new"))
    text = (tmp_path / "new/state/1/_metadata/v2/0").read_text()
    version, _, body = text.partition("\n")
    assert version == "v2"
    assert json.loads(body)["stateStoreInfo"][0]["stateSchemaFilePaths"] == [
        f"file:{tmp_path}/new/state/1/_stateSchema/default/0_aaa"]
    assert not (tmp_path / "new/state/1/_metadata/v2/.0.crc").exists()  # it would not match any more


def test_restore_refuses_a_non_empty_directory_and_another_jobs_savepoint(checkpoint_dir, tmp_path):
    create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders")
    with pytest.raises(SavepointError, match=f"checkpoint directory {checkpoint_dir} is not empty"):
        restore_savepoint(str(tmp_path / "sp"), checkpoint_dir)
    with pytest.raises(SavepointOfAnotherJobError, match=f"savepoint {tmp_path / 'sp'} is of job 'orders', not 'payments'"):
        restore_savepoint(str(tmp_path / "sp"), str(tmp_path / "new"), job_name="payments")
    assert not (tmp_path / "new").exists()
    with pytest.raises(NotASavepointError):
        restore_savepoint(checkpoint_dir, str(tmp_path / "new"))


JOB = {"source": {"format": "eoskit-kafka", "subscribe": ["orders"]},
       "sinks": [{"format": "eoskit-postgres", "sinkId": None}]}
# What the synthetic checkpoint's operators are, as the new job's plan says.
PLANNED = [{"operatorId": 0, "name": "StreamingDeduplicate", "kind": "deduplication"},
           {"operatorId": 1, "name": "TransformWithStateInPySpark", "kind": "transformWithState"}]


def test_the_manifest_records_the_query_s_fingerprint(checkpoint_dir, tmp_path):
    Path(checkpoint_dir, "eoskit/identity.json").write_text('{"defaultSinkId": "pg1"}')
    manifest = create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders", job=JOB)
    assert manifest.fingerprint == {
        **JOB, "defaultSinkId": "pg1",
        "stateOperators": [{"operatorId": 0, "name": "dedupe", "kind": "deduplication"},
                           {"operatorId": 1, "name": "tws", "kind": None}]}
    assert inspect_savepoint(str(tmp_path / "sp")).fingerprint == manifest.fingerprint
    restore_savepoint(str(tmp_path / "sp"), str(tmp_path / "new"), job_name="orders",
                      expect={**JOB, "stateOperators": PLANNED})
    assert Checkpoint(str(tmp_path / "new")).latest_committed() == 3


def test_a_restore_into_a_changed_query_is_refused_before_a_file_is_copied(checkpoint_dir, tmp_path):
    create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders", job=JOB)
    changed = {"source": {"format": "eoskit-kafka", "subscribe": ["orders2"]},
               "sinks": [{"format": "eoskit-mysql", "sinkId": None}], "stateOperators": PLANNED[:1]}
    with pytest.raises(IncompatibleSavepointError) as err:
        restore_savepoint(str(tmp_path / "sp"), str(tmp_path / "new"), job_name="orders", expect=changed)
    message = str(err.value)
    assert message.startswith(f"savepoint {tmp_path / 'sp'} does not fit this job's query: ")
    assert "subscribing to topics ['orders'], this job's is eoskit-kafka subscribing to topics ['orders2']" in message
    assert "is eoskit-postgres, this job's sink" in message and "is eoskit-mysql" in message
    assert "[0: deduplication, 1: tws], this job's query has [0: deduplication]" in message
    assert len(err.value.differences) == 3 and not (tmp_path / "new").exists()


def test_a_savepoint_without_a_fingerprint_is_restored_unchecked_and_says_so(checkpoint_dir, tmp_path, caplog):
    create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders")
    manifest_path = tmp_path / "sp" / MANIFEST
    data = json.loads(manifest_path.read_text())
    del data["fingerprint"]  # as an older eoskit wrote it
    manifest_path.write_text(json.dumps(data))
    assert inspect_savepoint(str(tmp_path / "sp")).fingerprint is None
    with caplog.at_level("WARNING", logger="eoskit.runtime.state.savepoints"):
        restore_savepoint(str(tmp_path / "sp"), str(tmp_path / "new"), job_name="orders",
                          expect={"source": {"format": "eoskit-kafka", "subscribe": ["other"]}})
    assert "has no fingerprint of its query" in caplog.text and "not checked" in caplog.text
    assert Checkpoint(str(tmp_path / "new")).latest_committed() == 3


def test_restore_from_another_file_system_into_an_empty_local_directory(checkpoint_dir, tmp_path):
    target = f"memory://sp-{uuid.uuid4().hex[:8]}"
    try:
        create_savepoint(checkpoint_dir, target, batch=2, job_name="orders")
        (tmp_path / "new").mkdir()
        restore_savepoint(target, f"file:{tmp_path}/new", job_name="orders")
        assert Checkpoint(str(tmp_path / "new")).latest_committed() == 2
        assert not [p for p in os.listdir(tmp_path) if p.endswith(".partial")]
    finally:
        fsspec.filesystem("memory").rm(target[len("memory://"):], recursive=True)


# -- dispose ----------------------------------------------------------------------------------------

def test_dispose_deletes_a_savepoint_and_nothing_else(checkpoint_dir, tmp_path):
    manifest = create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders")
    done = dispose_savepoint(str(tmp_path / "sp"))
    assert done.manifest == manifest and done.leftovers == []
    assert not (tmp_path / "sp").exists() and Checkpoint(checkpoint_dir).latest_committed() == 3


def test_dispose_refuses_what_is_not_a_savepoint(checkpoint_dir, tmp_path):
    before = files_under(Path(checkpoint_dir))
    with pytest.raises(NotASavepointError, match="nothing was deleted"):
        dispose_savepoint(checkpoint_dir)
    assert files_under(Path(checkpoint_dir)) == before
    with pytest.raises(SavepointError, match="no such file or directory"):
        dispose_savepoint(str(tmp_path / "nope"))


def test_dispose_leaves_unlisted_files_and_finishes_an_interrupted_dispose(checkpoint_dir, tmp_path):
    create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders")
    (tmp_path / "sp" / "notes.txt").write_text("mine")
    assert dispose_savepoint(str(tmp_path / "sp")).leftovers == ["notes.txt"]
    assert files_under(tmp_path / "sp") == {"notes.txt"}
    create_savepoint(checkpoint_dir, str(tmp_path / "sp2"), job_name="orders")
    (tmp_path / "sp2" / MANIFEST).rename(tmp_path / "sp2" / DISPOSING)  # a dispose stopped after step 1
    (tmp_path / "sp2" / "metadata").unlink()
    with pytest.raises(NotASavepointError, match="being disposed of"):
        inspect_savepoint(str(tmp_path / "sp2"))
    assert dispose_savepoint(str(tmp_path / "sp2")).leftovers == [] and not (tmp_path / "sp2").exists()


# -- the commands ---------------------------------------------------------------------------------------

def test_savepoint_inspect_and_dispose_commands(checkpoint_dir, tmp_path, capsys):
    create_savepoint(checkpoint_dir, str(tmp_path / "sp"), job_name="orders")
    assert main(["savepoint", "inspect", str(tmp_path / "sp")]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["job", "orders"] in lines and ["batch", "3", "(resumes", "with", "batch", "4)"] in lines
    assert ["0", "orders", "1", "20"] in lines and ["pg1", "done", "5"] in lines and ["kf1", "-", "0"] in lines
    assert ["0", "dedupe", "hdfs", "2", "1..4"] == lines[[l[:2] for l in lines].index(["0", "dedupe"])][:5]
    assert main(["savepoint", "inspect", str(tmp_path / "sp"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch"] == 3
    assert main(["savepoint", "dispose", checkpoint_dir]) == 2
    assert capsys.readouterr().err.startswith(f"eoskit savepoint dispose: {checkpoint_dir} is not a savepoint")
    assert main(["savepoint", "dispose", str(tmp_path / "sp")]) == 0
    assert capsys.readouterr().out.startswith(f"disposed of savepoint {tmp_path / 'sp'} (job orders, batch 3)")
    assert main(["savepoint", "inspect", str(tmp_path / "sp")]) == 2
    assert capsys.readouterr().err.strip() == f"eoskit savepoint inspect: savepoint {tmp_path / 'sp'}: no such file or directory"


def test_storage_options_are_given_per_protocol(tmp_path, capsys):
    assert main(["savepoint", "inspect", str(tmp_path), "--storage-option", "nodot=1"]) == 2
    assert "expected PROTOCOL.KEY=VALUE" in capsys.readouterr().err
