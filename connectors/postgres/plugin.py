"""The PostgreSQL sink, declared for eoskit's plug-in registry
(``eoskit.connectors.plugins``): its format, written here once (the data
source reads it from here, setup.py writes Spark's discovery module from
it), its data source, the sink ``eoskit txn`` settles prepared ids with, and
which of psycopg's errors mean the server is gone."""

from __future__ import annotations

from eoskit.connectors.plugins import Plugin
from eoskit.connectors.sql.urls import in_doubt_for

#: The SQLAlchemy URL backends the sink takes.
BACKENDS = ("postgresql",)

PLUGIN = Plugin(
    format="eoskit-postgres",
    extra="postgres",
    requires=("psycopg[binary]>=3.1", "SQLAlchemy>=2.0"),
    data_source="eoskit.connectors.postgres.datasource:PostgresDataSource",
    in_doubt=in_doubt_for("eoskit.connectors.postgres.transactions:PostgresTransactions", BACKENDS),
    failures={"psycopg": "eoskit.connectors.postgres.failures:classify"},
)
