"""What a checkpoint's keyed state holds, read through Spark's own state data
sources: ``state-metadata`` (operators, stores, partitions, batches, the
state variables of ``transformWithState``) and ``statestore`` (the keys and
values themselves).

Why: an operator needs to see the state of a stopped (or running) job --
which operators keep state, how many keys, how big, what one key holds --
the way Flink's State Processor API lets them read a savepoint. Spark's
sources do the reading, whatever the backend and the state format;
``eoskit.runtime.state.checkpoints`` adds the bytes on disk. ``eoskit state
inspect`` and ``eoskit state read`` print them; ``eoskit savepoint inspect
--state`` summarises a savepoint's state the same way, from a temporary
restore of it (a savepoint's ``transformWithState`` metadata names schema
files by the absolute path of the checkpoint it was taken from, which
``restore_savepoint`` repoints).

The summary also lists the operator state of each two-phase sink whose
writers keep some (``KeepsOperatorState``): not in Spark's state store but
in the sink's decisions, read here with pyarrow (``operator_states``).
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from eoskit.runtime.spark.errors import root_cause
from eoskit.runtime.state.checkpoints import Checkpoint, CheckpointError, StorageOptions
from eoskit.runtime.state.backend import PROVIDER_KEY, backend_of
from eoskit.runtime.state.savepoints import restore_savepoint
from eoskit.twophase.decision_log import DECISIONS, DecidedState, batch_file, sink_folder
from eoskit.connectors.kafka.broadcast_fold import LatestEntry
from eoskit.connectors.kafka.broadcast_snapshot import snapshot_file
from eoskit.connectors.kafka.broadcast_store import BroadcastStore
from eoskit.connectors.kafka.offsets import BROADCAST_KEY, split_reserved
from eoskit.twophase.operator_state import decode

log = logging.getLogger(__name__)

#: Spark's name for the operator of ``transformWithState`` starts so.
_TWS = "transformWithState"
#: A summary row for the timers of a transformWithState operator.
TIMERS = "(timers)"
#: Spark's number of state partitions, recorded with every batch.
PARTITIONS_KEY = "spark.sql.shuffle.partitions"


class StateInspectError(ValueError):
    """A state read that cannot be answered: names the checkpoint, operator,
    store or state variable at fault, and what there is."""


@dataclass(frozen=True)
class StateRow:
    """One store of a stateful operator, or one state variable of a
    ``transformWithState`` operator (or its timers)."""

    operator_id: int
    operator_name: str
    store: str
    #: The transformWithState state variable (or ``(timers)``); None for other operators.
    variable: str | None
    #: ValueState, ListState, MapState, timers; None for other operators.
    kind: str | None
    ttl: bool
    partitions: int
    batches: tuple[int, int]
    #: Distinct keys and entries (list elements, map entries; a key's one row otherwise).
    keys: int | None
    entries: int | None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["batches"] = list(self.batches)
        return {_camel(k): v for k, v in data.items()}


@dataclass(frozen=True)
class OperatorStateRow:
    """One operator state of a sink's writers, as the batch ``batch``
    decided it (what the next batch's writers restore)."""

    sink_id: str
    name: str
    kind: str
    parallelism: int
    #: Elements over every instance's part (a union state gives each instance all of them).
    elements: int
    batch: int

    def to_json(self) -> dict[str, Any]:
        return {_camel(k): v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class BroadcastRow:
    """The broadcast state (eoskit-kafka's ``broadcastTopic``) that batch
    ``batch``'s offset entry pins: what its tasks judged rows by."""

    name: str
    topic: str
    fold: str
    version: int
    #: the rules topic's offsets folded into it, ``{topic: {partition: offset}}``
    offsets: dict[str, Any]
    keys: int | None
    bytes: int | None
    #: versions with a published pointer beside the checkpoint
    versions_kept: int
    batch: int

    def to_json(self) -> dict[str, Any]:
        return {_camel(k): v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class StateSummary:
    checkpoint: str
    #: The committed batch whose state was read (the state the next batch loads).
    batch: int | None
    backend: str | None
    rows: tuple[StateRow, ...]
    #: Bytes and files on disk per operator id (every retained version).
    bytes: dict[int, int]
    files: dict[int, int]
    #: The sinks' operator state (``operator_states``).
    operator_state: tuple[OperatorStateRow, ...] = ()
    #: The broadcast state the batch pins (``broadcast_states``).
    broadcast: tuple[BroadcastRow, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "batch": self.batch, "backend": self.backend,
                "stores": [row.to_json() for row in self.rows],
                "operatorState": [row.to_json() for row in self.operator_state],
                "broadcastState": [row.to_json() for row in self.broadcast],
                "operators": [{"operatorId": op, "bytes": self.bytes[op], "files": self.files.get(op, 0)}
                              for op in sorted(self.bytes)]}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass(frozen=True)
class _Operator:
    operator_id: int
    name: str
    store: str
    partitions: int
    batches: tuple[int, int]
    properties: dict[str, Any]

    @property
    def tws(self) -> bool:
        return self.name.startswith(_TWS)

    def variables(self) -> list[dict[str, Any]]:
        return list(self.properties.get("stateVariables") or ())

    def has_timers(self) -> bool:
        return self.tws and self.properties.get("timeMode", "NoTime") != "NoTime"


def _location(checkpoint: str) -> tuple[Checkpoint, str]:
    ck = Checkpoint(checkpoint)  # refuses a path that is no checkpoint, naming it
    return ck, ck.url


def operators(spark: SparkSession, checkpoint: str) -> list[_Operator]:
    """The stateful operators of ``checkpoint``, from Spark's ``state-metadata`` source."""
    ck, url = _location(checkpoint)
    if not ck.fs.exists(ck.path("state")):
        return []  # a stateless query
    rows = spark.read.format("state-metadata").load(url).collect()
    out = []
    for row in rows:
        try:
            properties = json.loads(row.operatorProperties) if row.operatorProperties else {}
        except json.JSONDecodeError:
            properties = {}
        out.append(_Operator(int(row.operatorId), row.operatorName, row.stateStoreName,
                             int(row.numPartitions), (int(row.minBatchId), int(row.maxBatchId)),
                             properties))
    return sorted(out, key=lambda op: (op.operator_id, op.store))


def _reader(spark: SparkSession, url: str, op: _Operator, batch: int | None):
    reader = spark.read.format("statestore").option("operatorId", op.operator_id)
    if not op.tws:
        reader = reader.option("storeName", op.store)
    if batch is not None:
        reader = reader.option("batchId", batch)
    return reader


def _counts(df: DataFrame) -> tuple[int, int]:
    row = df.agg(F.countDistinct("key").alias("keys"), F.count(F.lit(1)).alias("entries")).collect()[0]
    return int(row.keys), int(row.entries)


def _counts_or_unknown(reader: Any, url: str) -> tuple[int | None, int | None]:
    """Counts of a transformWithState variable; unknown where Spark cannot
    read it (Spark 4.3 cannot read the state of an operator with event-time
    timers: STATE_STORE_CANNOT_CREATE_COLUMN_FAMILY_WITH_RESERVED_CHARS)."""
    try:
        return _counts(reader.load(url))
    except PySparkException:
        return None, None


def broadcast_states(checkpoint: str | Checkpoint, batch: int | None = None) -> list[BroadcastRow]:
    """The broadcast state batch ``batch`` (default: the newest committed)
    pins, read with pyarrow beside the checkpoint; no Spark."""
    ck = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint(checkpoint)
    if batch is None:
        committed = ck.committed_ids()
        if not committed:
            return []
        batch = max(committed)
    rows = []
    for source in ck.batch(batch).offsets:
        pin = split_reserved(source)[1].get(BROADCAST_KEY) if isinstance(source, dict) else None
        if not isinstance(pin, dict):
            continue
        store = BroadcastStore(ck.location, str(pin["name"]), ck.storage_options)
        described = store.describe()
        keys = size = None
        if pin.get("version"):
            try:
                state, _ = store.load(int(pin["version"]), pin.get("digest"))
                keys = len(state) if isinstance(state, dict) else None
                size = store.fs.size(f"{store.folder}/{snapshot_file(int(pin['version']), pin['digest'])}")
            except Exception as exc:  # noqa: BLE001 - shown, not fatal: the rest of the summary stands
                log.warning("broadcast %s version %s: %s", pin["name"], pin["version"], exc)
        else:
            keys = 0
        rows.append(BroadcastRow(str(pin["name"]), str(described.get("topic", "?")),
                                 str(described.get("fold", "?")), int(pin.get("version") or 0),
                                 dict(pin.get("offsets") or {}), keys, size,
                                 len(described.get("versions") or ()), batch))
    return rows


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + value.hex()


def broadcast_entries(checkpoint: str | Checkpoint, name: str, batch: int | None = None,
                      version: int | None = None, key: str | None = None,
                      limit: int | None = 100) -> list[dict[str, Any]]:
    """The entries of broadcast state ``name``: of ``version``, or of the
    version batch ``batch`` (default: the newest committed) pins; no Spark.
    ``latest``: one row per key (key and value as text, or ``0x`` hex, and
    where it was read); a user fold: one row, its state."""
    ck = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint(checkpoint)
    if version is None:
        pinned = [row for row in broadcast_states(ck, batch) if row.name == name]
        if not pinned:
            raise CheckpointError(f"batch {batch if batch is not None else 'last committed'} of "
                                  f"{ck.location} pins no broadcast state named {name!r}")
        version = pinned[0].version
    store = BroadcastStore(ck.location, name, ck.storage_options)
    state, _ = store.load(version)
    if not (isinstance(state, dict) and all(isinstance(e, LatestEntry) for e in state.values())):
        return [{"version": version, "state": state}]
    rows = []
    for raw in sorted(state):
        text = _text(raw)
        if key is not None and text != key:
            continue
        entry = state[raw]
        rows.append({"key": text, "value": _text(entry.value), "partition": entry.partition,
                     "offset": entry.offset, "timestampMs": entry.timestamp_ms, "version": version})
        if limit is not None and len(rows) >= limit:
            break
    return rows


def operator_states(checkpoint: str | Checkpoint, batch: int | None = None) -> list[OperatorStateRow]:
    """Each sink's operator state as the newest decision up to ``batch``
    (default: any) that has some decided it; no Spark."""
    ck = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint(checkpoint)
    rows: list[OperatorStateRow] = []
    for sink in ck.sinks():
        folder = sink_folder(sink.sink_id)
        for decided in sorted(sink.decided_batches, reverse=True):
            if batch is not None and decided > batch:
                continue
            data = ck.read_json(f"{folder}/{batch_file(DECISIONS, decided)}") or {}
            if "operatorState" not in data:
                continue
            state = DecidedState.from_json(decided, data["operatorState"])
            counts: dict[str, list[Any]] = {}
            for partition in range(state.parallelism):
                path = ck.path(f"{folder}/{state.files[partition]}")
                try:
                    with ck.fs.open(path, "rb") as handle:
                        elements, kinds = decode(handle.read(), path)
                except FileNotFoundError:
                    raise CheckpointError(f"{path}, the operator state batch {decided} of sink "
                                          f"{sink.sink_id} decided, is missing") from None
                for name, kind in kinds.items():
                    counts.setdefault(name, [kind, 0])[1] += len(elements.get(name, ()))
            rows += [OperatorStateRow(sink.sink_id, name, kind, state.parallelism, count, decided)
                     for name, (kind, count) in counts.items()]
            break
    return rows


def summarize(spark: SparkSession, checkpoint: str, batch: int | None = None) -> StateSummary:
    """Operators, stores, state variables, partitions, keys and bytes of
    ``checkpoint`` at committed ``batch`` (default: the latest)."""
    ck, url = _location(checkpoint)
    batch = batch if batch is not None else ck.latest_committed()
    recorded = ck.batch_conf(batch) if batch is not None else None
    provider = (recorded[1] if recorded else {}).get(PROVIDER_KEY)
    backend = (backend_of(provider) or provider) if provider else None
    rows: list[StateRow] = []
    ops = operators(spark, checkpoint) if batch is not None else []
    # The partitions Spark ran the batch with: the operator metadata of an
    # aggregate (v1, one file) keeps the count it was created with, even
    # after `eoskit state rescale` has repartitioned its state.
    count = (recorded[1] if recorded else {}).get(PARTITIONS_KEY, "")
    if count.isdigit():
        ops = [replace(op, partitions=int(count)) for op in ops]
    for op in ops:
        reader = _reader(spark, url, op, batch)
        if not op.tws:
            keys, entries = _counts(reader.load(url))
            rows.append(StateRow(op.operator_id, op.name, op.store, None, None, False, op.partitions,
                                 op.batches, keys, entries))
            continue
        for variable in op.variables():
            name = variable.get("stateName", "?")
            keys, entries = _counts_or_unknown(reader.option("stateVarName", name), url)
            rows.append(StateRow(op.operator_id, op.name, op.store, name,
                                 variable.get("stateVariableType"), bool(variable.get("ttlEnabled")),
                                 op.partitions, op.batches, keys, entries))
        if op.has_timers():
            keys, entries = _counts_or_unknown(reader.option("readRegisteredTimers", "true"), url)
            rows.append(StateRow(op.operator_id, op.name, op.store, TIMERS, "timers", False,
                                 op.partitions, op.batches, keys, entries))
    on_disk = ck.state_operators(count_rows=False)
    return StateSummary(ck.url, batch, backend, tuple(rows),
                        {op.operator_id: op.bytes for op in on_disk},
                        {op.operator_id: op.files for op in on_disk},
                        tuple(operator_states(ck, batch)) if batch is not None else (),
                        tuple(broadcast_states(ck, batch)) if batch is not None else ())


def summarize_savepoint(spark: SparkSession, savepoint: str,
                        storage_options: StorageOptions | None = None) -> StateSummary:
    """``summarize`` of a savepoint's state, read from a temporary restore of it."""
    with tempfile.TemporaryDirectory(prefix="eoskit-savepoint-state-") as tmp:
        manifest = restore_savepoint(savepoint, f"{tmp}/checkpoint", storage_options=storage_options)
        summary = summarize(spark, f"{tmp}/checkpoint", manifest.batch)
        return StateSummary(manifest.location, summary.batch, summary.backend, summary.rows,
                            summary.bytes, summary.files, summary.operator_state)


def _pick(ops: Sequence[_Operator], checkpoint: str, operator: int, store: str | None) -> _Operator:
    found = [op for op in ops if op.operator_id == operator]
    listing = ", ".join(f"{op.operator_id} ({op.name}, store {op.store})" for op in ops) or "none"
    if not found:
        raise StateInspectError(f"checkpoint {checkpoint} has no stateful operator {operator}; "
                                f"its stateful operators: {listing}")
    if store is not None:
        found = [op for op in found if op.store == store]
        if not found:
            raise StateInspectError(f"operator {operator} of {checkpoint} has no store {store!r}; "
                                    f"its stores: {listing}")
    if len(found) > 1:
        raise StateInspectError(f"operator {operator} of {checkpoint} has {len(found)} stores: "
                                f"name one with --store ({', '.join(op.store for op in found)})")
    return found[0]


def _key_filter(df: DataFrame, key: Sequence[str], where: str) -> DataFrame:
    fields = [f.name for f in df.schema["key"].dataType.fields]  # type: ignore[attr-defined]
    for item in key:
        name, sep, value = item.partition("=")
        if not sep:
            if len(fields) != 1:
                raise StateInspectError(f"{where} has a key of {len(fields)} columns "
                                        f"({', '.join(fields)}): give --key COLUMN=VALUE for each")
            name, value = fields[0], item
        if name not in fields:
            raise StateInspectError(f"{where} has no key column {name!r}; its key columns: "
                                    f"{', '.join(fields)}")
        df = df.where(F.col("key").getField(name).cast("string") == value)
    return df


def read_state(spark: SparkSession, checkpoint: str, operator: int, *, store: str | None = None,
               variable: str | None = None, timers: bool = False, key: Sequence[str] = (),
               batch: int | None = None, limit: int | None = 100) -> list[dict[str, Any]]:
    """Rows of one store (or transformWithState state variable, or its
    timers) at committed ``batch``, as plain dicts: ``key``, the value
    columns, ``partition_id``; ``key`` filters by key column."""
    ck, url = _location(checkpoint)
    if ck.latest_committed() is None and batch is None:
        raise StateInspectError(f"checkpoint {checkpoint} has no committed batch: no state to read")
    op = _pick(operators(spark, checkpoint), checkpoint, operator, store)
    where = f"operator {operator} ({op.name}) of {checkpoint}"
    names = [v.get("stateName") for v in op.variables()]
    reader = _reader(spark, url, op, batch)
    if op.tws:
        if timers:
            if not op.has_timers():
                raise StateInspectError(f"{where} runs without timers (timeMode "
                                        f"{op.properties.get('timeMode')})")
            reader = reader.option("readRegisteredTimers", "true")
        elif variable is None or variable not in names:
            given = "" if variable is None else f"has no state variable {variable!r}; "
            raise StateInspectError(f"{where} {given}is a transformWithState operator: name one of "
                                    f"its state variables with --state-var ({', '.join(names)})")
        else:
            reader = reader.option("stateVarName", variable)
    elif variable is not None or timers:
        raise StateInspectError(f"{where} is not a transformWithState operator: it has no state "
                                "variables or timers, only its store's keys and values")
    df = _key_filter(reader.load(url), key, where).orderBy("partition_id")
    if limit is not None:
        df = df.limit(limit)
    try:
        return [row.asDict(recursive=True) for row in df.collect()]
    except PySparkException as exc:
        if not op.tws:
            raise
        what = "registered timers" if timers else f"state variable {variable!r}"
        hint = (" (Spark 4.3's state source cannot read the state of a transformWithState "
                "operator with event-time timers)" if "RESERVED_CHARS" in str(exc) else "")
        raise StateInspectError(f"Spark cannot read the {what} of {where}: "
                                f"{root_cause(exc)}{hint}") from None


__all__ = ["OperatorStateRow", "StateInspectError", "StateRow", "StateSummary", "operator_states",
           "operators", "read_state",
           "summarize", "summarize_savepoint", "CheckpointError"]
