"""``eoskit-parquet`` and ``eoskit-json``: the files sink as PySpark streaming data sources."""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql.types import StructType

from eoskit.connectors.files.settings import FilesSettings
from eoskit.connectors.files.transactions import FilesTransactions
from eoskit.twophase.options import OptionError
from eoskit.twophase.adapter import TransactionalDataSource
from eoskit.twophase.contract import CommitMode, Sink

PARQUET = "eoskit-parquet"
JSON = "eoskit-json"


class FilesDataSource(TransactionalDataSource):
    """A directory of files every reader sees exactly once (see docs/files-sink.md)."""

    short_name: ClassVar[str]
    file_format: ClassVar[str]
    sink_type = FilesTransactions

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.settings = FilesSettings.parse(options, self.short_name, self.file_format, self.sink_type)
        if self.settings.path.startswith("memory://"):
            raise OptionError(
                f"option 'path' = {self.settings.path!r}: a memory:// file system lives in one "
                "process, and Spark writes from its Python workers and commits from another "
                "process; use a local path or an object store")

    @classmethod
    def name(cls) -> str:
        return cls.short_name

    def transactional_sink(self, schema: StructType) -> Sink:
        return FilesTransactions(self.settings, schema)

    def commit_mode(self) -> CommitMode:
        return self.settings.commit_mode


class ParquetDataSource(FilesDataSource):
    """``writeStream.format("eoskit-parquet")``."""

    short_name = PARQUET
    file_format = "parquet"


class JsonDataSource(FilesDataSource):
    """``writeStream.format("eoskit-json")``: JSON lines."""

    short_name = JSON
    file_format = "json"
