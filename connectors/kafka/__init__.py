"""The replayable Kafka source: ``spark.readStream.format("eoskit-kafka")``."""

from eoskit.connectors.kafka.source import SHORT_NAME, KafkaDataSource
from eoskit.connectors.kafka.pipeline_source import KafkaSource

__all__ = ["SHORT_NAME", "KafkaDataSource", "KafkaSource"]
