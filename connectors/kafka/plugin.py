"""The Kafka source (and sink) in eoskit's plug-in registry (``eoskit.connectors.plugins``)."""

from __future__ import annotations

from eoskit.connectors.plugins import Plugin

PLUGIN = Plugin(
    format="eoskit-kafka",
    extra="kafka",
    data_source="eoskit.connectors.kafka.source:KafkaDataSource",
    failures={"confluent_kafka": "eoskit.connectors.kafka.failures:classify",
              "cimpl": "eoskit.connectors.kafka.failures:classify"},  # KafkaException's own module
)
