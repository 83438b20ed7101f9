"""value.format=json side by side with Spark's from_json (issue 33, item 1):
the same records read by eoskit-kafka decoding in the source, and by the
raw source through from_json(value, schema).select('v.*') in the JVM, give
the same rows, irregular records included; and a streaming read decodes."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

pytestmark = [pytest.mark.kafka_versions]

SCHEMA = ("id BIGINT, n INT, name STRING, ok BOOLEAN, ratio DOUBLE, price DECIMAL(10,2), at TIMESTAMP, "
          "day DATE, tags ARRAY<BIGINT>, inner STRUCT<n: INT, s: STRING>, m MAP<STRING, BIGINT>, raw BINARY")

CORPUS = [
    {"id": 1, "n": 2, "name": "a", "ok": True, "ratio": 0.5, "price": 1.25, "at": "2024-01-01T10:00:00Z",
     "day": "2024-02-29", "tags": [1, 2], "inner": {"n": 3, "s": "x"}, "m": {"k": 1}, "raw": "aGk="},
    {"id": 2},
    None, "", "   ", "not json", "[1, 2]", "5", "null", '"text"',
    {"id": "5", "name": "string for a long"},
    {"id": 1.5, "n": 2147483648},
    {"id": 9223372036854775808},
    {"name": 5}, {"name": 1.50}, {"name": True}, {"name": None}, {"name": {"a": [1, True, None, "é"]}},
    {"name": [1, 2.0, "x/y"]},
    {"ok": "true"}, {"ok": 1},
    {"ratio": "NaN"}, {"ratio": "Infinity"}, {"ratio": "-Infinity"}, {"ratio": 1}, {"ratio": "1.5"},
    {"ratio": 1e308}, {"ratio": "x"},
    {"price": 123456789.5}, {"price": "3.10"}, {"price": 1.255}, {"price": 1e2}, {"price": -0.005},
    {"at": "2024-01-01T10:00:00+02:00"}, {"at": "2024-01-01 10:00:00"}, {"at": "2024-01-01T10:00:00.123456Z"},
    {"at": "2024-01-01T10:00:00.123456789Z"}, {"at": 1700000000}, {"at": 1.5}, {"at": "2024-01-01"},
    {"at": "yesterday"},
    {"day": "2024-02-30"}, {"day": "2024-1-5"}, {"day": "2024-01-01T10:00:00Z"}, {"day": 19000},
    {"tags": [1, "x", 3]}, {"tags": 5}, {"tags": [None, 2]},
    {"inner": 5}, {"inner": {"n": "x", "s": 1}}, {"inner": None},
    {"m": {"a": 1, "b": "x"}}, {"m": []},
    {"raw": "not base64!"}, {"raw": 5},
    '{"id": 1, "id": 2}',
    '{\n  "id": 77,\n  "name": "pretty"\n}',
    '{"id": 3, "name": "trailing"} {"id": 4}',
    '{"ID": 8, "Name": "case"}',
    '  {"id": 10, "name": "\\u00e9\\n"}  ', '{"id": 1e2}', '{"id": -0}', '{"ratio": -0.0, "n": -2147483648}',
    '{"ratio": 12345678901234567890}', '{"name": -1.0e-7}', '{"inner": {"n": 1, "extra": [1]}, "tags": []}',
    '{"price": 9.995}', '{"price": "  2.5 "}', '{"name": 1e2}', '{"name": 12345678.9}',
    '{"name": [0.0009, {"x": 1E7}]}', '{"price": "1e1"}', '{"price": "+.5"}', '{"at": "2024-01-01T10:00:00.5+05:30"}',
    '{"id": 9, "name": "unterminated',
]


def encode(item) -> bytes | None:
    if item is None:
        return None
    return item.encode() if isinstance(item, str) else json.dumps(item).encode()


@pytest.fixture
def corpus_topic(new_topic, produce_to):
    topic = new_topic(1, "values")
    produce_to(topic, {0: [(None, encode(item)) for item in CORPUS]})
    return topic


def test_the_source_decodes_as_from_json_does(spark, kafka, corpus_topic):
    zone = spark.conf.get("spark.sql.session.timeZone")
    raw = (spark.read.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
           .option("subscribe", corpus_topic).load())
    expected = (raw.select("offset", F.from_json(F.col("value").cast("string"), SCHEMA).alias("v"))
                .select("offset", "v.*").orderBy("offset").collect())
    decoded = (spark.read.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
               .option("subscribe", corpus_topic).option("value.format", "json")
               .option("value.timeZone", zone).option("metadataColumns", "offset")
               .schema("offset BIGINT, " + SCHEMA).load().orderBy("offset").collect())
    assert len(decoded) == len(expected) == len(CORPUS)
    differ = [(CORPUS[i], e.asDict(), d.asDict()) for i, (e, d) in enumerate(zip(expected, decoded))
              if _same(e.asDict()) != _same(d.asDict())]
    assert not differ, "\n".join(f"{value!r}:\n  spark  {e}\n  eoskit {d}" for value, e, d in differ[:12])


def _same(row: dict) -> dict:
    """NaN equals NaN; a map compares as a dict."""
    out = {}
    for key, value in row.items():
        if isinstance(value, float) and value != value:
            value = "NaN"
        out[key] = value
    return out


def test_a_streaming_query_gets_typed_rows_and_failfast_names_the_record(spark, kafka, corpus_topic, tmp_path):
    good = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
            .option("subscribe", corpus_topic).option("startingOffsets", "earliest")
            .option("value.format", "json").schema("id BIGINT, name STRING").load())
    assert good.schema.simpleString() == "struct<id:bigint,name:string>"
    query = (good.writeStream.format("memory").queryName("decoded_values")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination()
    rows = spark.table("decoded_values").collect()
    assert len(rows) == len(CORPUS) and rows[0]["id"] == 1 and rows[0]["name"] == "a"
    strict = (spark.read.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
              .option("subscribe", corpus_topic).option("value.format", "json")
              .option("value.mode", "FAILFAST").schema("id BIGINT").load())
    with pytest.raises(Exception, match=f"topic {corpus_topic} partition 0 offset 5"):
        strict.collect()
