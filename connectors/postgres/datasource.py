"""``eoskit-postgres``, the PostgreSQL sink, declared: its PySpark streaming
data source and its ``Pipeline`` component. The sink itself (driver side and
each task's writer) is ``transactions.py``; its registry entry ``plugin.py``."""

from __future__ import annotations

from dataclasses import dataclass

from eoskit.connectors.postgres.plugin import PLUGIN
from eoskit.connectors.postgres.transactions import PostgresTransactions
from eoskit.connectors.sql.datasource import SqlDataSource, SqlPipelineSink

SHORT_NAME = PLUGIN.format


class PostgresDataSource(SqlDataSource):
    """Exactly-once writes into a PostgreSQL table (see docs/postgres-sink.md)."""

    short_name = SHORT_NAME
    sink_type = PostgresTransactions


@dataclass
class PostgresSink(SqlPipelineSink):
    """``eoskit-postgres`` with its options (``mode``, ``key``, ``commitMode``,
    ``sinkId``, ``createTable``, ``markerTable``)."""

    data_source = PostgresDataSource
