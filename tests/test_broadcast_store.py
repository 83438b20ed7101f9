"""The broadcast state's folder (connectors/kafka/broadcast_store.py): snapshot
write and read, digest, pointer idempotence, claim, the GC rule; on the
local file system and on fsspec's memory://."""

from __future__ import annotations

import json
import uuid

import fsspec
import pyarrow as pa
import pytest

from eoskit.connectors.kafka import broadcast_store
from eoskit.connectors.kafka.broadcast_fold import (
    LATEST,
    BroadcastRecord,
    BroadcastTooLarge,
    LatestEntry,
    fold,
    resolve_fold,
)
from eoskit.connectors.kafka.broadcast_store import (
    BroadcastSnapshotCorrupt,
    BroadcastSnapshotMissing,
    BroadcastState,
    BroadcastStore,
    digest_of,
    snapshot_file,
)
from eoskit.core.options import OptionError
from eoskit.twophase.verdicts import Verdict, verdict_of

COUNT = "eoskit.testing.broadcast_folds:count_by_key"
OFFSETS = {"fraud-rules": {"1": 7, "0": 415}}


@pytest.fixture(params=["local", "memory"])
def location(request, tmp_path):
    broadcast_store.clear_cache()
    if request.param == "local":
        yield str(tmp_path / "ck")
    else:
        root = f"memory://bstore-{uuid.uuid4().hex}/ck"
        yield root
        memory = fsspec.filesystem("memory")
        if memory.exists(root.replace("memory://", "/")):
            memory.rm(root.replace("memory://", "/"), recursive=True)
    broadcast_store.clear_cache()


def rec(key, value, partition=0, offset=0, ts=None):
    return BroadcastRecord(key and key.encode(), value and value.encode(), partition, offset, ts)


def latest_state():
    return fold({}, [rec("b", "2", 0, 1, 1_700_000_000_123), rec("a", "1", 1, 0), rec("\u00e9", "3", 0, 2),
                     BroadcastRecord(b"\xff\xfe", b"x", 0, 3, None)], LATEST)


def store_with(location, version=1, state=None, spec="latest"):
    store = BroadcastStore(location, "rules")
    store.claim("fraud-rules", spec, "q-1")
    digest = store.write_snapshot(version, OFFSETS, latest_state() if state is None else state, spec)
    return store, digest


def test_layout_and_latest_round_trip(location):
    store, digest = store_with(location, version=3)
    store.publish(3, digest, OFFSETS)
    fs = store.fs
    names = sorted(p.rsplit(store.folder + "/", 1)[1] for p in fs.find(store.folder))
    assert names == ["broadcast.json", snapshot_file(3, digest), "versions/3.json"]
    assert digest.startswith("sha256:") and snapshot_file(3, digest) == f"snapshots/3-{digest[7:23]}.arrow"
    assert digest == digest_of(fs.cat_file(f"{store.folder}/{snapshot_file(3, digest)}"))
    broadcast_store.clear_cache()
    state, offsets = store.load(3)
    assert state == latest_state()
    assert offsets == {"fraud-rules": {"0": 415, "1": 7}}


def test_latest_snapshot_columns_sorted_keys_and_metadata(location):
    store, digest = store_with(location, version=2)
    data = store.fs.cat_file(f"{store.folder}/{snapshot_file(2, digest)}")
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    assert table.schema.field("timestamp").type == pa.timestamp("ms")
    assert table.schema.field("partition").type == pa.int32()
    keys = table.column("key").to_pylist()
    assert keys == sorted(latest_state())
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert meta["name"] == "rules" and meta["version"] == "2" and meta["fold"] == "latest"
    assert json.loads(meta["offsets"]) == {"fraud-rules": {"0": 415, "1": 7}}


def test_user_fold_is_one_row_of_canonical_json(location):
    count = resolve_fold(COUNT)
    state = fold(count.initial(), [rec("z", "1"), rec("a", None, 0, 1), rec("z", "2", 0, 2)], count)
    store, digest = store_with(location, state=state, spec=COUNT)
    data = store.fs.cat_file(f"{store.folder}/{snapshot_file(1, digest)}")
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    assert table.column_names == ["state"] and table.schema.field("state").type == pa.large_binary()
    assert table.column("state")[0].as_py() == json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
    broadcast_store.clear_cache()
    assert store.load(1, digest)[0] == state
    view = store.state(1, digest)
    assert dict(view) == state and view.value == state and view.version == 1


