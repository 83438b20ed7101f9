"""Spark 4 discovers this module by its ``pyspark_`` prefix and registers
``DefaultSource`` under its ``name()`` (``eoskit-kafka``): no registration
call is needed in any SparkSession, including under spark-submit."""

from eoskit.connectors.kafka.source import KafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
