r"""Arrow columns as MySQL SQL literals, built column-wise in Arrow's C++ kernels.

Multi-row ``INSERT ... VALUES (...),(...)`` statements are the bulk path of the
MySQL/MariaDB sink (see ``transactions.py`` for why, with numbers). Escaping
every value in Python (what PyMySQL's ``executemany`` does) costs more than
the server's insert; here each column becomes an array of literal texts with
a handful of vectorised kernels, rows are joined with ``binary_join`` and
statements are cut at a byte budget below the server's ``max_allowed_packet``.

Why a literal cannot end early. The sink's sessions are pinned to
``character_set_client`` utf8mb4 and a ``sql_mode`` without
``NO_BACKSLASH_ESCAPES``, and read back to prove it (``connection.py``).
Text is refused unless it is valid UTF-8 (Spark's ``CAST(binary AS
STRING)`` makes strings Arrow never checks), and in valid UTF-8 every byte
of a multi-byte character is >= 0x80: no byte of one can pair with the
escaping backslash or be taken for a quote, which is what GBK, BIG5 or SJIS
allow and why the character set is pinned. Strings are then escaped exactly
as PyMySQL's ``escape_string`` escapes them (backslash before ``\``, ``'``,
``"``, NUL, newline, carriage return, Ctrl-Z), so the sink's literal of a
string is the driver's own, byte for byte; binary values are hex literals
(``X'..'``, PyMySQL's own form too), numbers come from Arrow's number
formatting (digits, sign, point, exponent). The session's ``time_zone`` is
``+00:00``: Spark's TimestampType arrives as UTC and is written as UTC.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eoskit.twophase.contract import SinkError

NULL = pa.scalar("NULL", pa.string())


class UnwritableValueError(SinkError):
    """A value no MySQL column can hold (NaN, text that is not UTF-8): a
    row the server would refuse, found before anything is sent."""

    def __init__(self, message: str, column: str, reason: str) -> None:
        super().__init__(message)
        self.column = column
        self.reason = reason


#: PyMySQL's escapes (``pymysql.converters.escape_string``); the backslash
#: first, so that no other replacement's backslash is doubled.
_ESCAPES = (("\\", "\\\\"), ("\x00", "\\0"), ("\n", "\\n"), ("\r", "\\r"),
            ("\x1a", "\\Z"), ('"', '\\"'), ("'", "\\'"))

#: The two lower-case hex digits of each byte value, as one 16-bit item
#: (native order both ways: the item's bytes are the digits' bytes).
_HEX_DIGITS = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), np.uint16)


def _quoted(text: pa.Array) -> pa.Array:
    """'...' escaped as PyMySQL escapes a string; ``text`` is valid UTF-8
    (``_utf8``)."""
    for char, escaped in _ESCAPES:
        text = pc.replace_substring(text, char, escaped)
    return pc.binary_join_element_wise("'", text, "'", "")


def _utf8(column: pa.Array, name: str) -> pa.Array:
    """The string column as ``string``, refused unless every value is valid
    UTF-8 (null slots are not looked at)."""
    column = column.cast(pa.string())
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:
        bad = next((i for i, v in enumerate(column.cast(pa.binary()).to_pylist())
                    if v is not None and not _decodes(v)), None)
        where = f" (row {bad} of the batch)" if bad is not None else ""
        raise UnwritableValueError(
            f"column {name!r} holds text that is not valid UTF-8{where}; MySQL would reject "
            "or mangle it. CAST(binary AS STRING) makes such strings: keep the column binary, "
            "or clean it in the transform", name, "text that is not valid UTF-8"
        ) from None
    return column


def _decodes(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _hex(column: pa.Array) -> pa.Array:
    """Binary values as hex literals (X'..'): no escaping, any bytes. One
    table lookup in numpy over the values' bytes (Arrow has no hex kernel);
    null slots come out null."""
    if len(column) == 0:
        return pa.array([], pa.string())
    buffers = column.buffers()
    if pa.types.is_fixed_size_binary(column.type):
        width = column.type.byte_width
        offsets = (np.arange(len(column) + 1, dtype=np.int64) + column.offset) * width
        data = buffers[1]
    else:
        kind = np.int64 if pa.types.is_large_binary(column.type) else np.int32
        offsets = np.frombuffer(buffers[1], kind)[column.offset:column.offset + len(column) + 1]
        offsets = offsets.astype(np.int64)
        data = buffers[2]
    first, last = int(offsets[0]), int(offsets[-1])
    raw = np.frombuffer(data, np.uint8)[first:last] if data is not None else np.empty(0, np.uint8)
    digits = pa.py_buffer(_HEX_DIGITS[raw].tobytes())
    body = pa.Array.from_buffers(pa.large_string(), len(column),
                                 [None, pa.py_buffer((offsets - first) * 2), digits])
    hexed = pc.binary_join_element_wise("X'", body.cast(pa.string()), "'", "")
    return pc.if_else(pc.is_valid(column), hexed, pa.scalar(None, pa.string()))


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
            raise UnwritableValueError(f"column {name!r} holds NaN or Infinity, which MySQL cannot store: "
                                  "filter or replace them in the transform", name,
                                  "NaN or Infinity, which MySQL cannot store")
        text = pc.cast(column, pa.string())
    elif pa.types.is_boolean(kind):
        text = pc.if_else(column, "1", "0")
    elif (pa.types.is_string(kind) or pa.types.is_large_string(kind)
          or pa.types.is_string_view(kind)):
        text = _quoted(_utf8(column, name))
    elif pa.types.is_binary_view(kind):
        text = _hex(column.cast(pa.binary()))
    elif (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
          or pa.types.is_fixed_size_binary(kind)):
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
