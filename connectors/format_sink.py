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
from pyspark.sql.streaming import DataStreamWriter

from eoskit.twophase.options import OptionError
from eoskit.connectors.output_modes import check_output_mode, write_stream
from eoskit.connectors.plugins import by_format, plugins


@dataclass
class FormatSink:
    """``FormatSink("eoskit-postgres", {...}, output_mode="update")``."""

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
        self.data_source(dict(self.options))  # every option check the data source makes

    @property
    def spark_format(self) -> str:
        return self.format

    def all_options(self) -> dict[str, str]:
        return dict(self.options)

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        return write_stream(df, self.data_source, self.options, self.output_mode)

    def describe(self) -> str:
        return self.format
