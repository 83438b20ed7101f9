"""A savepoint carries, and `eoskit state inspect` shows, the broadcast state its offset entries pin
(eoskit-kafka's ``broadcastTopic``): those versions' snapshots and
pointers, and no other version; a pinned snapshot that is missing is an
error naming it. Synthetic checkpoint trees, the real broadcast store."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from eoskit.connectors.kafka.broadcast import BroadcastPin
from eoskit.connectors.kafka.broadcast_fold import LATEST, BroadcastRecord, fold
from eoskit.connectors.kafka.broadcast_store import BroadcastStore
from eoskit.connectors.kafka.offsets import to_json_dict
from eoskit.runtime.state.checkpoints import Checkpoint
from eoskit.runtime.state.savepoints import SavepointError, create_savepoint, restore_savepoint, savepoint_files

_spec = importlib.util.spec_from_file_location("checkpoint_trees", Path(__file__).with_name("test_checkpoints.py"))
trees = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trees)  # type: ignore[union-attr]


def broadcast_checkpoint(location: str) -> dict[int, BroadcastPin]:
    """Batches 0..4 planned, 0..3 committed; batch n pins rules version n + 1
    (batch 4's pointer not yet published, as when the query stopped after planning it)."""
    trees.make_checkpoint(location, sinks=False, state=False)
    store = BroadcastStore(location, "rules")
    store.claim("rules-topic", "latest", "query-1")
    state, pins = LATEST.initial(), {}
    for n in range(5):
        record = BroadcastRecord(f"r{n}".encode(), b"{}", 0, n, None, (), "rules-topic")
        state = fold(state, [record], LATEST)
        offsets = {("rules-topic", 0): n + 1}
        digest = store.write_snapshot(n + 1, offsets, state, "latest")
        pins[n] = BroadcastPin("rules", n + 1, offsets, digest)
        if n < 4:
            store.publish(n + 1, digest, offsets)
        entry = {**to_json_dict({("orders", 0): 10 * n}), "@broadcast": pins[n].to_json()}
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000 + n * 1000, "conf": {}}
        Path(location, "offsets", str(n)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(entry)}")
    return pins


def test_a_savepoint_copies_the_pinned_versions_only(tmp_path):
    location = str(tmp_path / "ck")
    pins = broadcast_checkpoint(location)
    held = {rel for rel, _ in savepoint_files(Checkpoint(location), 3)}
    broadcast = {rel for rel in held if rel.startswith("eoskit/broadcast/")}
    # offsets/2, 3 and the planned 4 are copied: versions 3, 4 and 5.
    snapshots = {f"eoskit/broadcast/rules/snapshots/{p.version}-{p.digest[7:23]}.arrow"
                 for n, p in pins.items() if n >= 2}
    pointers = {f"eoskit/broadcast/rules/versions/{v}.json" for v in (3, 4)}  # 5 is not published yet
    assert broadcast == snapshots | pointers | {"eoskit/broadcast/rules/broadcast.json"}


def test_a_restored_savepoint_loads_the_pinned_state(tmp_path):
    location = str(tmp_path / "ck")
    pins = broadcast_checkpoint(location)
    create_savepoint(location, str(tmp_path / "sp"), 3, job_name="rules_job")
    restore_savepoint(str(tmp_path / "sp"), str(tmp_path / "restored"))
    restored = BroadcastStore(str(tmp_path / "restored"), "rules")
    restored.publish(5, pins[4].digest, pins[4].offsets)  # what the restored job's replay of batch 4 does
    assert sorted(restored.state(5)) == ["r0", "r1", "r2", "r3", "r4"]
    assert sorted(restored.state(4)) == ["r0", "r1", "r2", "r3"]
    with pytest.raises(Exception, match="missing"):
        restored.state(2)


def test_a_missing_pinned_snapshot_is_refused_by_name(tmp_path):
    location = str(tmp_path / "ck")
    pins = broadcast_checkpoint(location)
    missing = Path(location, "eoskit/broadcast/rules/snapshots", f"4-{pins[3].digest[7:23]}.arrow")
    missing.unlink()
    with pytest.raises(SavepointError, match="offsets/3 pins the broadcast state .*4-.*missing"):
        savepoint_files(Checkpoint(location), 3)


def test_inspection_shows_the_version_a_batch_pinned(tmp_path):
    from eoskit.runtime.cli.state import broadcast_rows
    from eoskit.runtime.state.inspection import broadcast_states

    location = str(tmp_path / "ck")
    pins = broadcast_checkpoint(location)
    [row] = broadcast_states(location)  # the newest committed batch: 3
    assert (row.name, row.topic, row.fold, row.version, row.keys, row.batch, row.versions_kept) == (
        "rules", "rules-topic", "latest", pins[3].version, 4, 3, 4)
    snapshot = Path(location, "eoskit/broadcast/rules/snapshots", f"4-{pins[3].digest[7:23]}.arrow")
    assert row.bytes == snapshot.stat().st_size
    assert broadcast_rows([row])[0][:5] == ("rules", "rules-topic", "latest", "v4", "0:4")
    assert broadcast_states(location, 1)[0].version == 2


def test_the_source_prunes_versions_older_than_the_retained_log_every_period(tmp_path):
    """Step 7 across three pruning periods: as Spark drops old offset
    entries, the versions only they named go, at the next period's end."""
    from types import SimpleNamespace

    from eoskit.connectors.kafka.broadcast import PRUNE_EVERY, BroadcastPlanner

    location = str(tmp_path / "ck")
    broadcast_checkpoint(location)  # offsets/0..4 pin versions 1..5
    settings = SimpleNamespace(broadcast_topic="rules-topic", broadcast_name="rules",
                               checkpoint_location=location, broadcast_fold="latest")
    planner = BroadcastPlanner(settings, metadata=lambda: None)
    folder = Path(location, "eoskit/broadcast/rules")

    def kept() -> set[int]:
        return {int(p.name.split("-")[0]) for p in (folder / "snapshots").iterdir()}

    for period, (drop, oldest) in enumerate([((0, 1), 3), ((2,), 4), ((3,), 5)]):
        for n in drop:  # Spark's retention removes old entries
            Path(location, "offsets", str(n)).unlink()
        for _ in range(PRUNE_EVERY - 1):
            planner.committed()
        assert min(kept()) < oldest, f"period {period}: pruned before its end"
        planner.committed()
        assert min(kept()) == oldest and max(kept()) == 5, f"period {period}: kept {sorted(kept())}"


def test_state_read_prints_a_broadcast_state_s_entries_without_spark(tmp_path, capsys):
    from eoskit.runtime.cli.main import main

    location = str(tmp_path / "ck")
    broadcast_checkpoint(location)
    assert main(["state", "read", "--checkpoint-dir", location, "--broadcast", "rules", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["key"], r["offset"], r["version"]) for r in rows] == [(f"r{n}", n, 4) for n in range(4)]
    assert main(["state", "read", "--checkpoint-dir", location, "--broadcast", "rules", "--version", "2",
                 "--key", "r1"]) == 0
    out = capsys.readouterr().out
    assert "r1" in out and "r0" not in out
    assert main(["state", "read", "--checkpoint-dir", location, "--broadcast", "nope"]) != 0
    assert "pins no broadcast state named 'nope'" in capsys.readouterr().err
    assert main(["state", "read", "--checkpoint-dir", location]) == 2
    assert "--operator ID" in capsys.readouterr().err
