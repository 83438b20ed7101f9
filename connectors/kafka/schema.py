"""The source's output schema: the columns of Spark's built-in Kafka source.

The Arrow schema is spelled out, not derived at run time, because Spark
refuses a record batch whose schema differs from the declared one in any
detail (nullability, time unit, time zone); a unit test compares it with
Spark's own conversion of the Spark schema.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_SPARK_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
HEADER_ARROW_TYPE = pa.list_(
    pa.field(
        "element",
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]),
    )
)


def spark_schema(include_headers: bool, broadcast: bool = False) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADER_SPARK_TYPE))
    if broadcast:  # the version of the broadcast state the row's batch was planned with
        fields.append(StructField("broadcastVersion", LongType()))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The columns ``reader.read_range`` builds (``broadcastVersion`` is
    appended after them, by ``broadcast.with_version``)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADER_ARROW_TYPE))
    return pa.schema(fields)
