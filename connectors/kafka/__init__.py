"""Kafka, both ways: ``format("eoskit-kafka")`` reads (the replayable source)
and writes (the transactional sink), as Spark's ``kafka`` format does."""

from eoskit.connectors.kafka.pipeline_sink import KafkaSink
from eoskit.connectors.kafka.pipeline_source import KafkaSource
from eoskit.connectors.kafka.source import SHORT_NAME, KafkaDataSource

__all__ = ["SHORT_NAME", "KafkaDataSource", "KafkaSink", "KafkaSource"]
