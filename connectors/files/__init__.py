"""The files sink: ``writeStream.format("eoskit-parquet")`` / ``"eoskit-json"``,
and ``FilesSink`` for ``Pipeline``. See docs/files-sink.md.

Its names load on first use, as every connector's do: the plug-in registry
imports this package with ``plugin.py``."""

from eoskit.connectors.plugins import lazy_exports

__all__ = ["JSON", "PARQUET", "BatchManifest", "FilesSink", "FilesTransactions", "JsonDataSource",
           "ParquetDataSource", "committed_batches"]
__getattr__ = lazy_exports({
    **dict.fromkeys(("JSON", "PARQUET", "FilesSink", "JsonDataSource", "ParquetDataSource"),
                    "eoskit.connectors.files.datasource"),
    "BatchManifest": "eoskit.connectors.files.manifests",
    "committed_batches": "eoskit.connectors.files.manifests",
    "FilesTransactions": "eoskit.connectors.files.transactions",
})
