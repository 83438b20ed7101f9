"""Spark's own sinks (memory, console, parquet, ...) as ``Pipeline`` components.

They are not exactly-once end to end by eoskit's protocol (Spark's file
sink is, through its own metadata log); they are here for demos, tests and
jobs that only need Spark's guarantees.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter


@dataclass
class SparkSink:
    """A built-in Spark streaming sink by format name, with its options."""

    format: str
    options: dict[str, str] = field(default_factory=dict)
    output_mode: str = "append"

    @property
    def spark_format(self) -> str:
        return self.format

    def all_options(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.options.items()}

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        writer = df.writeStream.format(self.format).outputMode(self.output_mode)
        writer = writer.options(**{k: str(v) for k, v in self.options.items()})
        return writer

    def describe(self) -> str:
        return self.format
