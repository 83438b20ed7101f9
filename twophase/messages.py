"""What travels from a task to the driver: the task's acknowledgement."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage


@dataclass(frozen=True)
class PreparedMessage(WriterCommitMessage):
    """A task's ack. ``txn_id`` is None when the task wrote nothing to commit:
    a replay of a decided batch, an empty partition, or at-least-once mode
    (where the task committed by itself)."""

    batch: int
    partition: int
    attempt: int
    txn_id: str | None
    rows: int
    bytes: int
    replay: bool = False
