"""What the conformance kit needs to know about a sink under test.

Split by capability, as the sinks are: every target is a
``ConformanceTarget`` (point a job at the sink, read what it wrote); a
target whose sink has a two-phase mode is a ``PreparingTarget`` too (read
the server's prepared transactions); one that can hold the stateful job's
output a ``TotalsTarget``. A target implements the contracts of what its
sink can do and nothing else: an idempotent-only sink's target has no
``prepared``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class ConformanceTarget(ABC):
    """A sink, plus an independent client to check what it wrote."""

    #: Spark format name, e.g. ``eoskit-postgres``.
    format: str
    #: SQL expressions over (id, amount, customer) giving the columns the sink
    #: takes, when it does not take those three (e.g. Kafka's key and value).
    select: tuple[str, ...] = ()
    #: Does the sink record each task's row count with its marker (so that a
    #: replay with other rows is refused)? Enables the scenarios that need it.
    records_replay_rows: bool = False

    @abstractmethod
    def options(self, table: str) -> dict[str, str]:
        """writeStream options that write the job's rows (columns ``id`` bigint,
        ``amount`` bigint, ``customer`` string) into ``table`` in append mode."""

    @abstractmethod
    def create_table(self, table: str) -> None:
        """An empty table with those columns and no unique key, so that a
        duplicate would show."""

    @abstractmethod
    def rows(self, table: str) -> list[tuple[int, int]]:
        """Every ``(id, amount)`` in the table, read by a client eoskit does not use."""

    def prepared(self, prefix: str) -> list[str]:
        """Ids of the server's prepared transactions starting with ``prefix``:
        none for a sink with no two-phase mode, which prepares nothing (the
        kit's checks that nothing is left prepared, and its clean-up, find
        nothing to do). A two-phase sink's target is a ``PreparingTarget``,
        which must read them."""
        return []

    def in_doubt(self, prefix: str, table: str) -> list[str]:
        """What the sink left in doubt after a scenario: by default the
        prepared transactions; a sink without them (Kafka) reports what it
        can leave behind instead (open transactions in ``table``)."""
        return self.prepared(prefix)

    def resolve_command(self) -> list[str]:
        """Arguments of ``eoskit txn`` that name this sink (e.g. ``--url ...``)."""
        return []

    def check_order(self, table: str) -> None:
        """Assert what the sink promises about order (optional), e.g. that
        records of one input partition keep their order per output partition."""
    def resolve_command_for(self, table: str) -> list[str]:
        """The same for the sink writing ``table``, where that matters (a
        files sink is named by its directory); ``resolve_command()`` by default."""
        return self.resolve_command()

    def kept(self, table: str, sink_id: str) -> dict[str, int]:
        """Counts of what the sink keeps beside the rows that a long job must
        not let grow with its batches (e.g. marker rows), read independently;
        the endurance scenario holds them flat. None by default."""
        return {}

    def leftovers(self, table: str) -> list[str]:
        """Anything the sink's transactions left behind besides prepared ids
        (e.g. a files sink's staged files), read independently; checked
        empty after each scenario. None by default."""
        return []

    def drop_table(self, table: str) -> None:
        """Remove the table after a scenario (optional)."""

    def rollback(self, txn_id: str) -> None:
        """Roll back one prepared transaction, to clean up after a failed
        scenario so that its locks do not block the next (optional)."""


class PreparingTarget(ConformanceTarget):
    """A target whose sink has a two-phase mode (``commitMode=twophase``),
    and so may leave prepared transactions: the kit reads them to check that
    none is left after a scenario, and that a deleted checkpoint leaves them
    untouched for ``eoskit txn`` to settle."""

    @abstractmethod
    def prepared(self, prefix: str) -> list[str]:
        """Ids of the server's prepared / in-doubt transactions starting with
        ``prefix``, read with a client eoskit does not use. Runs in the test
        process, between and after the scenario's jobs."""


class TotalsTarget(ABC):
    """A target that can also hold a stateful job's output: running totals
    per customer, written in Spark's update mode (``foreachBatch``) and
    upserted by key. Implemented besides ``ConformanceTarget`` by sinks that
    the stateful scenarios run against."""

    #: SQL expressions over (customer, total, orders) giving the columns the
    #: sink takes, when it does not take those three.
    totals_select: tuple[str, ...] = ()

    @abstractmethod
    def totals_options(self, table: str) -> dict[str, str]:
        """writeStream options that upsert ``(customer, total, orders)`` rows
        into ``table``, keyed by ``customer``."""

    @abstractmethod
    def create_totals_table(self, table: str) -> None:
        """An empty table for those rows, ``customer`` its key."""

    @abstractmethod
    def totals(self, table: str) -> dict[str, tuple[int, int]]:
        """``customer -> (total, orders)`` as the table holds them now, read
        by a client eoskit does not use; an AssertionError for anything that
        shows a batch written twice (e.g. a log of updates that repeats one)."""
