"""What a ``Pipeline`` asks of its source and sink: small typed protocols.

Every method runs on the driver, in the process that builds and starts the
query; raising in one fails the job before anything runs (``describe`` must
not raise). A component has what it can do and nothing else: a sink that
cannot say its format is not ``Formatted``; a source that cannot hold a
batch back is not ``Pausable``. The runtime asks with ``isinstance`` (the
protocols are runtime-checkable), never by probing attribute names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # importing this module costs no PySpark (the CLI's light verbs)
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter


@runtime_checkable
class Source(Protocol):
    """A source component."""

    def read_stream(self, spark: SparkSession) -> DataFrame:
        """The streaming DataFrame, not started."""
        ...

    def describe(self) -> str:
        """One line for progress and errors, without secrets."""
        ...


@runtime_checkable
class Sink(Protocol):
    """A sink component."""

    def write_stream(self, df: DataFrame) -> DataStreamWriter:
        """``df.writeStream`` set up for this sink, not started."""
        ...

    def describe(self) -> str:
        """One line for progress and errors, without secrets."""
        ...


@runtime_checkable
class Formatted(Protocol):
    """A source or sink that says what it is: its Spark format and options.

    A savepoint's fingerprint records them (``runtime/fingerprint.py``); the
    executor check (``runtime/executors.py``) finds the connector's module
    that every executor must import from the format."""

    @property
    def spark_format(self) -> str:
        """The Spark format (``eoskit-kafka``, ``eoskit-postgres``, ``parquet``)."""
        ...

    def all_options(self) -> dict[str, str]:
        """Every option given to Spark, in Spark's names."""
        ...


@runtime_checkable
class Pausable(Protocol):
    """A source that can hold each batch back (the ``min_pause`` setting)."""

    def with_min_pause(self, seconds: float, checkpoint: str) -> Source:
        """The same source, holding each batch back until ``seconds`` after
        the last commit recorded in ``checkpoint``."""
        ...
