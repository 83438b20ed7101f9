"""Spark 4 registers ``DefaultSource`` of every installed ``pyspark_*``
module: this one makes ``eoskit-parquet`` available in every session."""

from eoskit.connectors.files.datasource import ParquetDataSource as DefaultSource

__all__ = ["DefaultSource"]
