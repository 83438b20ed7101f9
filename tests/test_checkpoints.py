"""Reading checkpoint directories (``eoskit.runtime.state.checkpoints``) and ``eoskit
checkpoint list|inspect``, on synthetic trees laid out as Spark 4 writes them
(checked against real checkpoints by integration_tests/test_savepoints.py).

The tree builder here is shared with tests/test_savepoints.py.
"""

from __future__ import annotations

import json
import struct
import uuid
import zipfile
from io import BytesIO
from pathlib import Path

import fsspec
import pyarrow as pa
import pytest

from eoskit.runtime.state.checkpoints import Checkpoint, CheckpointError, open_location
from eoskit.runtime.cli.main import main

TOPIC = "orders"


# -- a synthetic checkpoint ------------------------------------------------------------

def lz4_blocks(payload: bytes, compress: bool = True) -> bytes:
    """lz4-java's LZ4BlockOutputStream framing, as Spark's state files use it."""
    block = pa.Codec("lz4_raw").compress(payload, asbytes=True) if compress else payload
    token = 0x25 if compress else 0x15
    return (b"LZ4Block" + bytes([token]) + struct.pack("<iii", len(block), len(payload), 0) + block
            + b"LZ4Block" + bytes([0x15]) + struct.pack("<iii", 0, 0, 0))


def store_file(records: list[tuple[str, bytes | None]], compress: bool = True) -> bytes:
    """A delta/snapshot/changelog file: (key, value or None for a removal)."""
    out = b""
    for key, value in records:
        out += struct.pack(">i", len(key)) + key.encode()
        out += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    return lz4_blocks(out + struct.pack(">i", -1), compress)


def rocksdb_zip(num_keys: int) -> bytes:
    buffer = BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("metadata", "v1\n" + json.dumps({"sstFiles": [], "numKeys": num_keys}))
        archive.writestr("CURRENT", "MANIFEST-000005\n")
    return buffer.getvalue()


def end_offsets(batch: int) -> dict:
    return {TOPIC: {"0": 10 * (batch + 1), "1": 5 * (batch + 1)}}


