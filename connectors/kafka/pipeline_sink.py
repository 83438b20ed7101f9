"""The Kafka sink as a ``Pipeline`` component."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from eoskit.connectors.plugins import register_data_source
from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings
from eoskit.connectors.kafka.source import SHORT_NAME, KafkaDataSource


@dataclass
class KafkaSink:
    """``eoskit-kafka`` as a sink, with Spark's Kafka sink options (``topic``,
    ``includeHeaders``, ``kafka.*``) and eoskit's (``commitMode``, ``sinkId``,
    ``markerTopic``); checked when the pipeline is built."""

    #: The Spark format (what a cluster's executors must be able to import).
    format_name: ClassVar[str] = SHORT_NAME
    bootstrap_servers: str
    options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.options = {k: str(v) for k, v in self.options.items()}
        KafkaSinkSettings.parse(self.all_options())

    #: The format name, for the job's fingerprint in savepoints.
    spark_format = SHORT_NAME

    def all_options(self) -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.bootstrap_servers, **self.options}

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        register_data_source(df.sparkSession, KafkaDataSource)
        return df.writeStream.format(SHORT_NAME).options(**self.all_options())

    def describe(self) -> str:
        topic = self.options.get("topic") or "the rows' topics"
        return f"{SHORT_NAME} sink ({topic})"
