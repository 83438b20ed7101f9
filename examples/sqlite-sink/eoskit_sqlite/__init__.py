"""eoskit-sqlite: ``writeStream.format("eoskit-sqlite")``, an exactly-once
SQLite sink written as an eoskit plug-in (docs/plugins.md)."""
