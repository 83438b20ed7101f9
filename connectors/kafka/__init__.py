"""Kafka, both ways: ``format("eoskit-kafka")`` reads (the replayable source)
and writes (the transactional sink), as Spark's ``kafka`` format does.

Its names load on first use (``eoskit[kafka]`` installs confluent-kafka):
the plug-in registry imports this package with ``plugin.py``."""

from eoskit.connectors.plugins import lazy_exports

__all__ = ["SHORT_NAME", "KafkaBroadcast", "KafkaDataSource", "KafkaSink", "KafkaSource"]
__getattr__ = lazy_exports({
    "SHORT_NAME": "eoskit.connectors.kafka.source",
    "KafkaBroadcast": "eoskit.connectors.kafka.broadcast",
    "KafkaDataSource": "eoskit.connectors.kafka.source",
    "KafkaSink": "eoskit.connectors.kafka.pipeline_sink",
    "KafkaSource": "eoskit.connectors.kafka.pipeline_source",
})
