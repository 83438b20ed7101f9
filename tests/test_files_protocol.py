"""The files sink through eoskit's real protocol code (task, coordinator,
decision log), without Spark: what a directory reader sees at every step."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.json as pajson
import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from eoskit.connectors.files import committed_batches, layout
from eoskit.connectors.files.settings import FilesSettings
from eoskit.connectors.files.transactions import FilesTransactions
from eoskit.twophase.contract import CommitMode, SinkContext, SinkError
from eoskit.twophase.coordinator import Coordinator
from eoskit.twophase.decision_log import DecisionLog
from eoskit.twophase.messages import NothingToCommit, PreparedTransaction
from eoskit.twophase.task import write_task

SCHEMA = StructType([StructField("id", LongType()), StructField("amount", LongType()),
                     StructField("customer", StringType())])
SINK_ID = "files1"


class Harness:
    """A sink, its decision log, and the tasks of a batch, as Spark would run them."""

    def __init__(self, path: str, checkpoint: Path, fmt: str = "parquet", **options: str) -> None:
        settings = FilesSettings.parse({"path": path, **options}, f"eoskit-{fmt}", fmt, FilesTransactions)
        self.sink = FilesTransactions(settings, SCHEMA)
        self.decisions = DecisionLog(str(checkpoint), SINK_ID)
        self.sink.check(SCHEMA, SinkContext(SINK_ID, str(checkpoint), settings.commit_mode))
        self.decisions.create()
        self.mode = settings.commit_mode

    def task(self, batch: int, partition: int, ids: range, attempt: int = 0):
        rows = pa.record_batch({
            "id": pa.array(list(ids), pa.int64()),
            "amount": pa.array([i * 7 % 1000 for i in ids], pa.int64()),
            "customer": pa.array([f"c{i % 3}" for i in ids]),
        })
        return write_task(self.sink, self.decisions, self.mode, iter([rows]),
                          identity=(batch, partition, attempt))

    def commit(self, acks, batch: int):
        return Coordinator(self.sink.committer(), self.decisions).commit(acks, batch)

    def prepared(self) -> list[str]:
        return self.sink.committer().in_doubt(f"eoskit:{SINK_ID}:")


def read_ids(root: str) -> list[int]:
    """What pyarrow.dataset sees in the directory (it skips _-prefixed names)."""
    if not os.path.isdir(root):
        return []
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table()
    return sorted(table.column("id").to_pylist()) if table.num_columns else []


def data_files(root: str) -> list[str]:
    """What a glob sees, DuckDB-style (it does descend into _eoskit)."""
    return sorted(glob.glob(f"{root}/**/*.parquet", recursive=True))


@pytest.fixture
def out(tmp_path) -> str:
    return str(tmp_path / "out")


def test_a_batch_is_invisible_until_committed_then_there_once(out, tmp_path):
    h = Harness(out, tmp_path / "ck", partitionBy="customer")
    acks = [h.task(0, p, range(p * 100, p * 100 + 100)) for p in range(3)]
    assert all(isinstance(a, PreparedTransaction) for a in acks)
    assert sorted(h.prepared()) == sorted(a.txn_id for a in acks)
    assert read_ids(out) == [] and data_files(out) == []
    h.commit(acks, 0)
    assert read_ids(out) == list(range(300))
    assert len(data_files(out)) == 9  # 3 tasks x 3 customers
    assert h.prepared() == [] and os.listdir(f"{out}/_eoskit/staging") == []
    [manifest] = committed_batches(out)
    assert (manifest.sink_id, manifest.batch, manifest.rows) == (SINK_ID, 0, 300)
    assert sorted(f"{out}/{f}" for f in manifest.files) == data_files(out)
    # Spark replays the decided batch: its tasks write nothing.
    assert h.task(0, 0, range(0, 100)) == NothingToCommit(0, 0, 0, replay=True)
    assert read_ids(out) == list(range(300))


def test_memory_file_system_works_like_a_disk(tmp_path):
    root = f"memory://files-{uuid.uuid4().hex[:8]}/out"
    h = Harness(root, tmp_path / "ck", "json")
    acks = [h.task(0, p, range(p * 10, p * 10 + 10)) for p in range(2)]
    h.commit(acks, 0)
    fs = fsspec.filesystem("memory")
    names = [p for p in fs.find(root) if "/_eoskit/" not in p]
    assert len(names) == 2 and all(n.endswith(".json") for n in names)
    ids = sorted(json.loads(line)["id"] for n in names for line in fs.cat_file(n).decode().splitlines())
    assert ids == list(range(20))
    fs.rm(root.split("://")[1].split("/")[0], recursive=True)


def test_a_commit_repeated_after_a_crash_between_moves_finishes_without_duplicates(out, tmp_path):
    h = Harness(out, tmp_path / "ck")
    acks = [h.task(0, p, range(p * 50, p * 50 + 50)) for p in range(3)]
    Coordinator(h.sink.committer(), h.decisions).decisions.decide(0, [a.txn_id for a in acks], 150)
    # The driver died mid-commit: the first transaction's file moved, the
    # second's copied but not deleted (an object store's copy-then-delete).
    first = json.loads(Path(out, layout.prepared_manifest(acks[0].txn_id)).read_text())["files"][0]
    os.replace(f"{out}/{first['staged']}", f"{out}/{first['path']}")
    second = json.loads(Path(out, layout.prepared_manifest(acks[1].txn_id)).read_text())["files"][0]
    Path(out, second["path"]).write_bytes(Path(out, second["staged"]).read_bytes())
    assert read_ids(out) == list(range(100))  # what a reader sees in the middle of a commit
    h.commit(acks, 0)  # the restarted driver applies the decision again
    assert read_ids(out) == list(range(150))
    assert h.prepared() == [] and h.decisions.get(0).done
    assert [m.rows for m in committed_batches(out)] == [150]
    assert h.sink.committer().commit(acks[0].txn_id) is False  # already committed


def test_a_staged_file_lost_before_commit_is_an_error_not_a_silent_gap(out, tmp_path):
    h = Harness(out, tmp_path / "ck")
    ack = h.task(0, 0, range(10))
    staged = json.loads(Path(out, layout.prepared_manifest(ack.txn_id)).read_text())["files"][0]["staged"]
    os.remove(f"{out}/{staged}")
    with pytest.raises(SinkError, match="is gone and its final name .* does not exist"):
        h.commit([ack], 0)


def test_retried_and_losing_attempts_are_rolled_back(out, tmp_path):
    h = Harness(out, tmp_path / "ck")
    zombie = h.task(0, 0, range(0, 10))  # attempt 0 prepared, its ack never arrived
    retry = h.task(0, 0, range(0, 10), attempt=1)  # rolls attempt 0 back first
    assert zombie.txn_id not in h.prepared()
    speculative = h.task(0, 1, range(10, 20), attempt=2)
    winner = h.task(0, 1, range(10, 20), attempt=1)
    assert speculative.txn_id in h.prepared()
    h.commit([retry, winner], 0)
    assert read_ids(out) == list(range(20))
    assert h.prepared() == [] and os.listdir(f"{out}/_eoskit/staging") == []


def test_staged_files_of_a_task_killed_mid_write_are_removed_with_the_batch(out, tmp_path):
    h = Harness(out, tmp_path / "ck")
    killed = h.sink.begin_prepared("eoskit:files1:0:1:0xdead01")
    killed.write(pa.record_batch({"id": pa.array([99], pa.int64()), "amount": pa.array([1], pa.int64()),
                                  "customer": pa.array(["x"])}))
    killed._close_all()  # its files are on disk, no manifest: the worker died here
    assert os.listdir(f"{out}/_eoskit/staging") == [layout.txn_name("eoskit:files1:0:1:0xdead01")]
    assert h.prepared() == []
    h.commit([h.task(0, 0, range(5))], 0)
    assert read_ids(out) == list(range(5))
    assert os.listdir(f"{out}/_eoskit/staging") == []


def test_files_roll_over_at_max_records_and_with_many_partition_directories(out, tmp_path):
    h = Harness(out, tmp_path / "ck", partitionBy="customer", maxRecordsPerFile="7")
    h.commit([h.task(0, 0, range(60))], 0)
    assert read_ids(out) == list(range(60))
    counts = {d: len(os.listdir(f"{out}/{d}")) for d in os.listdir(out) if d != "_eoskit"}
    assert counts == {"customer=c0": 3, "customer=c1": 3, "customer=c2": 3}  # 20 rows each: 7+7+6


def test_more_partition_values_than_open_files(out, tmp_path):
    settings = FilesSettings.parse({"path": out, "partitionBy": "customer"}, "eoskit-parquet", "parquet",
                                   FilesTransactions)
    sink = FilesTransactions(settings, SCHEMA)
    writer = sink.begin_prepared("eoskit:files1:0:0:0x00aa01")
    for start in (0, 100):  # the second batch reopens directories closed for room
        ids = list(range(start, start + 100))
        writer.write(pa.record_batch({"id": pa.array(ids, pa.int64()), "amount": pa.array(ids, pa.int64()),
                                      "customer": pa.array([f"k{i % 50}" for i in ids])}))
    writer.prepare()
    assert sink.committer().commit("eoskit:files1:0:0:0x00aa01")
    assert read_ids(out) == list(range(200))
    assert all(len(os.listdir(f"{out}/customer=k{k}")) in (1, 2) for k in range(50))


def test_at_least_once_tasks_commit_their_own_files(out, tmp_path):
    h = Harness(out, tmp_path / "ck", commitMode="at_least_once")
    ack = h.task(0, 0, range(10))
    assert ack.rows == 10 and not isinstance(ack, PreparedTransaction)
    assert read_ids(out) == list(range(10))
    assert os.listdir(f"{out}/_eoskit/staging") == []


def test_json_lines_gzip_read_back_by_pyarrow(out, tmp_path):
    h = Harness(out, tmp_path / "ck", "json", compression="gzip", partitionBy="customer")
    h.commit([h.task(0, p, range(p * 30, p * 30 + 30)) for p in range(2)], 0)
    files = sorted(glob.glob(f"{out}/**/*.json.gz", recursive=True))
    assert len(files) == 6
    rows = [r for f in files for r in pajson.read_json(f).to_pylist()]
    assert sorted(r["id"] for r in rows) == list(range(60))
    assert all("customer" not in r for r in rows)  # a partition column lives in the directory name


@pytest.mark.parametrize("options, schema, words", [
    ({"partitionBy": "country"}, SCHEMA, "partition column 'country' .* not a column of the DataFrame"),
    ({"partitionBy": "score"}, StructType([StructField("id", LongType()), StructField("score", DoubleType())]),
     "partition column 'score' is double"),
    ({"partitionBy": "id,amount,customer"}, SCHEMA, "every column is a partition column"),
])
def test_check_refuses_partition_columns_it_cannot_write(out, tmp_path, options, schema, words):
    settings = FilesSettings.parse({"path": out, **options}, "eoskit-parquet", "parquet", FilesTransactions)
    with pytest.raises(SinkError, match=words):
        FilesTransactions(settings, schema).check(schema, SinkContext(SINK_ID, str(tmp_path), CommitMode.TWOPHASE))


def test_check_refuses_a_directory_of_sparks_own_file_sink_and_a_file(out, tmp_path):
    os.makedirs(f"{out}/_spark_metadata")
    with pytest.raises(SinkError, match="holds _spark_metadata"):
        Harness(out, tmp_path / "ck")
    Path(tmp_path / "plain").write_text("x")
    with pytest.raises(SinkError, match="is a file, not a directory"):
        Harness(str(tmp_path / "plain"), tmp_path / "ck")


def test_a_sink_id_belongs_to_one_checkpoint(out, tmp_path):
    Harness(out, tmp_path / "ck1")
    Harness(out, tmp_path / "ck1")  # the same query again
    with pytest.raises(SinkError, match="sink id 'files1' .* belongs to the query with checkpoint"):
        Harness(out, tmp_path / "ck2")


def eoskit_txn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).with_name("eoskit")), "txn", *args],
                          capture_output=True, text=True, timeout=120)


def test_eoskit_txn_lists_and_resolves_a_files_sink_by_its_path(out, tmp_path):
    h = Harness(out, tmp_path / "ck")
    decided = [h.task(0, p, range(p * 10, p * 10 + 10)) for p in range(2)]
    h.decisions.decide(0, [a.txn_id for a in decided], 20)  # then the driver died
    undecided = h.task(1, 0, range(20, 30))
    where = ["--path", out, "--checkpoint-dir", str(tmp_path / "ck"), "--sink-id", SINK_ID]
    listed = eoskit_txn("list", *where)
    assert listed.returncode == 0, listed.stderr
    assert f"in parquet files at {out}: 3 prepared" in listed.stdout
    assert f"{decided[0].txn_id}  batch 0  -> commit" in listed.stdout
    assert f"{undecided.txn_id}  batch 1  -> roll back (its batch was never decided)" in listed.stdout
    resolved = eoskit_txn("resolve", *where)
    assert resolved.returncode == 0, resolved.stderr
    assert "committed 2, rolled back 1" in resolved.stdout
    assert read_ids(out) == list(range(20)) and h.prepared() == []
    assert [m.batch for m in committed_batches(out)] == [0]
    nowhere = eoskit_txn("list", "--path", str(tmp_path / "nothing"), "--checkpoint-dir", str(tmp_path / "ck"))
    assert nowhere.returncode != 0 and "no eoskit sink handles the path" in nowhere.stderr


# -- the batch manifests over a long run ------------------------------------------


def _batches(h: Harness, first: int, last: int) -> None:
    for batch in range(first, last + 1):
        h.commit([h.task(batch, 0, range(batch * 2, batch * 2 + 2))], batch)


def test_batch_manifests_are_compacted_every_hundred_batches(out, tmp_path):
    h = Harness(out, tmp_path / "ck")
    _batches(h, 0, 249)
    names = sorted(os.listdir(f"{out}/{layout.BATCHES_DIR}/{SINK_ID}"))
    assert names[-2:] == ["compact-0000000099.manifest", "compact-0000000199.manifest"]
    assert names[:-2] == [f"{b:010d}.manifest" for b in range(200, 250)]
    manifests = committed_batches(out)
    assert [m.batch for m in manifests] == list(range(250))
    assert all(m.rows == 2 and len(m.files) == 1 for m in manifests)
    assert sorted(f"{out}/{f}" for m in manifests for f in m.files) == data_files(out)
    assert read_ids(out) == list(range(500))


def test_a_compaction_cut_short_is_read_once_and_finished_by_the_repeat(out, tmp_path, monkeypatch):
    h = Harness(out, tmp_path / "ck")
    _batches(h, 0, 98)
    removed = []
    real_remove = type(h.sink.storage).remove

    def crash_after_three(storage, relative):
        if "/batches/" in relative:
            if len(removed) == 3:
                raise OSError("the driver died here")
            removed.append(relative)
        real_remove(storage, relative)

    monkeypatch.setattr(type(h.sink.storage), "remove", crash_after_three)
    acks = [h.task(99, 0, range(198, 200))]
    with pytest.raises(OSError, match="the driver died here"):
        h.commit(acks, 99)
    monkeypatch.undo()
    directory = f"{out}/{layout.BATCHES_DIR}/{SINK_ID}"
    assert "compact-0000000099.manifest" in os.listdir(directory)
    assert len(os.listdir(directory)) == 1 + 100 - 3  # the compact file and what it did not remove yet
    assert [m.batch for m in committed_batches(out)] == list(range(100))  # each batch once
    h.commit(acks, 99)  # the restarted driver applies the decision again
    assert os.listdir(directory) == ["compact-0000000099.manifest"]
    assert [m.batch for m in committed_batches(out)] == list(range(100))
    assert committed_batches(out)[99].rows == 2  # not rewritten without its files
    _batches(h, 100, 199)
    assert sorted(os.listdir(directory)) == ["compact-0000000099.manifest", "compact-0000000199.manifest"]
    assert [m.batch for m in committed_batches(out)] == list(range(200))
