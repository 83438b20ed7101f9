"""The PostgreSQL sink as a ``Pipeline`` component."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from eoskit.connectors.postgres.datasource import SHORT_NAME, PostgresDataSource
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.urls import parse_url, safe


@dataclass
class PostgresSink:
    """``eoskit-postgres`` with its options (``mode``, ``key``, ``commitMode``,
    ``sinkId``, ``createTable``), checked when the pipeline is built."""

    url: str
    dbtable: str
    options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.options = {k: str(v) for k, v in self.options.items()}
        SqlSinkSettings.parse(self.all_options(), SHORT_NAME)

    def all_options(self) -> dict[str, str]:
        return {"url": self.url, "dbtable": self.dbtable, **self.options}

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        df.sparkSession.dataSource.register(PostgresDataSource)
        return df.writeStream.format(SHORT_NAME).options(**self.all_options())

    def describe(self) -> str:
        return f"{SHORT_NAME} ({safe(parse_url(self.url, ('postgresql',)))} {self.dbtable})"
