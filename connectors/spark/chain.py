"""Chaining (issue 33, item 2; docs/design/chaining.md): the source's task
transforms its rows and writes them through the sink's commit protocol, so
that only its acknowledgement enters the JVM.

A ``Pipeline`` whose transform is an ``ArrowTransform`` and whose source and
sink can chain runs one query: ``eoskit-kafka`` with the option
``eoskit.chain`` (a ``ChainPlan``: the sink's format and options, the
transform, its output schema) into ``eoskit-acks``. Where each piece runs:

1. **Driver, at the query's start.** The source's ``streamReader`` builds
   the sink's data source from the plan (``sink_data_source``) and resolves
   its checkpoint location and sink id there, as Spark's pickling of any
   eoskit sink does (``TransactionalDataSource.__getstate__``). The acks
   sink's ``streamWriter`` builds the same sink's driver-side writer: its
   checks, its start-up sweep of in-doubt transactions, its commit.
2. **Executors, one task per source partition.** The source's ``read``
   reads its offset range as always, hands each Arrow batch to the
   transform, checks the result against the promised schema, and writes
   it through ``write_task``: the sink's own task protocol (write and
   prepare; or write, mark and commit), with the batch id, partition and
   attempt from the task's context, as in a sink's write task (Spark sets
   ``streaming.sql.batchId`` for every task of a micro-batch). It yields one
   row: the pickled ``TaskAck``.
3. **Executors, the same task.** The acks sink's ``write`` unpickles that
   row and returns the ``TaskAck`` as its commit message. No shuffle lies
   between the scan and the write, so the scan's partition *i* is the
   write's task *i*, and the coordinator's step 1 (one ack per partition)
   holds as it is.
4. **Driver, at the batch's end.** The acks sink's ``commit`` is the sink's:
   the coordinator decides and commits (two-phase), or the markers are
   pruned (idempotent). Recovery, replays and the decision log are the
   sink's own, unchanged.
"""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql.datasource import CaseInsensitiveDict, DataSource
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, StructField, StructType

from eoskit.connectors.plugins import by_format
from eoskit.connectors.spark.datasource import TransactionalDataSource, TransactionalStreamWriter
from eoskit.core.options import OptionError
from eoskit.twophase.contract import SinkError
from eoskit.twophase.messages import TaskAck
from eoskit.twophase.task import write_task

#: The source option that carries the plan (``KafkaSourceSettings.chain``).
CHAIN_OPTION = "eoskit.chain"
#: What a chained source's task gives the JVM: one row, its pickled ``TaskAck``.
ACKS = pa.schema([("ack", pa.binary())])
ACKS_SPARK = StructType([StructField("ack", BinaryType())])
#: The acks sink's format (registered in the session by the Pipeline).
ACKS_FORMAT = "eoskit-acks"


