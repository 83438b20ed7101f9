"""A writer's operator state on disk, and each instance's share of it
(``KeepsOperatorState``; the protocol's steps are in ``task.py`` and
``coordinator.py``).

A snapshot is one Arrow IPC stream file per task attempt,
``<sink folder>/opstate/<batch>/<p>-<attempt>.arrow``, with columns ``state
string, element binary``: the elements of each declared state, in the
writer's order. Its schema metadata names each state's kind, so that
``eoskit state inspect`` reads a checkpoint without the writer's class.
It runs on executors (write, read, share) and in the CLI (read); nothing
here imports Spark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import pyarrow as pa

from eoskit.core.state_split import redistribute
from eoskit.twophase.contract import SinkError, StateSpec
from eoskit.twophase.decision_log import DecidedState, DecisionLog, opstate_file

SCHEMA = pa.schema([("state", pa.string()), ("element", pa.binary())])
#: Schema metadata: ``{name: kind}`` of the states the writer declares.
KINDS_KEY = b"eoskit.operatorState.kinds"

Elements = dict[str, list[bytes]]


class OperatorStateError(SinkError):
    """A writer's operator state is not what it declared, or a snapshot is unreadable."""


def checked_snapshot(specs: Sequence[StateSpec], snapshot: Mapping[str, Sequence[bytes]],
                     writer: str) -> Elements:
    """``snapshot`` with every declared state (empty where left out), its
    elements as bytes; an undeclared name or a non-bytes element is refused."""
    declared = [spec.name for spec in specs]
    if not isinstance(snapshot, Mapping):
        raise OperatorStateError(f"{writer}.snapshot() returned {type(snapshot).__name__}, "
                                 "expected a mapping of state name to a list of bytes")
    unknown = sorted(set(snapshot) - set(declared))
    if unknown:
        raise OperatorStateError(f"{writer}.snapshot() returned state(s) {', '.join(map(repr, unknown))} "
                                 f"that its operator_state does not declare ({', '.join(declared) or 'none'})")
    out: Elements = {}
    for name in declared:
        elements = []
        for element in snapshot.get(name) or ():
            if not isinstance(element, (bytes, bytearray, memoryview)):
                raise OperatorStateError(f"{writer}.snapshot(): state {name!r} holds a "
                                         f"{type(element).__name__}; elements are bytes the writer serialises")
            elements.append(bytes(element))
        out[name] = elements
    return out


def encode(specs: Sequence[StateSpec], elements: Mapping[str, Sequence[bytes]]) -> bytes:
    names = [spec.name for spec in specs]
    kinds = {spec.name: spec.kind for spec in specs}
    schema = SCHEMA.with_metadata({KINDS_KEY: json.dumps(kinds).encode()})
    table = pa.table({"state": [n for n in names for _ in elements.get(n, ())],
                      "element": [e for n in names for e in elements.get(n, ())]}, schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def decode(data: bytes, where: str = "snapshot") -> tuple[Elements, dict[str, str]]:
    """(elements by state, kind by state) of one snapshot file."""
    try:
        table = pa.ipc.open_stream(data).read_all()
        kinds = json.loads((table.schema.metadata or {}).get(KINDS_KEY, b"{}"))
    except (pa.ArrowInvalid, ValueError) as exc:
        raise OperatorStateError(f"operator state snapshot {where} is unreadable: {exc}") from None
    out: Elements = {name: [] for name in kinds}
    for name, element in zip(table.column("state").to_pylist(), table.column("element").to_pylist()):
        out.setdefault(name, []).append(element)
    return out, kinds


def write_snapshot(decisions: DecisionLog, batch: int, partition: int, attempt: int,
                   specs: Sequence[StateSpec], elements: Mapping[str, Sequence[bytes]]) -> str:
    """Write one attempt's snapshot atomically; its path relative to the sink's folder."""
    name = opstate_file(batch, partition, attempt)
    decisions.write_bytes(name, encode(specs, elements))
    return name


def read_parts(decisions: DecisionLog, state: DecidedState) -> list[Elements]:
    """The decided snapshots of ``state``, one per instance in instance order."""
    parts = []
    for partition in range(state.parallelism):
        name = state.files.get(partition)
        if name is None:
            raise OperatorStateError(f"the decision of batch {state.batch} of sink {decisions.sink_id!r} "
                                     f"names no operator state file for instance {partition} of "
                                     f"{state.parallelism}")
        try:
            data = decisions.read_bytes(name)
        except FileNotFoundError:
            raise OperatorStateError(f"operator state file {decisions.root}/{name}, decided by batch "
                                     f"{state.batch}, is missing") from None
        parts.append(decode(data, f"{decisions.root}/{name}")[0])
    return parts


def share(specs: Sequence[StateSpec], parts: Sequence[Mapping[str, Sequence[bytes]]],
          parallelism: int, partition: int) -> Elements:
    """Instance ``partition`` of ``parallelism``'s share of each declared
    state (``core/state_split.redistribute``); no parts: every state empty."""
    return {spec.name: redistribute([list(part.get(spec.name, ())) for part in parts],
                                    parallelism, spec.kind)[partition]
            for spec in specs}
