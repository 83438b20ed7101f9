"""Any installed eoskit sink as a ``Pipeline`` component, by its format name.

A sink's own component (``PostgresSink``, ``KafkaSink``, ...) checks its
options when the pipeline is built and is what a job should use. This one
serves code that knows a sink only by its name, as the conformance kit's
job does for every sink under test, a plug-in's included: the data source
is found in the plug-in registry (``eoskit.connectors.plugins``), and any
output mode is written as ``output_modes.write_stream`` writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.streaming import DataStreamWriter

from eoskit.core.options import OptionError
from eoskit.connectors.spark.output_modes import check_output_mode, write_stream
from eoskit.connectors.plugins import by_format, plugins


@dataclass
class FormatSink:
    """``FormatSink("eoskit-postgres", {...}, output_mode="update")``.

    Built on the driver, where the job file makes its ``Pipeline``: an
    unknown format or a bad output mode raises ``OptionError``, and the data
    source's own check of the options raises what it raises (for eoskit's
    sinks and a plug-in declaring them with ``OptionSet``: ``OptionError``
    naming the option), before any query starts. ``write_stream`` registers
    the data source in the DataFrame's session where Spark does not know
    its format (a plug-in's), so a plug-in needs no ``pyspark_*`` module."""

    format: str
    options: dict[str, str] = field(default_factory=dict)
    output_mode: str = "append"

    def __post_init__(self) -> None:
        self.options = {k: str(v) for k, v in self.options.items()}
        plugin = by_format(self.format)
        if plugin is None:
            installed = ", ".join(sorted(p.format for p in plugins()))
            raise OptionError(f"no installed eoskit sink has the format {self.format!r} "
                              f"(installed: {installed})")
        check_output_mode(self.output_mode, self.format)
        self.data_source = plugin.data_source_class()
        # Every option check the data source makes, on the driver when the
        # pipeline is built, given the options as Spark gives them when the
        # query starts: a CaseInsensitiveDict (keys lower-cased; a lookup in
        # any case finds them), so that a check passes here exactly when it
        # passes there. Raising here stops the build with the data source's
        # error.
        self.data_source(CaseInsensitiveDict(self.options))

    @property
    def spark_format(self) -> str:
        return self.format

    def all_options(self) -> dict[str, str]:
        return dict(self.options)

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        return write_stream(df, self.data_source, self.options, self.output_mode)

    def describe(self) -> str:
        return self.format
