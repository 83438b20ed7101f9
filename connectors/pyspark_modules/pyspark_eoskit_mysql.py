"""Spark 4 registers ``DefaultSource`` of every installed ``pyspark_*``
module: this one makes ``eoskit-mysql`` available in every session."""

from eoskit.connectors.mysql.datasource import MySQLDataSource as DefaultSource

__all__ = ["DefaultSource"]
