"""Spark 4 registers ``DefaultSource`` of every installed ``pyspark_*``
module: this one makes ``eoskit-postgres`` available in every session."""

from eoskit.connectors.postgres.datasource import PostgresDataSource as DefaultSource

__all__ = ["DefaultSource"]