@dataclass(frozen=True)
class ChainPlan:
    """What a chained source's tasks do after reading: ``transform`` (None:
    none) into ``output_schema``, written to the sink of ``sink_format``
    with ``sink_options`` (``checkpointLocation`` included). The schemas
    travel as ``StructType`` JSON: parsing DDL needs a JVM, which the
    planner and task processes do not have."""

    sink_format: str
    sink_options: dict[str, str] = field(repr=False)  # a database URL's password among them
    output_schema: str
    transform: Callable[[pa.RecordBatch], pa.RecordBatch] | None = None
    #: The schema the source decodes values into (value.format), None: Kafka's columns.
    input_schema: str | None = None
    #: The sink's data source, resolved on the driver (``resolved``); None in a plan not yet resolved.
    data_source: Any = field(default=None, compare=False, repr=False)

    def encode(self) -> str:
        return base64.b64encode(cloudpickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> "ChainPlan":
        try:
            plan = pickle.loads(base64.b64decode(text.encode("ascii"), validate=True))
        except Exception as exc:  # noqa: BLE001 - any undecodable value is the option's fault
            raise OptionError(f"option '{CHAIN_OPTION}' is not a chain plan a Pipeline made "
                              f"({type(exc).__name__}: {exc})") from None
        if not isinstance(plan, ChainPlan):
            raise OptionError(f"option '{CHAIN_OPTION}' is not a chain plan a Pipeline made")
        return plan

    @property
    def spark_schema(self) -> StructType:
        return StructType.fromJson(json.loads(self.output_schema))

    @property
    def input_spark_schema(self) -> StructType | None:
        return None if self.input_schema is None else StructType.fromJson(json.loads(self.input_schema))

    def resolved(self) -> "ChainPlan":
        """This plan with the sink's data source built and its checkpoint
        location and sink id resolved, on the driver (step 1)."""
        source = sink_data_source(self.sink_format, self.sink_options)
        source.checkpoint_location()
        source.sink_id()
        return replace(self, data_source=source)


def sink_data_source(fmt: str, options: dict[str, str]) -> TransactionalDataSource:
    """The data source of the eoskit sink ``fmt``, with ``options`` as Spark gives them."""
    plugin = by_format(fmt)
    cls = plugin.data_source_class() if plugin is not None else None
    if cls is None or not issubclass(cls, TransactionalDataSource):
        raise OptionError(f"format {fmt!r} cannot be chained: only eoskit's transactional sinks can")
    return cls(CaseInsensitiveDict(options))


def chained_write(plan: ChainPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Step 2, in the source's task: transform, check, write; one ack row."""
    if plan.data_source is None:
        raise SinkError("a chained task got a plan the driver did not resolve")
    # The data source arrived pickled with the source's reader: its task side,
    # as Spark unpickles a sink's, which builds the writer without driver work.
    writer: TransactionalStreamWriter = plan.data_source.streamWriter(plan.spark_schema, False)
    expected = to_arrow_schema(plan.spark_schema, timezone="UTC")  # as the source decodes timestamps
    ack = write_task(writer.sink, writer.decisions, writer.commit_mode,
                     _checked(_transformed(plan.transform, batches), expected), parallelism=writer.parallelism)
    yield ack_rows(ack)


def ack_rows(ack: TaskAck) -> pa.RecordBatch:
    """The task's ack as the rows it gives the JVM: the pickled ack, then a
    null for each further row the task read, so that Spark's progress
    (``numInputRows``, and every figure and listener read from it) counts
    the records as for an unchained query. A column of nulls costs Arrow a
    validity bitmap; an empty task gives its ack alone."""
    nulls = max(ack.rows - 1, 0)
    column = pa.concat_arrays([pa.array([pickle.dumps(ack)], pa.binary()), pa.nulls(nulls, pa.binary())])
    return pa.RecordBatch.from_arrays([column], schema=ACKS)


def _transformed(transform: Callable[[pa.RecordBatch], pa.RecordBatch] | None,
                 batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch if transform is None else transform(batch)


def _checked(batches: Iterator[pa.RecordBatch], expected: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Each batch as the schema promised: its columns by name and order,
    cast where the types differ safely; otherwise a ``SinkError`` naming
    the column."""
    for batch in batches:
        if batch.schema.names != expected.names:
            raise SinkError(f"the chained transform returned columns {batch.schema.names}, not the "
                            f"promised {expected.names}")
        if not batch.schema.equals(expected):
            try:
                batch = batch.cast(expected)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                bad = next(f.name for f, e in zip(batch.schema, expected) if f.type != e.type)
                raise SinkError(f"the chained transform's column {bad!r} is "
                                f"{batch.schema.field(bad).type}, not the promised "
                                f"{expected.field(bad).type}: {exc}") from None
        yield batch


class AcksStreamWriter(TransactionalStreamWriter):
    """Steps 3 and 4: the sink's writer, whose tasks only pass the source's acks on."""

    def __init__(self, inner: TransactionalStreamWriter) -> None:
        super().__init__(inner.sink, inner.decisions, inner.commit_mode, inner.parallelism)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskAck:
        acks = [pickle.loads(a) for batch in iterator
                for a in batch.column("ack").drop_null().to_pylist()]
        if len(acks) != 1:
            raise SinkError(f"a chained task gave {len(acks)} acknowledgements, not one: the scan and "
                            "the write are no longer one task (a shuffle between them?)")
        return acks[0]


class AcksDataSource(DataSource):
    """``eoskit-acks``: the sink end of a chained query; its options are the
    plan's (``eoskit.chain``) and the query's ``checkpointLocation``.

    It holds the chained sink's data source, built where Spark builds this
    one (the planner), so that Spark's pickling of it to the commit process
    is the sink's own: there the sink knows it is not planning and runs no
    start-up sweep, which would roll back the very batch being committed."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.plan = ChainPlan.decode(options[CHAIN_OPTION])
        self.sink = sink_data_source(self.plan.sink_format, self.plan.sink_options)

    @classmethod
    def name(cls) -> str:
        return ACKS_FORMAT

    def schema(self) -> StructType:
        return ACKS_SPARK

    def streamWriter(self, schema: StructType, overwrite: bool) -> AcksStreamWriter:
        return AcksStreamWriter(self.sink.streamWriter(self.plan.spark_schema, overwrite))
