"""Arrow columns as MySQL SQL literals, built column-wise in Arrow's C++ kernels.

Multi-row ``INSERT ... VALUES (...),(...)`` statements are the bulk path of the
MySQL/MariaDB sink (see ``transactions.py`` for why, with numbers). Escaping
every value in Python (what PyMySQL's ``executemany`` does) costs more than
the server's insert; here each column becomes an array of literal texts with
a handful of vectorised kernels, rows are joined with ``binary_join`` and
statements are cut at a byte budget below the server's ``max_allowed_packet``.

The literals assume the session's ``sql_mode`` lacks ``NO_BACKSLASH_ESCAPES``
(the sink's sessions make sure of it) and a ``time_zone`` of ``+00:00``:
Spark's TimestampType arrives as UTC and is written as UTC.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eoskit.twophase.contract import SinkError

NULL = pa.scalar("NULL", pa.string())


def _quoted(text: pa.Array) -> pa.Array:
    """'...' with the three characters that must be escaped in a MySQL string."""
    text = pc.replace_substring(text, "\\", "\\\\")
    text = pc.replace_substring(text, "'", "\\'")
    text = pc.replace_substring(text, "\x00", "\\0")
    return pc.binary_join_element_wise("'", text, "'", "")


def _hex(column: pa.Array) -> pa.Array:
    """Binary values as hex literals (X'..'): no escaping, any bytes."""
    return pa.array([None if v is None else f"X'{v.hex()}'" for v in column.to_pylist()],
                    pa.string())


def _utc_text(column: pa.Array) -> pa.Array:
    """A timestamp as 'YYYY-MM-DD HH:MM:SS.ffffff' in UTC. A tz-aware Arrow
    timestamp stores UTC: reinterpret it as naive (formatting a tz-aware one
    is an order of magnitude slower and appends a zone)."""
    unit = column.type.unit
    naive = column.view(pa.int64()).view(pa.timestamp(unit)) if column.type.tz else column
    if unit not in ("s", "us"):
        naive = pc.cast(naive, pa.timestamp("us"), safe=False)
    return pc.cast(naive, pa.string())


def literals(column: pa.Array, name: str) -> pa.Array:
    """One SQL literal per value (``NULL`` for nulls), as a string array."""
    kind = column.type
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(kind):
        column = column.dictionary_decode()
        kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_decimal(kind):
        text = pc.cast(column, pa.string())
    elif pa.types.is_floating(kind):
        finite = pc.is_finite(column)
        if not pc.all(pc.or_kleene(finite, pc.is_null(column))).as_py():
            raise SinkError(f"column {name!r} holds NaN or Infinity, which MySQL cannot store: "
                            "filter or replace them in the transform")
        text = pc.cast(column, pa.string())
    elif pa.types.is_boolean(kind):
        text = pc.if_else(column, "1", "0")
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        text = _quoted(column.cast(pa.string()))
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        text = _hex(column)
    elif pa.types.is_date(kind):
        text = _quoted(pc.cast(column, pa.string()))
    elif pa.types.is_timestamp(kind):
        text = _quoted(_utc_text(column))
    elif pa.types.is_null(kind):
        text = pa.nulls(len(column), pa.string())
    else:
        raise SinkError(f"column {name!r}: Arrow type {kind} has no MySQL literal")
    return pc.fill_null(text, NULL)


def value_rows(batch: pa.RecordBatch) -> pa.Array:
    """``v1,v2,...`` per row, ready to go between parentheses."""
    columns = [literals(batch.column(i), name) for i, name in enumerate(batch.schema.names)]
    if len(columns) == 1:
        return columns[0]
    return pc.binary_join_element_wise(*columns, ",")


def statements(prefix: bytes, rows: pa.Array, suffix: bytes, max_bytes: int) -> Iterator[tuple[bytes, int]]:
    """``prefix (row),(row),... suffix`` statements of at most ``max_bytes``
    each (a single larger row gets a statement of its own), with their row
    counts. The joining runs in Arrow; only whole statements become bytes."""
    if len(rows) == 0:
        return
    budget = max_bytes - len(prefix) - len(suffix) - 2
    lengths = pc.binary_length(rows).to_numpy(zero_copy_only=False).astype(np.int64) + 3
    ends = np.cumsum(lengths)
    start, base = 0, 0
    total = len(rows)
    while start < total:
        stop = int(np.searchsorted(ends, base + budget, side="right"))
        stop = max(stop, start + 1)
        chunk = rows.slice(start, stop - start)
        offsets = pa.array([0, len(chunk)], pa.int32())
        as_bytes = chunk.cast(pa.binary())  # same layout: no copy, and no str round trip
        joined = pc.binary_join(pa.ListArray.from_arrays(offsets, as_bytes), b"),(")[0].as_py()
        yield b"".join((prefix, b"(", joined, b")", suffix)), stop - start
        base = int(ends[stop - 1])
        start = stop
