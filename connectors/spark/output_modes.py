"""How a pipeline's eoskit sink meets Spark's output modes.

Spark grants ``update`` and ``complete`` (running aggregates,
``transformWithState`` in update mode) only to sinks with an internal
capability Python data sources lack. An eoskit sink therefore writes
``append`` as a data source (``writeStream.format``) and the other modes
through ``foreachBatch`` on the same commit protocol
(``eoskit.connectors.spark.foreach_batch``). Every sink component (the SQL sinks,
the Kafka sink, ``FormatSink``) writes through ``write_stream`` here.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from eoskit.core.options import OptionError
from eoskit.connectors.plugins import register_data_source
from eoskit.connectors.spark.datasource import TransactionalDataSource
from eoskit.connectors.spark.foreach_batch import BatchWriter
from eoskit.twophase.sink_options import OPERATOR_STATE_PARALLELISM

#: Spark's output modes.
OUTPUT_MODES = ("append", "update", "complete")


def check_output_mode(output_mode: str, sink: str) -> None:
    """Raise OptionError naming ``sink`` unless ``output_mode`` is Spark's."""
    if output_mode not in OUTPUT_MODES:
        raise OptionError(f"output_mode {output_mode!r} of {sink}: expected {', '.join(OUTPUT_MODES)}")


def write_stream(df: DataFrame, data_source: type[TransactionalDataSource], options: Mapping[str, str],
                 output_mode: str) -> DataStreamWriter:
    """``df.writeStream`` into the sink, in ``output_mode``; repartitioned
    to ``operatorStateParallelism`` where it is set (writers that keep
    operator state are one per task partition, and Spark does not tell a
    Python writer the task count)."""
    parallelism = OPERATOR_STATE_PARALLELISM.get(options)
    if parallelism is not None:
        df = df.repartition(parallelism)
    if output_mode != "append":
        return df.writeStream.outputMode(output_mode).foreachBatch(BatchWriter(data_source, options))
    register_data_source(df.sparkSession, data_source)
    return df.writeStream.format(data_source.name()).options(**options)
