"""The MySQL / MariaDB sink as a ``Pipeline`` component."""

from __future__ import annotations

from dataclasses import dataclass

from eoskit.connectors.mysql.datasource import MySQLDataSource
from eoskit.connectors.mysql.transactions import BACKENDS
from eoskit.connectors.sql.datasource import SqlPipelineSink


@dataclass
class MySQLSink(SqlPipelineSink):
    """``eoskit-mysql`` with its options (``mode``, ``key``, ``commitMode``,
    ``sinkId``, ``createTable``, ``markerTable``)."""

    data_source = MySQLDataSource
    backends = BACKENDS
