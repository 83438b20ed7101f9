"""The PostgreSQL sink: ``writeStream.format("eoskit-postgres")``.

Its names load on first use (``eoskit[postgres]`` installs psycopg and
SQLAlchemy): the plug-in registry imports this package with ``plugin.py``."""

from eoskit.connectors.plugins import lazy_exports

__all__ = ["SHORT_NAME", "PostgresDataSource", "PostgresSink", "PostgresTransactions"]
__getattr__ = lazy_exports({
    "SHORT_NAME": "eoskit.connectors.postgres.datasource",
    "PostgresDataSource": "eoskit.connectors.postgres.datasource",
    "PostgresSink": "eoskit.connectors.postgres.datasource",
    "PostgresTransactions": "eoskit.connectors.postgres.transactions",
})
