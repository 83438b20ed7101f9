"""Chained transforms in a ``Pipeline`` (issue 33, item 2): ``ArrowTransform``,
and the query a chained pipeline starts (docs/design/chaining.md).

``Pipeline(transform=ArrowTransform(fn, "id BIGINT, amount BIGINT"))``: ``fn``
takes and returns a ``pyarrow.RecordBatch``, one input batch at a time, and
its result has the schema given. It runs where it can run cheapest:

- **chained**, when the ``operator_chaining`` setting is on (the default),
  the source can chain (``components.Chainable``: eoskit-kafka without
  broadcast state) and the sink is one of eoskit's transactional sinks in
  append mode: the source's tasks call ``fn`` and write to the sink
  themselves (``connectors/spark/chain.py``), and no row enters the JVM;
- otherwise as any transform, through Spark's ``mapInArrow``: the same
  function on the same batches, between Spark's source and sink. The
  results are the same.

A transform that needs a shuffle (an aggregation, a join, keyed state) is
a DataFrame function, as before, and is never chained.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import StructType

from eoskit.connectors.plugins import by_format
from eoskit.connectors.spark.chain import ACKS_FORMAT, CHAIN_OPTION, ChainPlan
from eoskit.connectors.spark.datasource import TransactionalDataSource
from eoskit.runtime.job.components import Chainable, Formatted, Source


@dataclass(frozen=True)
class ArrowTransform:
    """A per-batch Arrow function and the schema (DDL) of what it returns."""

    fn: Callable[[pa.RecordBatch], pa.RecordBatch]
    schema: str

    def __call__(self, df: DataFrame) -> DataFrame:
        """The unchained path: Spark's ``mapInArrow``."""
        fn = self.fn

        def each(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                yield fn(batch)

        return df.mapInArrow(each, self.schema)


def chained_writer(transform: object, source: Source, sink: object, spark: SparkSession,
                   sink_options: dict[str, str]) -> DataStreamWriter | None:
    """The chained query's writer, not started (without its trigger,
    checkpoint and name, which ``Pipeline.start`` gives any query), or None
    where this pipeline cannot chain. ``sink_options``: the sink's options
    as this run gives them (its ``checkpointLocation`` and ``commitMode``
    included)."""
    if not (isinstance(transform, ArrowTransform) and isinstance(source, Chainable)
            and isinstance(sink, Formatted) and getattr(sink, "output_mode", "append") == "append"):
        return None
    plugin = by_format(sink.spark_format)
    if plugin is None or not issubclass(plugin.data_source_class(), TransactionalDataSource):
        return None
    if getattr(source, "broadcast", None) is not None:
        return None
    values = source.chains_values()
    plan = ChainPlan(sink.spark_format, sink_options, _json(transform.schema), transform.fn,
                     None if values is None else _json(values)).encode()
    return source.chained_stream(spark, plan).writeStream.format(ACKS_FORMAT).option(CHAIN_OPTION, plan)


def _json(ddl: str) -> str:
    """A DDL schema as ``StructType`` JSON, parsed here on the driver (its JVM)."""
    return StructType.fromDDL(ddl).json()
