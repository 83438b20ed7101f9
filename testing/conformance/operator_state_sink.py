"""A small two-phase sink whose writers keep operator state, for
``integration_tests/test_operator_state.py`` (issue 36, design section 4).

Built as examples/sqlite-sink is, with files instead of a database:

- a task writes its rows' ids into ``<path>/_staging/<txn id>.writing.json``
  and prepares by renaming it ``<txn id>.prepared.json`` (atomic, after an
  fsync); the driver's committer commits by renaming that file to its
  final, deterministic name ``<path>/<batch>-<partition>.json`` (a second
  try finds the prepared file gone and says so), and rolls back by deleting
  it;
- its writer keeps two operator states (``KeepsOperatorState``): a list
  state ``ledger`` to which every instance appends ``(batch, p)`` each
  batch, and a union state ``seen`` in which every instance gets everything
  the last batch's instances left. Of the union each instance keeps the
  elements at positions ``i`` with ``i % k == p`` and adds its own
  ``(batch, p)``, so the concatenation grows by one tag per instance and
  batch, whatever the parallelism: after batch n it holds every tag
  appended before, once.

Each output file holds what the test checks: the ids, the batch, the
partition, the parallelism, and the ``ledger`` share and ``seen`` the task
restored, each element as ``[batch, partition]``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import StructType

from eoskit.connectors.plugins import register_data_source
from eoskit.connectors.spark.datasource import TransactionalDataSource
from eoskit.connectors.spark.output_modes import write_stream
from eoskit.core.options import Option, OptionError, OptionSet, parse_str
from eoskit.twophase.contract import (
    Committer,
    KeepsOperatorState,
    PreparingWriter,
    SinkContext,
    StateSpec,
    TwoPhaseCommitting,
)
from eoskit.twophase.sink_options import COMMON, OPERATOR_STATE_PARALLELISM
from eoskit.twophase.txn_id import TxnId

FORMAT = "eoskit-opstate-test"
STAGING = "_staging"
PREPARED, WRITING = ".prepared.json", ".writing.json"

PATH = Option("path", parse_str, None, "The output directory, on a file system every executor and "
              "the driver share.")
OPTIONS = OptionSet((PATH, *COMMON), owner=FORMAT)


def encode(batch: int, partition: int) -> bytes:
    return json.dumps([batch, partition]).encode()


def decode(element: bytes) -> list[int]:
    return json.loads(element)


def _durable_rename(source: Path, target: Path) -> None:
    with open(source, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(source, target)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class LedgerWriter(PreparingWriter, KeepsOperatorState):
    """One task attempt (the module doc): ids into a staging file, and the
    operator state ``ledger`` (list) and ``seen`` (union)."""

    operator_state = (StateSpec("ledger", "list"), StateSpec("seen", "union"))

    def __init__(self, staging: Path, txn_id: str, parallelism: int) -> None:
        parsed = TxnId.parse(txn_id)
        assert parsed is not None, txn_id
        self.batch, self.partition, self.parallelism = parsed.batch, parsed.partition, parallelism
        self.writing = staging / f"{txn_id}{WRITING}"
        self.prepared = staging / f"{txn_id}{PREPARED}"
        self.ids: list[int] = []
        self.ledger: list[bytes] = []
        self.seen: list[bytes] = []

    def restore(self, state: Mapping[str, Sequence[bytes]]) -> None:
        self.ledger, self.seen = list(state["ledger"]), list(state["seen"])

    def write(self, batch: pa.RecordBatch) -> None:
        self.ids += batch.column("id").to_pylist()

    def snapshot(self) -> Mapping[str, Sequence[bytes]]:
        mine = encode(self.batch, self.partition)
        kept = [e for i, e in enumerate(self.seen) if i % self.parallelism == self.partition]
        return {"ledger": [*self.ledger, mine], "seen": [*kept, mine]}

    def prepare(self) -> None:
        self.writing.write_text(json.dumps({
            "batch": self.batch, "partition": self.partition, "parallelism": self.parallelism,
            "ids": self.ids, "ledger": [decode(e) for e in self.ledger], "seen": [decode(e) for e in self.seen],
        }))
        _durable_rename(self.writing, self.prepared)

    def abort(self) -> None:
        self.writing.unlink(missing_ok=True)  # never the prepared file: the committer's


class LedgerCommitter(Committer):
    """Ends the prepared files by id; picklable."""

    def __init__(self, path: Path) -> None:
        self.path, self.staging = path, path / STAGING

    def describe(self) -> str:
        return f"{FORMAT} {self.path}"

    def in_doubt(self, prefix: str) -> list[str]:
        names = (p.name[: -len(PREPARED)] for p in self.staging.glob(f"*{PREPARED}"))
        return sorted(n for n in names if n.startswith(prefix))

    def commit(self, txn_id: str) -> bool:
        staged = self.staging / f"{txn_id}{PREPARED}"
        parsed = TxnId.parse(txn_id)
        if parsed is None or not staged.exists():
            return False
        _durable_rename(staged, self.path / f"{parsed.batch}-{parsed.partition}.json")
        return True

    def roll_back(self, txn_id: str) -> bool:
        staged = self.staging / f"{txn_id}{PREPARED}"
        existed = staged.exists()
        staged.unlink(missing_ok=True)
        return existed


class LedgerSink(TwoPhaseCommitting):
    kind = "opstate-test"

    def __init__(self, path: str, parallelism: int | None) -> None:
        self.path, self.parallelism = Path(path).absolute(), parallelism

    def describe(self) -> str:
        return f"{FORMAT} {self.path}"

    def check(self, schema: StructType, context: SinkContext) -> None:
        (self.path / STAGING).mkdir(parents=True, exist_ok=True)

    def begin_prepared(self, txn_id: str) -> LedgerWriter:
        # Without the option the writer still keeps state, and eoskit refuses it, naming the option.
        return LedgerWriter(self.path / STAGING, txn_id, self.parallelism or 1)

    def committer(self) -> LedgerCommitter:
        return LedgerCommitter(self.path)


class LedgerDataSource(TransactionalDataSource):
    """``writeStream.format("eoskit-opstate-test").option("path", ...)``."""

    sink_type = LedgerSink

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        raw = OPTIONS.normalise(options)
        self.path = PATH.read(raw)
        if not self.path:
            raise OptionError(f"{FORMAT} needs the option 'path'")

    def transactional_sink(self, schema: StructType) -> LedgerSink:
        return LedgerSink(self.path, OPERATOR_STATE_PARALLELISM.get(self.options))


@dataclass
class OperatorStateSink:
    """The sink as a ``Pipeline`` component. ``repartition=False`` writes
    the DataFrame's partitions as they are, as a plain job that forgot
    ``repartition(k)`` would."""

    path: str
    options: dict[str, str] = field(default_factory=dict)
    repartition: bool = True

    @property
    def spark_format(self) -> str:
        return FORMAT

    def all_options(self) -> dict[str, str]:
        return {"path": str(self.path), **{k: str(v) for k, v in self.options.items()}}

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        if self.repartition:
            return write_stream(df, LedgerDataSource, self.all_options(), "append")
        register_data_source(df.sparkSession, LedgerDataSource)
        return df.writeStream.format(FORMAT).options(**self.all_options())

    def describe(self) -> str:
        return f"{FORMAT} {self.path}"


def committed(path: str | Path) -> list[dict[str, Any]]:
    """Every committed output file, by (batch, partition)."""
    found = [json.loads(p.read_text()) for p in Path(path).glob("*-*.json")]
    return sorted(found, key=lambda o: (o["batch"], o["partition"]))
