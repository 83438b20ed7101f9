"""Dead letters: the records a sink cannot write, set aside in the task's
own transaction instead of failing the batch.

What the sinks share (each sink writes its dead letters its own way: a
table in the SQL sinks, ``sql/deadletter.py``; a topic in the Kafka sink):

- ``isolate``: finds the refused rows of a batch by bisection. The whole
  batch is tried first, so a batch without a refused row costs one
  attempt; a refused attempt is split in halves, each tried on its own,
  down to single rows. Each attempt must be atomic (all its rows or none:
  a savepoint, a single statement), so that every row ends up written
  once or refused once.
- a dead letter's position, ``(batch, task partition, row in task)``:
  what identifies the record for a deterministic replay (Spark gives a
  replayed task the same rows in the same order), plus the row's own
  source position when the DataFrame carries it (``source_columns``).
- the row as JSON text: column names as in the DataFrame, binary values in
  base64, decimals as strings (exact), times in ISO 8601, NaN and the
  infinities as strings, so that any JSON reader takes it.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa

from eoskit.connectors.sink_options import DEAD_LETTER_SOURCE_COLUMNS
from eoskit.twophase.contract import SinkError

#: The SQL sinks' default source columns: those of Spark's Kafka source.
SQL_SOURCE_DEFAULT = ("topic", "partition", "offset")


@dataclass(frozen=True)
class DeadLetter:
    """One refused row: where it was, why, and what it held."""

    sink_id: str
    batch: int
    task_partition: int
    #: 1-based position among the rows the task received in this batch.
    row_in_task: int
    error: str
    #: The row as JSON text.
    record: str
    #: JSON text of the source columns' values, or None without source columns.
    source: str | None


def isolate(count: int, attempt: Callable[[int, int], None],
            refused: Callable[[BaseException], bool]) -> list[tuple[int, BaseException]]:
    """Write rows ``[0, count)`` with ``attempt(start, length)``, which writes
    rows ``[start, start + length)`` atomically or raises. An error for
    which ``refused`` is true splits the attempt in halves, down to single
    rows; any other error propagates. Returns the refused rows (their
    offsets, in order) with their errors; every other row is written."""
    found: list[tuple[int, BaseException]] = []

    def visit(start: int, length: int) -> None:
        try:
            attempt(start, length)
        except Exception as exc:  # noqa: BLE001 - sorted by ``refused`` right here
            if not refused(exc):
                raise
            if length == 1:
                found.append((start, exc))
                return
            half = length // 2
            visit(start, half)
            visit(start + half, length - half)

    if count:
        visit(0, count)
    return found


def source_columns(given: Sequence[str] | None, columns: Sequence[str],
                   default: Sequence[str]) -> tuple[str, ...]:
    """The DataFrame columns that carry a row's source position: those
    ``given`` (option ``deadLetterSourceColumns``; matched as Spark matches
    names, an exact match first, else the one that differs in case only),
    or whichever of ``default`` the DataFrame has."""
    if given is None:
        return tuple(c for c in default if c in columns)
    found, missing = [], []
    for name in given:
        same = [name] if name in columns else [c for c in columns if c.lower() == name.lower()]
        if len(same) == 1:
            found.append(same[0])
        else:
            missing.append(name)
    if missing:
        raise SinkError(
            f"option '{DEAD_LETTER_SOURCE_COLUMNS.name}' names {', '.join(map(repr, missing))}, "
            f"which the DataFrame does not have (its columns: {', '.join(columns) or 'none'})")
    return tuple(found)


def json_value(value: Any) -> Any:
    """A value of ``to_pylist`` (or of a database driver) as JSON can hold it."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return str(value)


def dumps(value: Any) -> str:
    """Compact JSON in ASCII: any table's character set stores it unchanged."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def cut_json(text: str, limit: int) -> str:
    """``text`` (JSON) if it has at most ``limit`` characters, else JSON that
    says so and keeps the head of it: ``{"truncated":true,"length":n,"head":"..."}``."""
    if len(text) <= limit:
        return text
    # Escaping the head as a JSON string at most doubles it (the text is ASCII JSON).
    head = text[:max(0, (limit - 100) // 2)]
    return dumps({"truncated": True, "length": len(text), "head": head})


def row_values(batch: pa.RecordBatch, index: int, columns: Sequence[str] | None = None) -> dict[str, Any]:
    """Row ``index`` of ``batch`` (only ``columns``, if given) as JSON-ready
    values. Text that is not valid UTF-8 (which Spark's CAST(binary AS
    STRING) can make) is decoded with replacement characters."""
    names = batch.schema.names if columns is None else columns
    out: dict[str, Any] = {}
    for name in names:
        cell = batch.column(batch.schema.get_field_index(name)).slice(index, 1)
        try:
            value = cell.to_pylist()[0]
        except UnicodeDecodeError:
            raw = cell.cast(pa.binary()).to_pylist()[0]
            value = raw.decode("utf-8", errors="replace")
        out[name] = json_value(value)
    return out


def record_json(batch: pa.RecordBatch, index: int) -> str:
    """The whole row as JSON text, as the sink received it."""
    return dumps(row_values(batch, index))


def source_json(batch: pa.RecordBatch, index: int, columns: Sequence[str]) -> str | None:
    """The row's source position as JSON text, or None without source columns."""
    return dumps(row_values(batch, index, columns)) if columns else None


def dead_letter(sink_id: str, batch_id: int, task_partition: int, rows: pa.RecordBatch,
                index: int, row_in_task: int, error: str,
                sources: Sequence[str]) -> DeadLetter:
    """Row ``index`` of ``rows`` (the Arrow batch as the task received it)
    as a dead letter."""
    return DeadLetter(sink_id, batch_id, task_partition, row_in_task, error,
                      record_json(rows, index), source_json(rows, index, sources))
