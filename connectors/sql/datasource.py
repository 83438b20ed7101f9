"""What the SQL sinks' data sources and Pipeline components share; each
sink only names its format, its URL dialects and its sink type."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import StructType

from eoskit.connectors.plugins import register_data_source
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.urls import parse_url, safe
from eoskit.twophase.adapter import TransactionalDataSource
from eoskit.twophase.contract import CommitMode, Sink


class SqlDataSource(TransactionalDataSource):
    """A SQL sink as a PySpark streaming data source."""

    short_name: ClassVar[str]

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.settings = SqlSinkSettings.parse(options, self.short_name, self.sink_type)

    @classmethod
    def name(cls) -> str:
        return cls.short_name

    def transactional_sink(self, schema: StructType) -> Sink:
        return self.sink_type(self.settings, schema)  # type: ignore[call-arg]

    def commit_mode(self) -> CommitMode:
        return self.settings.commit_mode


@dataclass
class SqlPipelineSink:
    """A SQL sink with its options, checked when the pipeline is built."""

    data_source: ClassVar[type[SqlDataSource]]
    backends: ClassVar[tuple[str, ...]]

    url: str
    dbtable: str
    options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.options = {k: str(v) for k, v in self.options.items()}
        self.data_source(self.all_options())  # every option check the data source makes
        parse_url(self.url, self.backends)

    @property
    def spark_format(self) -> str:
        return self.data_source.short_name

    def all_options(self) -> dict[str, str]:
        return {"url": self.url, "dbtable": self.dbtable, **self.options}

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        register_data_source(df.sparkSession, self.data_source)
        return df.writeStream.format(self.data_source.short_name).options(**self.all_options())

    def describe(self) -> str:
        return f"{self.data_source.short_name} ({safe(parse_url(self.url, self.backends))} {self.dbtable})"
