"""The Kafka sink as a ``Pipeline`` component."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from eoskit.connectors.kafka.scratch import KafkaScratch
from eoskit.connectors.spark.output_modes import check_output_mode, write_stream
from eoskit.connectors.kafka.pipeline_source import kafka_servers
from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings
from eoskit.connectors.kafka.source import SHORT_NAME, KafkaDataSource
from eoskit.connectors.spark.foreach_batch import BatchWriter


@dataclass
class KafkaSink:
    """``eoskit-kafka`` as a sink, with Spark's Kafka sink options (``topic``,
    ``includeHeaders``, ``kafka.*``) and eoskit's (``commitMode``, ``sinkId``,
    ``markerTopic``); checked when the pipeline is built.

    ``output_mode`` is Spark's: ``update`` or ``complete`` (running
    aggregates, keyed by the ``key`` column so that the topic's last record
    per key is the current value) writes through ``foreach_batch()``, on the
    same task-commit protocol."""

    bootstrap_servers: str
    options: dict[str, str] = field(default_factory=dict)
    output_mode: str = "append"

    def __post_init__(self) -> None:
        self.options = {k: str(v) for k, v in self.options.items()}
        KafkaSinkSettings.parse(self.all_options())
        check_output_mode(self.output_mode, SHORT_NAME)

    #: The Spark format (runtime.components.Formatted): the savepoint's
    #: fingerprint, and the connector every executor must import.
    spark_format: ClassVar[str] = SHORT_NAME

    def all_options(self) -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.bootstrap_servers, **self.options}

    def foreach_batch(self) -> BatchWriter:
        """The sink as a ``foreachBatch`` function, for the output modes Spark
        grants Python data sources no part in:
        ``df.writeStream.outputMode("update").foreachBatch(sink.foreach_batch())``."""
        return BatchWriter(KafkaDataSource, self.all_options())

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        return write_stream(df, KafkaDataSource, self.all_options(), self.output_mode)

    def scratch(self, suffix: str) -> "KafkaScratch":
        """This sink into suffixed copies of its topics (``runtime.components.Redirectable``)."""
        return KafkaScratch(self, suffix)

    def servers(self) -> tuple[tuple[str, str, int], ...]:
        """The brokers it bootstraps from (``runtime.components.Served``)."""
        return kafka_servers(self.bootstrap_servers)

    def describe(self) -> str:
        topic = self.options.get("topic") or "the rows' topics"
        return f"{SHORT_NAME} sink ({topic})"
