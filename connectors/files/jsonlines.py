"""Arrow record batches as JSON lines, built with Arrow compute kernels.

pyarrow reads JSON but does not write it, and a per-row ``json.dumps``
costs a few microseconds a row. Here every column becomes an array of JSON
texts with a handful of vectorised kernels (casts, string replacements,
element-wise joins), the texts of a row are joined into one object, and the
lines leave as one buffer. Output follows Spark's JSON writer: null fields
are left out (its ``ignoreNullFields``), NaN and infinities are the strings
``"NaN"`` / ``"Infinity"``, dates ``"2026-11-21"``, timestamps ISO 8601 in
UTC with microseconds (``"2026-11-21T12:00:00.000000Z"``), binary base64
(the one per-value path: Arrow has no base64 kernel), maps objects.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_NEEDS_ESCAPE = r'["\\\x00-\x1f]'
_SHORT_ESCAPES = (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"),
                  ("\b", "\\b"), ("\f", "\\f"))
_OTHER_CONTROLS = [chr(c) for c in range(0x20) if chr(c) not in "\n\r\t\b\f"]


class JsonEncodingError(TypeError):
    """A column type JSON lines cannot carry."""


def encode_lines(batch: pa.RecordBatch | pa.Table) -> pa.Buffer:
    """Every row of ``batch`` as one JSON object and a newline, as a buffer."""
    if isinstance(batch, pa.Table):
        batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
        if batch is None:
            return pa.py_buffer(b"")
    if batch.num_rows == 0:
        return pa.py_buffer(b"")
    fields = [(name, _encode(column, name)) for name, column in zip(batch.schema.names, batch.columns)]
    return _concatenate(_object(fields, batch.num_rows, "}\n"))


def _object(fields: list[tuple[str, pa.Array]], length: int, close: str = "}") -> pa.Array:
    """``{"name":text,...}`` per row, leaving out null texts. Each field is
    written with a leading comma and the first comma cut off: joining with
    ``null_handling="skip"`` drops rows whose fields are all null (pyarrow 26)."""
    if not fields:
        return pa.array(["{" + close] * length, pa.string())
    parts = [pc.binary_join_element_wise("," + json.dumps(name) + ":", text, "") for name, text in fields]
    body = pc.binary_join_element_wise(*parts, "", null_handling="replace", null_replacement="")
    return pc.binary_join_element_wise("{", pc.utf8_slice_codeunits(body, 1), close, "")


def _concatenate(texts: pa.Array) -> pa.Buffer:
    """The values of a string array back to back: a slice of its data buffer."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    offset_type = np.int64 if pa.types.is_large_string(texts.type) else np.int32
    offsets = np.frombuffer(texts.buffers()[1], dtype=offset_type)[texts.offset:texts.offset + len(texts) + 1]
    start, end = int(offsets[0]), int(offsets[-1])
    return texts.buffers()[2].slice(start, end - start)


def _encode(column: pa.Array, name: str) -> pa.Array:
    """JSON text of each value (a string array), null where the value is null."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if pa.types.is_dictionary(kind):
        return _encode(column.dictionary_decode(), name)
    if pa.types.is_null(kind):
        return pa.nulls(len(column), pa.string())
    if pa.types.is_boolean(kind):
        return pc.if_else(column, "true", "false")
    if pa.types.is_integer(kind) or pa.types.is_decimal(kind):
        return pc.cast(column, pa.string())
    if pa.types.is_floating(kind):
        return _float(column)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return quote(pc.cast(column, pa.string()))
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return pa.array([None if v is None else '"' + base64.b64encode(v).decode() + '"'
                         for v in column.to_pylist()], pa.string())
    if pa.types.is_date(kind) or pa.types.is_time(kind):
        return quote(pc.cast(column, pa.string()))
    if pa.types.is_timestamp(kind):
        return _timestamp(column)
    if pa.types.is_struct(kind):
        return _struct(column, name)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _list(column, name)
    if pa.types.is_map(kind):
        return _map(column, name)
    raise JsonEncodingError(f"column {name!r} of type {kind} cannot be written as JSON lines")


def quote(texts: pa.Array) -> pa.Array:
    """JSON string literals: escape what JSON requires, then add the quotes."""
    if len(texts) and pc.any(pc.match_substring_regex(texts, _NEEDS_ESCAPE)).as_py():
        for raw, escaped in _SHORT_ESCAPES:
            texts = pc.replace_substring(texts, raw, escaped)
        for char in _OTHER_CONTROLS:
            texts = pc.replace_substring(texts, char, f"\\u{ord(char):04x}")
    return pc.binary_join_element_wise('"', texts, '"', "")


def _float(column: pa.Array) -> pa.Array:
    text = pc.cast(column, pa.string())
    if pc.any(pc.invert(pc.is_finite(column))).as_py():
        text = pc.if_else(pc.is_nan(column), '"NaN"', text)
        text = pc.if_else(pc.and_(pc.is_inf(column), pc.greater(column, 0)), '"Infinity"', text)
        text = pc.if_else(pc.and_(pc.is_inf(column), pc.less(column, 0)), '"-Infinity"', text)
    return text


def _timestamp(column: pa.Array) -> pa.Array:
    """Naive values as they are, zoned ones in UTC with a Z (formatted as
    naive: Arrow formats zoned timestamps row by row through its zone database)."""
    naive = pc.cast(column, pa.timestamp(column.type.unit))
    text = pc.replace_substring(pc.cast(naive, pa.string()), " ", "T", max_replacements=1)
    suffix = '"' if column.type.tz is None else 'Z"'
    return pc.binary_join_element_wise('"', text, suffix, "")


def _struct(column: pa.StructArray, name: str) -> pa.Array:
    fields = [(field.name, _encode(child, f"{name}.{field.name}"))
              for field, child in zip(column.type, column.flatten())]
    return pc.if_else(column.is_valid(), _object(fields, len(column)), pa.scalar(None, pa.string()))


def _rebased(offsets: pa.Array) -> pa.Array:
    return pc.subtract(offsets, offsets[0])


def _joined(offsets: pa.Array, items: pa.Array, valid: pa.Array, open_: str, close: str) -> pa.Array:
    lists = pa.ListArray.from_arrays(pc.cast(_rebased(offsets), pa.int32()), items)
    text = pc.binary_join_element_wise(open_, pc.binary_join(lists, ","), close, "")
    return pc.if_else(valid, text, pa.scalar(None, pa.string()))


def _list(column: pa.Array, name: str) -> pa.Array:
    # The child values the offsets point at (``flatten`` would skip those
    # behind null lists, and the offsets would no longer match).
    if pa.types.is_fixed_size_list(column.type):
        size = column.type.list_size
        offsets = pa.array(np.arange(column.offset, column.offset + len(column) + 1,
                                     dtype=np.int64) * size)
    else:
        offsets = column.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    values = column.values.slice(start, end - start)
    items = pc.fill_null(_encode(values, f"{name}[]"), "null")
    return _joined(offsets, items, column.is_valid(), "[", "]")


def _map(column: pa.MapArray, name: str) -> pa.Array:
    start, end = column.offsets[0].as_py(), column.offsets[-1].as_py()
    keys = column.keys.slice(start, end - start)
    values = column.items.slice(start, end - start)
    key_text = quote(pc.cast(keys, pa.string())) if not pa.types.is_string(keys.type) else quote(keys)
    items = pc.binary_join_element_wise(key_text, pc.fill_null(_encode(values, f"{name}{{}}"), "null"), ":")
    return _joined(column.offsets, items, column.is_valid(), "{", "}")
