"""The MySQL / MariaDB sink, declared for eoskit's plug-in registry
(``eoskit.connectors.plugins``): its format, written here once (the data
source reads it from here, setup.py writes Spark's discovery module from
it), its data source, the sink ``eoskit txn`` settles prepared ids with, and
which of PyMySQL's errors mean the server is gone."""

from __future__ import annotations

from eoskit.connectors.plugins import Plugin
from eoskit.connectors.sql.urls import in_doubt_for

#: The SQLAlchemy URL backends the sink takes.
BACKENDS = ("mysql", "mariadb")

PLUGIN = Plugin(
    format="eoskit-mysql",
    extra="mysql",
    requires=("PyMySQL>=1.1", "SQLAlchemy>=2.0"),
    data_source="eoskit.connectors.mysql.datasource:MySQLDataSource",
    in_doubt=in_doubt_for("eoskit.connectors.mysql.transactions:MySQLTransactions", BACKENDS),
    failures={"pymysql": "eoskit.connectors.mysql.failures:classify"},
)
