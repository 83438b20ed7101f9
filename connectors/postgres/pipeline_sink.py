"""The PostgreSQL sink as a ``Pipeline`` component."""

from __future__ import annotations

from dataclasses import dataclass

from eoskit.connectors.postgres.datasource import PostgresDataSource
from eoskit.connectors.sql.datasource import SqlPipelineSink


@dataclass
class PostgresSink(SqlPipelineSink):
    """``eoskit-postgres`` with its options (``mode``, ``key``, ``commitMode``,
    ``sinkId``, ``createTable``, ``markerTable``)."""

    data_source = PostgresDataSource
    backends = ("postgresql",)
