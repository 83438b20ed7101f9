"""The options, and the sink as a PySpark streaming data source.

``TransactionalDataSource`` brings the whole protocol (decision log,
coordinator, sweep, markers, crash points); a data source only names its
sink's class (whose capabilities give the allowed ``commitMode`` values),
checks its options, and builds the sink for a DataFrame schema."""

from __future__ import annotations

from pyspark.sql.types import StructType

from eoskit.connectors.spark.datasource import TransactionalDataSource
from eoskit.core.options import Option, OptionError, OptionSet, parse_str
from eoskit.twophase.sink_options import COMMON

from eoskit_sqlite.sink import SqliteSink

PATH = Option("path", parse_str, None, "The SQLite database file, on a file system every "
              "executor and the driver share (one machine, or a shared mount).")
DBTABLE = Option("dbtable", parse_str, None, "The target table; created from the DataFrame's "
                 "columns if missing.")
OPTIONS = OptionSet((PATH, DBTABLE, *COMMON), owner="eoskit-sqlite")


class SqliteDataSource(TransactionalDataSource):
    """``writeStream.format("eoskit-sqlite").option("path", ...).option("dbtable", ...)``."""

    sink_type = SqliteSink

    @classmethod
    def name(cls) -> str:
        return "eoskit-sqlite"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        raw = OPTIONS.normalise(options)  # unknown options refused by name, with a suggestion
        self.path, self.table = PATH.read(raw), DBTABLE.read(raw)
        for option, value in ((PATH, self.path), (DBTABLE, self.table)):
            if not value:
                raise OptionError(f"eoskit-sqlite needs the option '{option.name}'")

    def transactional_sink(self, schema: StructType) -> SqliteSink:
        return SqliteSink(self.path, self.table, schema.fieldNames())
