"""The SQL sinks' data source and Pipeline component, generic: a dialect's
own classes only name its format and its sink type (whose ``DATABASE``
declares the rest: URL backends, default port, JDBC mapping, quoting)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter
from pyspark.sql.types import StructType

from eoskit.connectors.spark.output_modes import check_output_mode, write_stream
from eoskit.connectors.sql.scratch import SqlScratch
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.sink import parse_url, safe
from eoskit.core.options import OptionError
from eoskit.connectors.spark.datasource import TransactionalDataSource
from eoskit.twophase.contract import CommitMode, Sink
from eoskit.connectors.spark.foreach_batch import BatchWriter



class SqlDataSource(TransactionalDataSource):
    """A SQL sink as a PySpark streaming data source."""

    short_name: ClassVar[str]

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.settings = SqlSinkSettings.parse(options, self.short_name, self.sink_type)
        # Before anything connects: URL keys that would change how the server
        # reads the sink's statements are refused (the dialect's ``check_url``).
        self.sink_type.check_url(parse_url(self.settings.url, self.sink_type.DATABASE.backends))

    @classmethod
    def name(cls) -> str:
        return cls.short_name

    def transactional_sink(self, schema: StructType) -> Sink:
        return self.sink_type(self.settings, schema)  # type: ignore[call-arg]

    def commit_mode(self) -> CommitMode:
        return self.settings.commit_mode


@dataclass
class SqlPipelineSink:
    """A SQL sink with its options, checked when the pipeline is built.

    ``output_mode`` is Spark's: ``update`` or ``complete`` (running
    aggregates, usually with ``mode=upsert``) writes through
    ``foreach_batch()``, on the same commit protocol."""

    data_source: ClassVar[type[SqlDataSource]]

    url: str
    dbtable: str
    options: dict[str, str] = field(default_factory=dict)
    output_mode: str = "append"

    def __post_init__(self) -> None:
        self.options = {k: str(v) for k, v in self.options.items()}
        for given in ("url", "dbtable"):
            if any(k.lower() == given for k in self.options):
                raise OptionError(f"option '{given}' is given twice: as the sink's {given} "
                                  "argument and in its options; give it once")
        # Every option check the data source makes; its settings hold the URL
        # it connects with (a JDBC URL and user/password options translated).
        self._url = parse_url(self.data_source(self.all_options()).settings.url,
                              self.data_source.sink_type.DATABASE.backends)
        check_output_mode(self.output_mode, self.data_source.short_name)

    @property
    def spark_format(self) -> str:
        return self.data_source.short_name

    def all_options(self) -> dict[str, str]:
        return {"url": self.url, "dbtable": self.dbtable, **self.options}

    def foreach_batch(self) -> BatchWriter:
        """The sink as a ``foreachBatch`` function, for the output modes Spark
        grants Python data sources no part in (``update``, ``complete``):
        ``df.writeStream.outputMode("update").foreachBatch(sink.foreach_batch())``.
        Each batch goes through the same exactly-once protocol, keyed by the
        batch id Spark passes (``eoskit.connectors.spark.foreach_batch``)."""
        return BatchWriter(self.data_source, self.all_options())

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        return write_stream(df, self.data_source, self.all_options(), self.output_mode)

    def scratch(self, suffix: str) -> "SqlScratch":
        """This sink into a suffixed copy of its tables (``runtime.components.Redirectable``)."""
        return SqlScratch(self, suffix)

    def servers(self) -> tuple[tuple[str, str, int], ...]:
        """Its database server (``runtime.components.Served``)."""
        backend = self._url.get_backend_name()
        return ((backend, self._url.host or "localhost", self._url.port or self.data_source.sink_type.DATABASE.default_port),)

    def describe(self) -> str:
        return f"{self.data_source.short_name} ({safe(self._url)} {self.dbtable})"
