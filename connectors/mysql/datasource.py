"""``eoskit-mysql``, the MySQL / MariaDB sink, declared: its PySpark streaming
data source and its ``Pipeline`` component. The sink itself (driver side and
each task's writer) is ``transactions.py``; its registry entry ``plugin.py``."""

from __future__ import annotations

from dataclasses import dataclass

from eoskit.connectors.mysql.plugin import PLUGIN
from eoskit.connectors.mysql.transactions import MySQLTransactions
from eoskit.connectors.sql.datasource import SqlDataSource, SqlPipelineSink

SHORT_NAME = PLUGIN.format


class MySQLDataSource(SqlDataSource):
    """Exactly-once writes into a MySQL or MariaDB table (see docs/mysql-sink.md)."""

    short_name = SHORT_NAME
    sink_type = MySQLTransactions


@dataclass
class MySQLSink(SqlPipelineSink):
    """``eoskit-mysql`` with its options (``mode``, ``key``, ``commitMode``,
    ``sinkId``, ``createTable``, ``markerTable``)."""

    data_source = MySQLDataSource
