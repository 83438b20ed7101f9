"""``eoskit-postgres``: the PostgreSQL sink as a PySpark streaming data source."""

from __future__ import annotations

from eoskit.connectors.postgres.transactions import PostgresTransactions
from eoskit.connectors.sql.datasource import SqlDataSource

SHORT_NAME = "eoskit-postgres"


class PostgresDataSource(SqlDataSource):
    """Exactly-once writes into a PostgreSQL table (see docs/postgres-sink.md)."""

    short_name = SHORT_NAME
    sink_type = PostgresTransactions
