"""The files sink as a ``Pipeline`` component."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from eoskit.connectors.files.datasource import FilesDataSource, JsonDataSource, ParquetDataSource
from eoskit.connectors.files.settings import FilesSettings
from eoskit.twophase.options import OptionError

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

    def describe(self) -> str:
        return f"{self.data_source.short_name} ({self.path})"
