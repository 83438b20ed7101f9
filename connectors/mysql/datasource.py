"""``eoskit-mysql``: the MySQL / MariaDB sink as a PySpark streaming data source."""

from __future__ import annotations

from eoskit.connectors.mysql.connection import check_url
from eoskit.connectors.mysql.transactions import BACKENDS, MySQLTransactions
from eoskit.connectors.sql.datasource import SqlDataSource
from eoskit.connectors.sql.urls import parse_url

SHORT_NAME = "eoskit-mysql"


class MySQLDataSource(SqlDataSource):
    """Exactly-once writes into a MySQL or MariaDB table (see docs/mysql-sink.md)."""

    short_name = SHORT_NAME
    sink_type = MySQLTransactions

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # Before anything connects: URL keys that could change how the server
        # reads the sink's literals are refused (see connection.py).
        check_url(parse_url(self.settings.url, BACKENDS))
