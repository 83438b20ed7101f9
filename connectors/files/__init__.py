"""The files sink: ``writeStream.format("eoskit-parquet")`` / ``"eoskit-json"``,
and ``FilesSink`` for ``Pipeline``. See docs/files-sink.md."""

from eoskit.connectors.files.datasource import JSON, PARQUET, FilesSink, JsonDataSource, ParquetDataSource
from eoskit.connectors.files.manifests import BatchManifest, committed_batches
from eoskit.connectors.files.transactions import FilesTransactions

__all__ = ["JSON", "PARQUET", "BatchManifest", "FilesSink", "FilesTransactions", "JsonDataSource",
           "ParquetDataSource", "committed_batches"]
