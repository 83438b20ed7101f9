"""``eoskit-parquet`` and ``eoskit-json``, the files sink, declared: its PySpark
streaming data sources and its ``Pipeline`` component (``FilesSink``). The
sink itself is ``transactions.py`` (driver side) and ``writer.py`` (each
task's); its registry entry ``plugin.py``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import StructType

from eoskit.connectors.files.plugin import PLUGIN
from eoskit.connectors.files.scratch import FilesScratch
from eoskit.connectors.files.settings import FilesSettings
from eoskit.connectors.files.transactions import FilesTransactions
from eoskit.connectors.spark.datasource import TransactionalDataSource
from eoskit.twophase.contract import CommitMode, Sink
from eoskit.core.options import OptionError

PARQUET, JSON = (plugin.format for plugin in PLUGIN)  # declared in plugin.py


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


_SOURCES: dict[str, type[FilesDataSource]] = {"parquet": ParquetDataSource, "json": JsonDataSource}


@dataclass
class FilesSink:
    """``eoskit-parquet`` (``format="parquet"``) or ``eoskit-json``
    (``format="json"``) into ``path``, with its options (``compression``,
    ``maxRecordsPerFile``, ``commitMode``, ``sinkId``, ``fs.<protocol>.*``)."""

    path: str
    format: str = "parquet"
    partition_by: Sequence[str] = ()
    options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.format not in _SOURCES:
            raise OptionError(f"FilesSink format {self.format!r}: choose parquet or json")
        self.options = {k: str(v) for k, v in self.options.items()}
        FilesSettings.parse(self.all_options(), self.data_source.short_name, self.format,
                            self.data_source.sink_type)

    @property
    def data_source(self) -> type[FilesDataSource]:
        return _SOURCES[self.format]

    @property
    def spark_format(self) -> str:
        return self.data_source.short_name

    def all_options(self) -> dict[str, str]:
        extra = {"partitionBy": ",".join(self.partition_by)} if self.partition_by else {}
        return {"path": self.path, **extra, **self.options}

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        df.sparkSession.dataSource.register(self.data_source)
        return df.writeStream.format(self.data_source.short_name).options(**self.all_options())

    def scratch(self, suffix: str) -> "FilesScratch":
        """This sink into a suffixed copy of its path (``runtime.components.Redirectable``)."""
        return FilesScratch(self, suffix)

    def describe(self) -> str:
        return f"{self.data_source.short_name} ({self.path})"
