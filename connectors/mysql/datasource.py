"""``eoskit-mysql``, the MySQL / MariaDB sink, declared: its PySpark streaming
data source and its ``Pipeline`` component. The sink itself (driver side and
each task's writer) is ``transactions.py``; its registry entry ``plugin.py``."""

from __future__ import annotations

from dataclasses import dataclass

from eoskit.connectors.mysql.connection import check_url
from eoskit.connectors.mysql.plugin import BACKENDS, PLUGIN
from eoskit.connectors.mysql.transactions import MySQLTransactions
from eoskit.connectors.sql.datasource import SqlDataSource, SqlPipelineSink
from eoskit.connectors.sql.sink import parse_url

SHORT_NAME = PLUGIN.format


class MySQLDataSource(SqlDataSource):
    """Exactly-once writes into a MySQL or MariaDB table (see docs/mysql-sink.md)."""

    short_name = SHORT_NAME
    sink_type = MySQLTransactions

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        # Before anything connects: URL keys that could change how the server
        # reads the sink's literals are refused (see connection.py).
        check_url(parse_url(self.settings.url, BACKENDS))


@dataclass
class MySQLSink(SqlPipelineSink):
    """``eoskit-mysql`` with its options (``mode``, ``key``, ``commitMode``,
    ``sinkId``, ``createTable``, ``markerTable``)."""

    data_source = MySQLDataSource
    default_port = 3306
