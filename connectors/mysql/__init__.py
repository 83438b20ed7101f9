"""The MySQL / MariaDB sink: ``writeStream.format("eoskit-mysql")``.

Its names load on first use (``eoskit[mysql]`` installs PyMySQL and
SQLAlchemy): the plug-in registry imports this package with ``plugin.py``."""

from eoskit.connectors.plugins import lazy_exports

__all__ = ["SHORT_NAME", "MySQLDataSource", "MySQLSink", "MySQLTransactions"]
__getattr__ = lazy_exports({
    "SHORT_NAME": "eoskit.connectors.mysql.datasource",
    "MySQLDataSource": "eoskit.connectors.mysql.datasource",
    "MySQLSink": "eoskit.connectors.mysql.datasource",
    "MySQLTransactions": "eoskit.connectors.mysql.transactions",
})
