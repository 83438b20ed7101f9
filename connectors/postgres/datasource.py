"""``eoskit-postgres``: the PostgreSQL sink as a PySpark streaming data source."""

from __future__ import annotations

from pyspark.sql.types import StructType

from eoskit.connectors.postgres.transactions import PostgresTransactions
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.twophase.adapter import TwoPhaseDataSource

SHORT_NAME = "eoskit-postgres"


class PostgresDataSource(TwoPhaseDataSource):
    """Exactly-once writes into a PostgreSQL table (see docs/postgres-sink.md)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.settings = SqlSinkSettings.parse(options, SHORT_NAME)

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def transactional_sink(self, schema: StructType) -> PostgresTransactions:
        return PostgresTransactions(self.settings, schema)

    def commit_mode(self) -> str:
        return self.settings.commit_mode
