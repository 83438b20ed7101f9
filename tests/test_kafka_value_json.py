"""value.format=json: the source's decoder (connectors/kafka/value_json.py)
without Spark. Its fast path (pyarrow.json) must agree with its reference
path (record by record) wherever it answers; the reference path itself is
checked against Spark's from_json in integration_tests/test_kafka_value_json.py."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from eoskit.connectors.kafka.schema import arrow_schema, spark_schema
from eoskit.connectors.kafka.value_json import FAILFAST, MalformedValueError, make_json_values
from eoskit.core.options import OptionError

SCHEMA = StructType([
    StructField("id", LongType()), StructField("name", StringType()), StructField("ok", BooleanType()),
    StructField("price", DecimalType(10, 2)), StructField("ratio", DoubleType()),
    StructField("at", TimestampType()), StructField("tags", ArrayType(StringType())),
    StructField("inner", StructType([StructField("n", IntegerType())])),
])


def kafka_batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays([
        pa.array([None] * n, pa.binary()), pa.array(values, pa.binary()), pa.array(["t"] * n, pa.string()),
        pa.array([0] * n, pa.int32()), pa.array(range(100, 100 + n), pa.int64()),
        pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32()),
    ], schema=arrow_schema(False))


def decoder(schema=SCHEMA, metadata=(), mode="PERMISSIVE", zone="UTC"):
    return make_json_values(schema, metadata, spark_schema(False), mode, zone)


CLEAN = [b'{"id":1,"name":"a","ok":true,"price":1.25,"ratio":0.5,"at":"2024-01-01T10:00:00Z",'
         b'"tags":["x","y"],"inner":{"n":3}}',
         b'{"id":2,"extra":7}', None, b"", b'{"at":"2024-01-01T10:00:00+02:00","price":"3.10"}']


def test_clean_records_take_the_fast_path_and_agree_with_the_reference_path():
    values = decoder()
    batch = kafka_batch(CLEAN)
    fast = values._fast(batch.column("value"))
    assert fast is not None, "pyarrow refused a clean batch"
    reference = values._reference(batch)
    for name in values.value_fields:
        assert fast[name].to_pylist() == reference[name].to_pylist(), name
    rows = values.decode(batch).to_pylist()
    assert rows[0] == {"id": 1, "name": "a", "ok": True, "price": decimal.Decimal("1.25"), "ratio": 0.5,
                       "at": dt.datetime(2024, 1, 1, 10, tzinfo=dt.timezone.utc), "tags": ["x", "y"],
                       "inner": {"n": 3}}
    assert rows[2] == rows[3] == dict.fromkeys(values.value_fields)  # null and empty values
    assert rows[4]["at"] == dt.datetime(2024, 1, 1, 8, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("value, expected", [
    (b'not json', {}),                                   # malformed: every field null
    (b'[1, 2]', {}),                                     # not an object
    (b'{"id": "5", "name": "a"}', {"name": "a"}),        # a string for a long: that field null
    (b'{"id": 1.5, "name": "a"}', {"name": "a"}),        # a fraction for a long
    (b'{"id": 9223372036854775808}', {}),                # out of range
    (b'{"name": 5}', {"name": "5"}),                     # a number for a string: its text
    (b'{"name": {"a": [1, true]}}', {"name": '{"a":[1,true]}'}),
    (b'{"price": 123456789.5}', {}),                     # over decimal(10, 2)
    (b'{"at": 1700000000}', {"at": dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)}),
    (b'{"ratio": "NaN"}', {"ratio": "nan"}),
    (b'{"inner": 5, "id": 3}', {"id": 3}),
    (b'{"id": 1, "id": 2}', {"id": 2}),                  # a duplicate key: the last
    (b'{\n "id": 4\n}', {"id": 4}),                      # pretty-printed
    (b'{"id": 3} {"id": 4}', {"id": 3}),                 # what follows the first value: ignored
])
def test_irregular_records_follow_from_json(value, expected):
    row = decoder().decode(kafka_batch([value, CLEAN[0]])).to_pylist()[0]
    got = {k: ("nan" if isinstance(v, float) and v != v else v) for k, v in row.items() if v is not None}
    assert got == expected


def test_an_array_element_that_does_not_convert_nulls_the_whole_record():
    schema = StructType([StructField("id", LongType()), StructField("ns", ArrayType(LongType())),
                         StructField("m", MapType(StringType(), LongType()))])
    rows = decoder(schema).decode(kafka_batch([b'{"id": 1, "ns": [1, "x"]}', b'{"id": 2, "m": {"a": "x"}}',
                                               b'{"id": 3, "ns": 5}', b'{"id": 4, "ns": [1, null]}'])).to_pylist()
    assert rows == [{"id": None, "ns": None, "m": None}, {"id": None, "ns": None, "m": None},
                    {"id": 3, "ns": None, "m": None}, {"id": 4, "ns": [1, None], "m": None}]


def test_failfast_names_the_record():
    with pytest.raises(MalformedValueError, match="topic t partition 0 offset 101"):
        decoder(mode=FAILFAST).decode(kafka_batch([CLEAN[0], b"{oops"]))


def test_metadata_columns_come_from_the_record_and_keep_their_place():
    schema = StructType([StructField("offset", LongType()), StructField("id", LongType())])
    rows = decoder(schema, ("offset",)).decode(kafka_batch([b'{"id": 1, "offset": 999}'])).to_pylist()
    assert rows == [{"offset": 100, "id": 1}]


def test_maps_and_a_time_zone_take_the_reference_path():
    schema = StructType([StructField("m", MapType(StringType(), LongType())), StructField("at", TimestampType())])
    values = decoder(schema, zone="Europe/Paris")
    batch = kafka_batch([b'{"m": {"a": 1, "b": null}, "at": "2024-07-01T12:00:00"}'])
    assert values._fast(batch.column("value")) is None
    [row] = values.decode(batch).to_pylist()
    assert row["m"] == [("a", 1), ("b", None)]
    assert row["at"] == dt.datetime(2024, 7, 1, 10, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize("metadata, schema, message", [
    (("nope",), SCHEMA, "not a column of the Kafka source"),
    (("offset",), SCHEMA, "does not have"),
    (("offset",), StructType([StructField("offset", StringType())]), "takes Kafka's bigint"),
])
def test_bad_metadata_columns_are_refused_by_name(metadata, schema, message):
    with pytest.raises(OptionError, match=message):
        decoder(schema, metadata)


def test_a_bad_time_zone_is_refused_by_name():
    with pytest.raises(OptionError, match="value.timeZone"):
        decoder(zone="Mars/Olympus")
