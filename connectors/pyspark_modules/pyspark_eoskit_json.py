"""Spark 4 registers ``DefaultSource`` of every installed ``pyspark_*``
module: this one makes ``eoskit-json`` available in every session."""

from eoskit.connectors.files.datasource import JsonDataSource as DefaultSource

__all__ = ["DefaultSource"]
