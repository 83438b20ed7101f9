"""Names and marker values of the Kafka sink's task-commit protocol (pure).

Each task partition p of a sink has
- a stable transactional id, ``eoskit-<sinkId>-<p>``: a new attempt's
  ``init_transactions`` fences every older producer of that id and aborts
  its open transaction, whatever run it belongs to;
- a consumer group of the same name, whose committed offset on the marker
  topic's partition 0 is the task's progress marker. It is committed with
  ``send_offsets_to_transaction``, so it becomes visible together with the
  task's records, or not at all.

A marker offset packs the batch and the task's row count:
``batch << 32 | rows``. Reading it back tells a replayed task both that its
batch is in and how many rows the committed attempt wrote (eoskit refuses a
replay with other rows). Kafka keeps a commit's metadata string too, but not
every Kafka-compatible broker does; the offset survives everywhere. These
groups are the sink's own: their "offsets" are markers, not positions.
"""

from __future__ import annotations

from dataclasses import dataclass

ROWS_BITS = 32
MAX_ROWS = (1 << ROWS_BITS) - 1
#: What confluent-kafka reports for a group without a committed offset.
NO_OFFSET = -1001


def transactional_id(sink_id: str, partition: int) -> str:
    return f"eoskit-{sink_id}-{partition}"


def marker_group(sink_id: str, partition: int) -> str:
    return f"eoskit-{sink_id}-{partition}"


@dataclass(frozen=True)
class CommittedMarker:
    batch: int
    rows: int


def encode(batch: int, rows: int) -> int:
    if rows > MAX_ROWS:
        raise ValueError(f"a task of batch {batch} wrote {rows} rows; a marker holds at most "
                         f"{MAX_ROWS}: use more partitions")
    return (batch << ROWS_BITS) | rows


def decode(offset: int) -> CommittedMarker | None:
    """The marker a committed offset holds, or None for no marker."""
    if offset < 0:
        return None
    return CommittedMarker(offset >> ROWS_BITS, offset & MAX_ROWS)
