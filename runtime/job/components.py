"""What a ``Pipeline`` asks of its source and sink: small typed protocols.

Every method runs on the driver, in the process that builds and starts the
query; raising in one fails the job before anything runs (``describe`` must
not raise). A component has what it can do and nothing else: a sink that
cannot say its format is not ``Formatted``; a source that cannot hold a
batch back is not ``Pausable``. The runtime asks with ``isinstance`` (the
protocols are runtime-checkable), never by probing attribute names.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

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

    A savepoint's fingerprint records them (``runtime/job/fingerprint.py``); the
    executor check (``runtime/spark/executors.py``) finds the connector's module
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


@runtime_checkable
class Gated(Protocol):
    """A source that can hold the next batch's planning while a stop waits
    for a batch boundary (``core/stop_gate.py``; eoskit-kafka)."""

    def with_stop_gate(self, directory: str) -> Source:
        """The same source, holding its planning while the gate in
        ``directory`` is closed."""
        ...


@runtime_checkable
class Chainable(Protocol):
    """A source whose tasks can run a chained transform and write to the
    sink themselves (``runtime/job/chain.py``; eoskit-kafka). Asked on the
    driver, when the query starts."""

    def chained_stream(self, spark: SparkSession, plan: str) -> DataFrame:
        """The streaming DataFrame of the tasks' acknowledgements (one binary
        column, ``ack``), its tasks doing what ``plan`` says (an encoded
        ``ChainPlan``); not started."""
        ...

    def chains_values(self) -> str | None:
        """The schema (DDL) its values are decoded into, as the transform
        receives them; None: Kafka's own columns."""
        ...


@runtime_checkable
class Checkpointed(Protocol):
    """A source that keeps state of its own beside the query's checkpoint
    (eoskit-kafka's broadcast state). Asked on the driver, before the
    transform is built."""

    def with_checkpoint(self, checkpoint: str) -> Source:
        """The same source, told the query's (absolute) checkpoint location."""
        ...


@runtime_checkable
class Replayable(Protocol):
    """A source whose input can be pinned and read again, the same records
    every time (``eoskit chaos`` runs a job several times on one input).
    Runs on the driver of the command, before any job starts."""

    def pin(self) -> dict:
        """The input as it is now, as JSON (what ``bounded`` takes): from
        where a new query of this source would start to where the data ends
        now. Raises ``ValueError`` (``OptionError``), naming the option, when
        there is nothing to read."""
        ...

    def bounded(self, pin: dict) -> Source:
        """The same source reading exactly what ``pin`` holds, however often
        and from whatever checkpoint it starts; side-effect free."""
        ...

    def describe_pin(self, pin: dict) -> str:
        """One line: what ``pin`` holds (``orders: 4 partitions, 20,000 offsets``)."""
        ...


class InputRecord(NamedTuple):
    """One record of a generated input (``eoskit chaos --records N``), as
    ``ScratchInput.produce`` takes it: already checked and in bytes."""

    key: bytes | None
    #: None: a record without a value (a tombstone).
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    #: None: the producer's partitioner picks, from the key.
    partition: int | None = None


@runtime_checkable
class ScratchInput(Protocol):
    """A scratch copy of a source's input (a suffixed topic) that a command
    fills with records of its own, and the source reading it instead
    (``eoskit chaos --records N --generator SPEC``). Every method runs on
    the driver of the command: ``create`` and ``produce`` before any run
    starts, ``drop`` at the end; ``source`` also runs in each run's driver.
    Raising fails the command, and what was created is dropped with the
    other scratch targets."""

    #: What messages call it: ``topic orders-chaos1a2bi``.
    name: str

    def create(self) -> None:
        """Create the scratch input like the original (a topic's partitions,
        replication and configuration), empty. Raises ``ValueError``
        (``OptionError``) when the original does not exist."""
        ...

    def produce(self, records: Iterable[InputRecord]) -> int:
        """Write ``records`` into the scratch input, every one acknowledged
        before returning; how many. Raises ``ValueError`` naming the record
        (by its index) the input cannot hold, before writing any; raises when
        a record was not delivered, naming the scratch input."""
        ...

    def source(self) -> Source:
        """The job's source, same options, reading the scratch input from
        its beginning instead of its own input (``Replayable`` as the job's
        source is); side-effect free."""
        ...

    def drop(self) -> None:
        """Remove the scratch input; nothing of the original is touched.
        Removing what is not there is no error."""
        ...


@runtime_checkable
class Fillable(Protocol):
    """A source whose input can be replaced by a scratch input the command
    fills (``eoskit chaos --records N``): the generated records never reach
    the job's real input. A source without it is refused by ``--records``."""

    def scratch_input(self, suffix: str) -> ScratchInput:
        """The scratch input named with ``suffix`` (lower-case letters and
        digits); side-effect free until its ``create`` (each run's driver
        asks for it again, for its ``source``). Raises ``ValueError``
        (``OptionError``) when the source's input cannot be copied (a source
        reading several topics)."""
        ...


@runtime_checkable
class Scratch(Protocol):
    """A scratch copy of a sink's target (a suffixed table, topic or path)
    and the sink writing into it instead. Every method runs on the driver
    of the command; ``rows`` reads with the service's own client, not
    through Spark."""

    #: What the reports call it: ``table public.orders_chaos_r1``.
    name: str

    def sink(self) -> Sink:
        """The job's sink, same options, writing into the scratch target
        (and into scratch copies of its dead-letter and marker targets);
        side-effect free."""
        ...

    def create(self) -> None:
        """Create the scratch target like the original (its columns, keys,
        partitions, configuration) where the original exists; a sink that
        creates its target creates the scratch one itself otherwise."""
        ...

    def rows(self) -> tuple[tuple[str, ...], list[tuple], tuple[str, ...]]:
        """``(columns, rows, key)``: every row the scratch target holds as a
        reader of committed data sees it, and the columns that identify a
        row (a primary key, Kafka's key; ``()`` when none)."""
        ...

    def drop(self) -> None:
        """Remove the scratch target and its copies; nothing of the
        original is touched. Removing what is not there is no error."""
        ...


@runtime_checkable
class Redirectable(Protocol):
    """A sink that can write into a scratch copy of its target instead of
    the target itself (``eoskit chaos``): a sink without it is refused by
    the command, so that nothing is ever written to the job's real target."""

    def scratch(self, suffix: str) -> Scratch:
        """The scratch copy named with ``suffix`` (lower-case letters and
        digits); side-effect free until its ``create``."""
        ...


@runtime_checkable
class Served(Protocol):
    """A source or sink that says which servers it talks to (``eoskit chaos``
    stops and starts them when they are eoskit's dev services). Runs on the
    driver of the command; must not raise, nor connect to anything."""

    def servers(self) -> tuple[tuple[str, str, int], ...]:
        """``(kind, host, port)`` of every server of the component's
        connection, as the job names them: ``kind`` is ``postgresql``,
        ``mysql``, ``mariadb`` or ``kafka``."""
        ...
