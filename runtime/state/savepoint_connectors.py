"""What connectors keep beside a checkpoint that a savepoint of batch b
copies (``savepoints.savepoint_files``): the files the copied entries name,
none other. Two-phase sinks' operator state is named by their copied
decisions; eoskit-kafka's broadcast state by the copied offset entries. A
named file that is missing raises ``FileNotFoundError`` naming it (the
savepoint would not restore)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eoskit.connectors.kafka.broadcast_snapshot import snapshot_file
from eoskit.connectors.kafka.broadcast_store import FOLDER as BROADCAST_FOLDER
from eoskit.connectors.kafka.broadcast_store import META as BROADCAST_META
from eoskit.connectors.kafka.broadcast_store import VERSIONS as BROADCAST_VERSIONS
from eoskit.connectors.kafka.offsets import BROADCAST_KEY, split_reserved
from eoskit.runtime.state.checkpoints import Checkpoint
from eoskit.twophase.decision_log import DECISIONS, SINKS, sink_folder


def operator_state_files(checkpoint: Checkpoint, kept: list[str], files: Mapping[str, Any]) -> list[str]:
    """The operator state files that the copied decisions name (a decided
    batch's snapshots; the next batch restores from the newest of them)."""
    named = []
    for rel in kept:
        parts = rel.split("/")
        if parts[:2] != SINKS.split("/") or len(parts) != 5 or parts[3] != DECISIONS:
            continue
        state = (checkpoint.read_json(rel) or {}).get("operatorState") or {}
        for name in sorted((state.get("files") or {}).values()):
            path = f"{sink_folder(parts[2])}/{name}"
            if path not in files:
                raise FileNotFoundError(f"{checkpoint.location}/{rel} names the operator state file "
                                     f"{path}, which is missing: the savepoint would not restore it")
            named.append(path)
    return named


def broadcast_files(checkpoint: Checkpoint, batches: list[int], files: Mapping[str, Any]) -> list[str]:
    """The broadcast state (eoskit-kafka's ``broadcastTopic``) that the copied
    offset entries pin: each version's snapshot, its pointer where published
    (a planned b+1's is published by the restored job), and broadcast.json."""
    named: list[str] = []
    for batch in batches:
        for source in checkpoint.batch(batch).offsets:
            pin = split_reserved(source)[1].get(BROADCAST_KEY) if isinstance(source, dict) else None
            if not isinstance(pin, dict) or not pin.get("version"):
                continue
            folder = f"{BROADCAST_FOLDER}/{pin['name']}"
            snapshot = f"{folder}/{snapshot_file(int(pin['version']), str(pin['digest']))}"
            if snapshot not in files:
                raise FileNotFoundError(f"{checkpoint.location}/offsets/{batch} pins the broadcast state "
                                     f"{snapshot}, which is missing: the savepoint would not restore it")
            named += [snapshot, f"{folder}/{BROADCAST_META}"]
            pointer = f"{folder}/{BROADCAST_VERSIONS}/{pin['version']}.json"
            if pointer in files:
                named.append(pointer)
    return named
