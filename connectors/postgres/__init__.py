"""The PostgreSQL sink: ``writeStream.format("eoskit-postgres")``."""

from eoskit.connectors.postgres.datasource import SHORT_NAME, PostgresDataSource, PostgresSink
from eoskit.connectors.postgres.transactions import PostgresTransactions

__all__ = ["SHORT_NAME", "PostgresDataSource", "PostgresSink", "PostgresTransactions"]
