"""The MySQL / MariaDB sink: ``writeStream.format("eoskit-mysql")``."""

from eoskit.connectors.mysql.datasource import SHORT_NAME, MySQLDataSource, MySQLSink
from eoskit.connectors.mysql.transactions import MySQLTransactions

__all__ = ["SHORT_NAME", "MySQLDataSource", "MySQLSink", "MySQLTransactions"]