def test_state_view_decodes_keys_and_values_once(location):
    store, digest = store_with(location)
    store.publish(1, digest, OFFSETS)
    calls = []

    def decode(value):
        calls.append(value)
        return value.decode().upper()

    view = store.state(1, decode=decode)
    assert isinstance(view, BroadcastState)
    assert dict(view) == {"a": "1", "b": "2", "\u00e9": "3", b"\xff\xfe": "X"}
    assert view.version == 1 and view.offsets == {"fraud-rules": {"0": 415, "1": 7}}
    assert store.state(1, decode=decode) is view and len(calls) == 4
    with pytest.raises(TypeError):
        view["a"] = "new"  # read-only
    assert store.state(1)["a"] == b"1"  # no decode: bytes unchanged


def test_version_zero_is_the_initial_state_without_a_file(location):
    store = BroadcastStore(location, "rules")
    store.claim("fraud-rules", "latest", "q-1")
    assert store.load(0) == ({}, {})
    assert len(store.state(0)) == 0
    other = BroadcastStore(location, "counts")
    other.claim("fraud-rules", COUNT, "q-1")
    assert other.load(0) == ({}, {})
    store.publish(0, "sha256:none", {})  # nothing to publish
    assert store.versions() == []


def test_digest_check_catches_a_corrupted_file(location):
    store, digest = store_with(location)
    store.publish(1, digest, OFFSETS)
    path = f"{store.folder}/{snapshot_file(1, digest)}"
    data = bytearray(store.fs.cat_file(path))
    data[len(data) // 2] ^= 0xFF
    store.fs.pipe_file(path, bytes(data))
    broadcast_store.clear_cache()
    with pytest.raises(BroadcastSnapshotCorrupt, match=snapshot_file(1, digest)) as info:
        store.load(1)
    assert verdict_of(info.value) is Verdict.PERMANENT


def test_pointer_is_idempotent_same_bytes(location):
    store, digest = store_with(location, version=4)
    store.publish(4, digest, {("fraud-rules", 1): 7, ("fraud-rules", 0): 415})
    path = f"{store.folder}/versions/4.json"
    first = store.fs.cat_file(path)
    store.publish(4, digest, OFFSETS)
    assert store.fs.cat_file(path) == first
    assert json.loads(first) == {"version": 4, "digest": digest, "file": snapshot_file(4, digest),
                                 "offsets": {"fraud-rules": {"0": 415, "1": 7}}}


def test_publish_refuses_a_missing_snapshot_and_load_names_the_path(location):
    store = BroadcastStore(location, "rules")
    ghost = "sha256:" + "ab" * 32
    with pytest.raises(BroadcastSnapshotMissing, match=f"5-{'ab' * 8}.arrow") as info:
        store.publish(5, ghost, OFFSETS)
    assert verdict_of(info.value) is Verdict.PERMANENT
    assert not store.fs.exists(f"{store.folder}/versions/5.json")
    with pytest.raises(BroadcastSnapshotMissing, match="versions/5.json"):
        store.load(5)
    with pytest.raises(BroadcastSnapshotMissing, match=f"5-{'ab' * 8}.arrow"):
        store.load(5, ghost)


def test_load_by_digest_without_a_pointer(location):
    store, digest = store_with(location, version=2)
    assert store.load(2, digest)[0] == latest_state()


def test_size_limit_writes_nothing(location):
    store = BroadcastStore(location, "rules")
    with pytest.raises(BroadcastTooLarge, match="broadcastMaxBytes=10"):
        store.write_snapshot(1, OFFSETS, latest_state(), "latest", max_bytes=10)
    assert not store.fs.exists(f"{store.folder}/snapshots")
    assert store.write_snapshot(1, OFFSETS, latest_state(), "latest", max_bytes=1 << 20)


def test_claim_writes_once_and_refuses_another_query_topic_or_fold(location):
    store = BroadcastStore(location, "rules")
    meta = store.claim("fraud-rules", "Latest", "q-1")
    assert (meta["name"], meta["topic"], meta["fold"], meta["queryId"]) == ("rules", "fraud-rules", "latest", "q-1")
    assert store.claim("fraud-rules", "latest", "q-1")["createdAt"] == meta["createdAt"]
    for args, says in [(("fraud-rules", "latest", "q-2"), "checkpointLocation"),
                       (("other", "latest", "q-1"), "broadcastTopic"),
                       (("fraud-rules", COUNT, "q-1"), "broadcastFold")]:
        with pytest.raises(OptionError, match=says) as info:
            store.claim(*args)
        assert store.url in str(info.value)
    assert store.meta() == meta


@pytest.mark.parametrize("name", ["a/b", "..", "", "ru les"])
def test_bad_names_refused(name, tmp_path):
    with pytest.raises(OptionError, match="broadcastName"):
        BroadcastStore(str(tmp_path), name)


def test_gc_rule(location):
    store = BroadcastStore(location, "rules")
    store.claim("fraud-rules", "latest", "q-1")
    digests = {}
    for v in range(1, 7):
        state = fold({}, [rec("k", str(v))], LATEST)
        digests[v] = store.write_snapshot(v, {"fraud-rules": {"0": v}}, state, "latest")
        if v <= 4:
            store.publish(v, digests[v], {"fraud-rules": {"0": v}})
    # An orphan of version 3 (a planning attempt that was never logged), one of 6 above the log.
    orphan3 = store.write_snapshot(3, {"fraud-rules": {"0": 33}}, {b"x": LatestEntry(b"y", 0, 1, None)}, "latest")
    orphan6 = store.write_snapshot(6, {"fraud-rules": {"0": 66}}, {}, "latest")
    assert orphan3 != digests[3] and orphan6 != digests[6]

    removed = store.gc(oldest_needed_version=2, newest_logged_version=5)

    def left():
        return sorted(p.rsplit(store.folder + "/", 1)[1] for p in store.fs.find(store.folder))
    assert sorted(r.rsplit(store.folder + "/", 1)[1] for r in removed) == sorted(
        ["versions/1.json", snapshot_file(1, digests[1]), snapshot_file(3, orphan3)])
    assert left() == sorted(["broadcast.json"]
                            + [snapshot_file(v, digests[v]) for v in range(2, 7)]
                            + [f"versions/{v}.json" for v in (2, 3, 4)]
                            + [snapshot_file(6, orphan6)])
    # Version 5 has no pointer yet (logged, not published): kept. Above the log: untouched.
    assert store.gc(2, 5) == []
    assert store.load(3)[0] == {b"k": LatestEntry(b"3", 0, 0, None)}
    # A pointer that names no digest proves nothing orphaned: both files of version 5 stay.
    store.write_snapshot(5, {"fraud-rules": {"0": 55}}, {}, "latest")
    store.fs.pipe_file(f"{store.folder}/versions/5.json", b"{}")
    assert store.gc(2, 5) == []


def test_describe_and_versions(location):
    store, digest = store_with(location, version=2)
    store.publish(2, digest, OFFSETS)
    assert store.versions() == [2]
    info = store.describe()
    assert (info["name"], info["topic"], info["fold"]) == ("rules", "fraud-rules", "latest")
    [row] = info["versions"]
    size = len(store.fs.cat_file(f"{store.folder}/{snapshot_file(2, digest)}"))
    assert row["version"] == 2 and row["keys"] == len(latest_state()) and row["bytes"] == size
    assert row["digest"] == digest and row["digestOk"] is True


def test_loaded_states_are_cached_two_per_folder(location, monkeypatch):
    store = BroadcastStore(location, "rules")
    store.claim("fraud-rules", "latest", "q-1")
    digests = {v: store.write_snapshot(v, OFFSETS, fold({}, [rec("k", str(v))], LATEST), "latest")
               for v in (1, 2, 3)}
    reads = []
    real = store.fs.cat_file
    monkeypatch.setattr(store.fs, "cat_file", 
                        lambda path, *a, **k: (path.endswith(".arrow") and reads.append(path)) or real(path, *a, **k))
    for v in (1, 2, 1, 2):
        store.load(v, digests[v])
    assert len(reads) == 2
    store.load(3, digests[3])  # evicts 1, the least recently used
    store.load(2, digests[2])
    assert len(reads) == 3
    store.load(1, digests[1])
    assert len(reads) == 4
    store.publish(1, digests[1], OFFSETS)
    assert store.load(1) is store.load(1, digests[1])  # through the pointer, the same cached entry
    assert len(reads) == 4
