"""The MySQL / MariaDB sink in eoskit's plug-in registry (``eoskit.connectors.plugins``)."""

from __future__ import annotations

from collections.abc import Mapping

from eoskit.connectors.plugins import Plugin
from eoskit.connectors.sql.urls import owns_url


def _in_doubt(kind: str, target: str, options: Mapping[str, str]):
    if not owns_url(kind, target, ("mysql", "mariadb")):
        return None
    from eoskit.connectors.mysql.transactions import MySQLTransactions

    return MySQLTransactions.for_url(target)


PLUGIN = Plugin(
    format="eoskit-mysql",
    data_source="eoskit.connectors.mysql.datasource:MySQLDataSource",
    preload=("eoskit.connectors.mysql.datasource",),
    in_doubt=_in_doubt,
    failures={"pymysql": "eoskit.connectors.mysql.failures:classify"},
)
