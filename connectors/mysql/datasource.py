"""``eoskit-mysql``: the MySQL / MariaDB sink as a PySpark streaming data source."""

from __future__ import annotations

from eoskit.connectors.mysql.transactions import MySQLTransactions
from eoskit.connectors.sql.datasource import SqlDataSource

SHORT_NAME = "eoskit-mysql"


class MySQLDataSource(SqlDataSource):
    """Exactly-once writes into a MySQL or MariaDB table (see docs/mysql-sink.md)."""

    short_name = SHORT_NAME
    sink_type = MySQLTransactions
