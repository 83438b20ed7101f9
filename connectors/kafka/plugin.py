"""The Kafka source (and sink) in eoskit's plug-in registry (``eoskit.connectors.plugins``)."""

from __future__ import annotations

from eoskit.connectors.plugins import Plugin

PLUGIN = Plugin(
    format="eoskit-kafka",
    extra="kafka",
    requires=("confluent-kafka>=2.4", "cryptography>=36"),  # cryptography: PKCS12 truststores
    data_source="eoskit.connectors.kafka.source:KafkaDataSource",
    failures={"confluent_kafka": "eoskit.connectors.kafka.failures:classify",
              "cimpl": "eoskit.connectors.kafka.failures:classify"},  # KafkaException's own module
)
