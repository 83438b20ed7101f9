"""The PostgreSQL sink in eoskit's plug-in registry (``eoskit.connectors.plugins``)."""

from __future__ import annotations

from collections.abc import Mapping

from eoskit.connectors.plugins import Plugin
from eoskit.connectors.sql.urls import owns_url


def _in_doubt(kind: str, target: str, options: Mapping[str, str]):
    if not owns_url(kind, target, ("postgresql",)):
        return None
    from eoskit.connectors.postgres.transactions import PostgresTransactions

    return PostgresTransactions.for_url(target)


PLUGIN = Plugin(
    format="eoskit-postgres",
    data_source="eoskit.connectors.postgres.datasource:PostgresDataSource",
    preload=("eoskit.connectors.postgres.datasource",),
    in_doubt=_in_doubt,
    failures={"psycopg": "eoskit.connectors.postgres.failures:classify"},
)
