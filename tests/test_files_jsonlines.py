"""JSON lines from Arrow kernels: valid JSON, Spark's conventions, every row once."""

from __future__ import annotations

import datetime
import decimal
import io
import json

import pyarrow as pa
import pyarrow.json as pajson
import pytest

from eoskit.connectors.files.jsonlines import JsonEncodingError, encode_lines


def lines(data: pa.Table) -> list[dict]:
    text = encode_lines(data.combine_chunks().to_batches()[0]).to_pybytes().decode()
    assert text.endswith("\n") or text == ""
    return [json.loads(line) for line in text.splitlines()]


def test_scalars_follow_sparks_json_writer():
    table = pa.table({
        "id": pa.array([1, None, -3], pa.int64()),
        "text": pa.array(['quote " backslash \\ newline \n', None, "\x01 ünï \t"]),
        "x": pa.array([0.5, float("nan"), float("-inf")]),
        "flag": pa.array([True, False, None]),
        "day": pa.array([datetime.date(2026, 11, 21), None, datetime.date(1970, 1, 1)]),
        "at": pa.array([datetime.datetime(2026, 11, 21, 12, 0, 0, 123456), None,
                        datetime.datetime(1970, 1, 1)], pa.timestamp("us", tz="UTC")),
        "local": pa.array([datetime.datetime(2026, 1, 2, 3, 4, 5), None, None], pa.timestamp("us")),
        "amount": pa.array([decimal.Decimal("123.45"), None, decimal.Decimal("-0.01")], pa.decimal128(12, 2)),
        "raw": pa.array([b"\x00\xff", None, b""]),
    })
    assert lines(table) == [
        {"id": 1, "text": 'quote " backslash \\ newline \n', "x": 0.5, "flag": True, "day": "2026-11-21",
         "at": "2026-11-21T12:00:00.123456Z", "local": "2026-01-02T03:04:05.000000",
         "amount": 123.45, "raw": "AP8="},
        {"x": "NaN", "flag": False},  # null fields are left out
        {"id": -3, "text": "\x01 ünï \t", "x": "-Infinity", "day": "1970-01-01",
         "at": "1970-01-01T00:00:00.000000Z", "amount": -0.01, "raw": ""},
    ]


def test_nested_values_and_slices():
    table = pa.table({
        "items": pa.array([[1, None, 3], None, [], [4]], pa.list_(pa.int64())),
        "pair": pa.array([[1, 2], None, [3, 4], [5, 6]], pa.list_(pa.int32(), 2)),
        "who": pa.array([{"name": "a", "age": 1}, None, {"name": None, "age": None}, {"name": "d", "age": 4}]),
        "tags": pa.array([[("k", 1)], None, [('q"', None), ("b", 2)], []], pa.map_(pa.string(), pa.int64())),
    })
    expected = [
        {"items": [1, None, 3], "pair": [1, 2], "who": {"name": "a", "age": 1}, "tags": {"k": 1}},
        {},
        {"items": [], "pair": [3, 4], "who": {}, "tags": {'q"': None, "b": 2}},
        {"items": [4], "pair": [5, 6], "who": {"name": "d", "age": 4}, "tags": {}},
    ]
    assert lines(table) == expected
    for start in range(4):
        for length in range(1, 5 - start):
            assert lines(table.slice(start, length)) == expected[start:start + length]


def test_rows_whose_fields_are_all_null_are_still_written():
    # pyarrow 26's binary_join_element_wise(null_handling="skip") drops such rows.
    table = pa.table({"a": pa.array([None, 1, None], pa.int64()), "b": pa.array([None, None, None], pa.string())})
    assert lines(table) == [{}, {"a": 1}, {}]


def test_pyarrow_reads_back_what_was_written():
    table = pa.table({"id": pa.array(range(1000), pa.int64()),
                      "name": pa.array([f"n{i}\"\\" for i in range(1000)]),
                      "score": pa.array([i / 7 for i in range(1000)])})
    data = encode_lines(table.to_batches()[0]).to_pybytes()
    back = pajson.read_json(io.BytesIO(data))
    assert back.column("id").to_pylist() == list(range(1000))
    assert back.column("name").to_pylist() == table.column("name").to_pylist()
    assert back.column("score").to_pylist() == table.column("score").to_pylist()


def test_a_type_json_cannot_carry_names_the_column():
    table = pa.table({"span": pa.array([datetime.timedelta(seconds=1)], pa.duration("s"))})
    with pytest.raises(JsonEncodingError, match="column 'span'"):
        encode_lines(table.to_batches()[0])