class Tree:
    """Writes files under a checkpoint (or any) location, with Hadoop's .crc beside Spark's."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.fs, self.root = open_location(location)

    def write(self, rel: str, data: bytes | str, crc: bool = True) -> None:
        data = data.encode() if isinstance(data, str) else data
        path = f"{self.root}/{rel}"
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(path, data)
        if crc:
            directory, name = rel.rsplit("/", 1) if "/" in rel else ("", rel)
            self.fs.pipe_file(f"{self.root}/{directory + '/' if directory else ''}.{name}.crc", b"crc!")

    def json(self, rel: str, payload: dict) -> None:
        self.write(rel, json.dumps(payload), crc=False)


def make_checkpoint(location: str, planned: int = 5, committed: int = 4, state: bool = True,
                    sinks: bool = True) -> Tree:
    """Batches 0..planned-1 in the offset log, 0..committed-1 committed; a
    two-phase sink ``pg1`` (decisions for every planned batch, the last one
    aborted too), a task-commit sink ``kf1``; an HDFS operator 0 and a RocksDB
    operator 1, two partitions each, state versions 1..planned."""
    tree = Tree(location)
    tree.write("metadata", json.dumps({"id": "query-1"}))
    for n in range(planned):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000 + n * 1000, "conf": {}}
        tree.write(f"offsets/{n}", f"v1\n{json.dumps(meta)}\n{json.dumps(end_offsets(n))}")
        if n < committed:
            tree.write(f"commits/{n}", 'v1\n{"nextBatchWatermarkMs":0}')
    if sinks:
        tree.json("eoskit/sinks/pg1/sink.json", {"sinkId": "pg1", "createdAt": 1.0,
                                                  "checkpointLocation": location})
        for n in range(planned):
            status = "done" if n < committed else "decided"
            tree.json(f"eoskit/sinks/pg1/decisions/{n}.json", {"batch": n, "commit": [], "status": status})
        tree.json(f"eoskit/sinks/pg1/aborted/{planned}.json", {"batch": planned})
        tree.json("eoskit/sinks/kf1/sink.json", {"sinkId": "kf1", "createdAt": 2.0})
        tree.json("eoskit/sinks/kf1/meta/kafka-tasks.json", {"partitions": 2, "batch": 0})
    if state:
        write_state(tree, versions=planned)
    return tree


def hdfs_rows(version: int) -> int:
    """Keys per partition of operator 0 at ``version`` (see write_state)."""
    keys = set()
    for v in range(1, version + 1):
        keys.add(f"k{v}")
        if v == 2:
            keys.add("snap")  # only in the snapshot of version 2
        if v == 3:
            keys.discard("k1")
    return len(keys)


def write_state(tree: Tree, versions: int) -> None:
    tree.write("state/0/_metadata/metadata", 'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"dedupe"},'
               '"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":2}]}')
    tree.write("state/1/_metadata/v2/0", "v2\n" + json.dumps({
        "operatorInfo": {"operatorId": 1, "operatorName": "tws"},
        "stateStoreInfo": [{"storeName": "default", "numPartitions": 2, "stateSchemaFilePaths": [
            "file:/old/ck/state/1/_stateSchema/default/0_aaa"]}]}))
    tree.write(f"state/1/_metadata/v2/{versions - 1}", 'v2\n{"operatorInfo":{"operatorId":1,"operatorName":"tws"}}')
    tree.write("state/1/_stateSchema/default/0_aaa", b"schema-0", crc=False)
    tree.write(f"state/1/_stateSchema/default/{versions - 1}_bbb", b"schema-late", crc=False)
    for p in (0, 1):
        tree.write(f"state/0/{p}/_metadata/schema", b"\x00\x02v2 schema")
        for v in range(1, versions + 1):
            records: list[tuple[str, bytes | None]] = [(f"k{v}", b"1")]
            if v == 3:
                records.append(("k1", None))
            tree.write(f"state/0/{p}/{v}.delta", store_file(records, compress=v % 2 == 0))
            tree.write(f"state/1/{p}/{v}.changelog", store_file([(f"r{v}", b"x")]))
            if v in (3, versions):
                tree.write(f"state/1/{p}/{v}.zip", rocksdb_zip(10 * v))
        tree.write(f"state/0/{p}/2.snapshot", store_file([("k1", b"1"), ("k2", b"1"), ("snap", b"1")]))
        tree.write(f"state/1/{p}/SSTs/000001-{uuid.uuid4()}.sst", b"sst", crc=False)


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> str:
    make_checkpoint(str(tmp_path / "ck"))
    return str(tmp_path / "ck")


# -- the reader ----------------------------------------------------------------------------

def test_batches_carry_time_offsets_commits_and_each_sinks_decision(checkpoint_dir):
    checkpoint = Checkpoint(checkpoint_dir)
    batches = checkpoint.batches()
    assert [b.batch for b in batches] == [0, 1, 2, 3, 4]
    assert [b.committed for b in batches] == [True, True, True, True, False]
    assert batches[2].offsets == (end_offsets(2),)
    assert batches[2].timestamp_ms == 1_700_000_002_000 and batches[2].watermark_ms == 0
    assert batches[2].written_at is not None
    assert [b.sinks["pg1"] for b in batches] == ["done"] * 4 + ["decided"]
    assert all(b.sinks["kf1"] == "none" for b in batches)
    assert checkpoint.latest_committed() == 3 and checkpoint.query_id() == "query-1"
    assert checkpoint.batch(4) == batches[4]


def test_an_aborted_batch_without_decision_and_non_json_offsets(tmp_path):
    tree = make_checkpoint(str(tmp_path / "ck"), planned=2, committed=1, state=False)
    tree.write("offsets/2", 'v1\n{"batchTimestampMs": 5}\n{"t": {"0": 1}}\n-\nFileSource[7]\n')
    tree.fs.rm(f"{tree.root}/eoskit/sinks/pg1/decisions/1.json")
    checkpoint = Checkpoint(tree.location)
    assert checkpoint.batch(2).offsets == ({"t": {"0": 1}}, None, "FileSource[7]")
    assert [b.sinks["pg1"] for b in checkpoint.batches()] == ["done", "none", "aborted"]


def test_sinks_are_listed_with_their_decisions_and_metadata(checkpoint_dir):
    kf, pg = Checkpoint(checkpoint_dir).sinks()
    assert (pg.sink_id, pg.decided_batches, pg.created_at) == ("pg1", (0, 1, 2, 3, 4), 1.0)
    assert (kf.sink_id, kf.decided_batches, kf.meta) == ("kf1", (), ("kafka-tasks",))


def test_state_operators_are_summed_from_the_files(checkpoint_dir):
    hdfs, rocks = Checkpoint(checkpoint_dir).state_operators()
    assert (hdfs.operator_id, hdfs.name, hdfs.provider, hdfs.partitions) == (0, "dedupe", "hdfs", 2)
    assert hdfs.versions == (1, 5) and hdfs.version == 4  # latest committed 3, so version 4
    assert hdfs.files == 2 * (5 + 1 + 1) + 1  # deltas, snapshot, schema per partition; operator metadata
    assert hdfs.rows == 2 * hdfs_rows(4) == 2 * 4
    assert (rocks.name, rocks.provider, rocks.rows) == ("tws", "rocksdb", None)  # changelog over a zip
    assert Checkpoint(checkpoint_dir).state_operators(3)[1].rows == 2 * 30  # the zip of version 3
    assert Checkpoint(checkpoint_dir).state_operators(2)[1].rows == 2 * 2  # changelogs from empty
    assert [op.rows for op in Checkpoint(checkpoint_dir).state_operators(1)] == [2, 2]
    expected = sum(f.stat().st_size for f in (Path(checkpoint_dir) / "state/0").rglob("*") if f.is_file())
    assert hdfs.bytes == expected


def test_rows_are_unknown_when_the_files_cannot_tell(tmp_path):
    tree = make_checkpoint(str(tmp_path / "ck"))
    tree.fs.rm(f"{tree.root}/state/0/1/4.delta")
    assert Checkpoint(tree.location).state_operators(4)[0].rows is None
    tree.write("state/0/1/4.delta", b"\x28\xb5\x2f\xfd zstd, not lz4")
    assert Checkpoint(tree.location).state_operators(4)[0].rows is None
    assert Checkpoint(tree.location).state_operators(3)[0].rows == 2 * hdfs_rows(3)


def test_memory_and_hadoop_file_urls_are_read_like_local_paths(tmp_path):
    name = f"memory://ck-{uuid.uuid4().hex[:8]}"
    make_checkpoint(name, planned=2, committed=2)
    try:
        assert Checkpoint(name).latest_committed() == 1
        assert Checkpoint(name).state_operators()[0].rows == 2 * hdfs_rows(2)
    finally:
        fsspec.filesystem("memory").rm(name[len("memory://"):], recursive=True)
    make_checkpoint(str(tmp_path / "ck"), planned=1, committed=1, state=False)
    assert Checkpoint(f"file:{tmp_path}/ck").batch_ids() == [0]


def test_storage_options_go_to_the_file_system_of_their_protocol(tmp_path):
    fs, _ = open_location(str(tmp_path), {"file": {"auto_mkdir": True}, "s3": {"anon": True}})
    assert fs.auto_mkdir is True


@pytest.mark.parametrize("setup, expected", [
    (lambda p: None, "checkpoint {p}: no such directory"),
    (lambda p: p.write_text("x"), "checkpoint {p} is a file"),
    (lambda p: (p.mkdir(), (p / "data.parquet").write_text("x")), "{p} is not a Spark checkpoint directory"),
], ids=["missing", "file", "other-directory"])
def test_bad_paths_are_named(tmp_path, setup, expected):
    path = tmp_path / "ck"
    setup(path)
    with pytest.raises(CheckpointError) as err:
        Checkpoint(str(path))
    assert expected.format(p=path) in str(err.value)


def test_a_batch_that_is_not_retained_is_named_with_what_is(checkpoint_dir):
    with pytest.raises(CheckpointError, match=r"batch 9 is not in the offset log of .* \(retained: 0\.\.4\)"):
        Checkpoint(checkpoint_dir).batch(9)


def test_a_corrupt_offset_file_is_named(tmp_path):
    tree = make_checkpoint(str(tmp_path / "ck"), planned=1, committed=1, state=False)
    tree.write("offsets/1", "garbage")
    with pytest.raises(CheckpointError, match="offsets/1 is not a Spark offset log entry"):
        Checkpoint(tree.location).batches()


# -- the commands ------------------------------------------------------------------------

def test_checkpoint_list_shows_a_table_and_json(checkpoint_dir, capsys):
    assert main(["checkpoint", "list", checkpoint_dir]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"checkpoint {checkpoint_dir} (query query-1): 5 retained")
    assert lines[1].split() == ["batch", "time", "committed", "end", "offsets", "sink", "kf1", "sink", "pg1"]
    assert lines[4].split() == ["2", "2023-11-14T22:13:22.000Z", "yes", "orders", "0:30", "1:15", "-", "done"]
    assert lines[6].split()[2] == "no" and lines[6].split()[-1] == "decided"
    assert main(["checkpoint", "list", checkpoint_dir, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["latestCommitted"] == 3
    assert data["batches"][4] == dict(data["batches"][4], committed=False, offsets=[end_offsets(4)])


def test_checkpoint_inspect_shows_one_batch_with_sinks_and_state(checkpoint_dir, capsys):
    assert main(["checkpoint", "inspect", checkpoint_dir]) == 0
    out = capsys.readouterr().out
    assert "batch       3 (committed); retained 0..4, latest committed 3" in out
    assert ["0", "orders", "1", "20"] in [line.split() for line in out.splitlines()]
    assert any(line.split() == ["0", "dedupe", "hdfs", "2", "1..5", "15", str(
        Checkpoint(checkpoint_dir).state_operators()[0].bytes), "8"] for line in out.splitlines())
    assert main(["checkpoint", "inspect", checkpoint_dir, "--batch", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["batch"]["offsets"] == [end_offsets(1)]
    assert {s["sinkId"]: s["decision"] for s in data["sinks"]} == {"kf1": "none", "pg1": "done"}
    assert [op["rows"] for op in data["stateOperators"]] == [2 * hdfs_rows(2), 4]


def test_checkpoint_commands_name_a_bad_path(tmp_path, capsys):
    assert main(["checkpoint", "list", str(tmp_path / "nope")]) == 2  # bad input (runtime/cli/errors.py)
    assert capsys.readouterr().err.strip() == f"eoskit checkpoint list: checkpoint {tmp_path / 'nope'}: no such directory"
    make_checkpoint(str(tmp_path / "ck"), planned=2, committed=2, state=False)
    assert main(["checkpoint", "inspect", str(tmp_path / "ck"), "--batch", "7"]) == 2
    assert "batch 7 is not in the offset log" in capsys.readouterr().err
