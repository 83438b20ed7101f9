"""The contract a transactional sink implements: small, and precise about
where each method runs and what raising means.

A sink plug-in provides one ``TransactionalSink``. eoskit pickles it to
executors (``begin`` runs there, once per task) and to the driver's commit
process (``commit_prepared``, ``rollback_prepared``, ``list_prepared``).
Everything a method needs must therefore be in the sink's own attributes
(built from the data source options); connections are opened lazily and may
be cached per process.

Transaction ids are opaque strings made by eoskit (``eoskit.twophase.txn_id``),
at most 64 bytes of ASCII, unique per task attempt.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import StructType


class SinkError(RuntimeError):
    """A sink refused a write or a setting; the message says what to change."""


@dataclass(frozen=True)
class SinkContext:
    """What a sink learns about the query when it is checked (driver side)."""

    sink_id: str
    checkpoint_location: str
    commit_mode: str


@dataclass(frozen=True)
class Marker:
    """Progress marker of the idempotent mode: this task's rows of this batch
    are committed. Stored by the sink in the same transaction as the rows."""

    sink_id: str
    batch: int
    partition: int


class SinkTransaction(ABC):
    """One task attempt's transaction. Runs on an executor.

    eoskit calls ``write`` for every Arrow batch of the task, then exactly one
    of ``prepare`` (two-phase), ``commit`` (at-least-once) or ``abort``.
    Raising from ``write`` or ``prepare`` fails the task; eoskit then calls
    ``abort``, which must not raise for a transaction that is already gone.
    """

    rows: int = 0
    bytes: int = 0

    @abstractmethod
    def write(self, batch: pa.RecordBatch) -> None:
        """Add the batch's rows to the transaction (not visible to readers)."""

    @abstractmethod
    def prepare(self) -> None:
        """Make the transaction durable and committable by its id from any
        process, while still invisible (PREPARE TRANSACTION, XA PREPARE, a
        closed staging file). After it returns, only ``commit_prepared`` or
        ``rollback_prepared`` may end it."""

    @abstractmethod
    def commit(self) -> None:
        """Commit directly, without a prepare (at-least-once mode)."""

    @abstractmethod
    def abort(self) -> None:
        """Roll back an unprepared transaction; a no-op if there is none."""

    def claim(self, marker: Marker) -> bool:
        """Idempotent mode, called first in the transaction: record the marker
        in it and return True, or return False if the marker is already
        committed (this task's rows of this batch are in: write nothing). If
        another open transaction holds the same marker, wait for it: that is
        what keeps two attempts of one task from both committing."""
        raise NotImplementedError(f"{type(self).__name__} has no idempotent mode")


class TransactionalSink(ABC):
    """A sink that can prepare a task's writes and commit them by id later."""

    #: Short name used in messages, e.g. ``postgres``.
    kind: str = "sink"

    @abstractmethod
    def check(self, schema: StructType, context: SinkContext) -> None:
        """On the driver, before any data moves in a batch: refuse, with a
        ``SinkError`` that says what to change, anything that would fail later
        (missing table, incompatible columns, missing rights, settings, a sink
        id already used by another query), and create what the mode needs
        (e.g. the marker table of the idempotent mode)."""

    @abstractmethod
    def begin(self, txn_id: str) -> SinkTransaction:
        """On an executor: open the transaction a task writes into."""

    @abstractmethod
    def commit_prepared(self, txn_id: str) -> bool:
        """On the driver: commit a prepared transaction. Return False if no
        prepared transaction has this id (already committed or rolled back);
        eoskit decides from its decision log whether that is fine."""

    @abstractmethod
    def rollback_prepared(self, txn_id: str) -> bool:
        """Roll back a prepared transaction; False if there is none.
        May run on the driver or on an executor."""

    @abstractmethod
    def list_prepared(self, prefix: str) -> list[str]:
        """Ids of every prepared transaction whose id starts with ``prefix``."""

    def prune_markers(self, sink_id: str, below_batch: int) -> None:
        """Idempotent mode, on the driver: forget markers of batches below
        ``below_batch`` (Spark never replays them)."""

    def describe(self) -> str:
        """Where the sink writes, without secrets, for messages and logs."""
        return self.kind

    def close(self) -> None:
        """Release connections held by this process (optional)."""
