"""JSON values decoded in the source's worker (``value.format=json``), as
Spark's ``from_json`` decodes them, so that rows reach the query typed and
never cross into the JVM as raw bytes to be parsed there.

Where it runs: ``JsonValues`` is made on the driver from the query's schema
(``readStream.schema(...)``, a Pipeline's ``KafkaSource(value_schema=...)``)
and pickled with the reader; ``decode`` runs in an executor's Python worker
on each Arrow batch of Kafka records, right after they are read.

The semantics are Spark's ``from_json(value, schema)`` followed by
``select("v.*")`` (``JacksonParser``, PERMISSIVE mode with partial results),
checked side by side against Spark in integration_tests/test_kafka_value_json.py:

- a null, empty or blank value, a value that is not JSON, or JSON that is
  not an object: every field null (``FAILFAST``: the task fails, naming the
  topic, partition and offset of the record);
- a field whose JSON value does not convert to its type (a string for a
  number, an integer out of range, a decimal over its precision): that field
  null, the others kept; but an element of an array or a value of a map that
  does not convert makes the whole record nulls (Spark's partial results
  stop at struct fields);
- what follows the first JSON value of a record is ignored;
- fields not in the schema are ignored; names match exactly;
- a string field takes any JSON value, non-strings as their JSON text;
- timestamps: ISO 8601 text (an offset or ``Z``; without one, in
  ``value.timeZone``, default UTC), or a number of seconds since the epoch;
  dates: ``yyyy-MM-dd``; binary: base64 text;
- the fields named in ``metadataColumns`` come from the record instead
  (``offset``, ``partition``, ``timestamp``...), with the Kafka column's type.

Two paths, one answer. The fast path hands the whole batch to
``pyarrow.json`` with the schema; it refuses anything irregular (a type
mismatch anywhere, a malformed record, a duplicate key), and then the batch
is decoded record by record in Python by the rules above: the reference
path, which the fast path must agree with wherever it answers.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from eoskit.core.options import OptionError
from eoskit.twophase.verdicts import Verdict

PERMISSIVE, FAILFAST = "PERMISSIVE", "FAILFAST"
_INT_RANGE = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_DECIMAL_TEXT = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_DATE = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})")
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "+Infinity": math.inf, "-Infinity": -math.inf,
                   "INF": math.inf, "+INF": math.inf, "-INF": -math.inf}


class MalformedValueError(ValueError):
    """A value ``from_json`` cannot read, under ``value.mode=FAILFAST``."""

    #: eoskit.twophase.verdicts: a replay reads the same record.
    verdict: ClassVar[Verdict] = Verdict.PERMANENT


class _Fail(Exception):
    """A field that does not convert: null under partial results."""


class _RecordFail(Exception):
    """An element of an array or a map that does not convert: Spark's partial
    results stop at struct fields, so the whole record reads as nulls."""


class _Number:
    """A JSON number, kept as its text (Spark reads exact decimals, and a
    string field takes a number as the text it was written as)."""

    __slots__ = ("text", "integral")

    def __init__(self, text: str, integral: bool) -> None:
        self.text, self.integral = text, integral


_DECODER = json.JSONDecoder(parse_int=lambda s: _Number(s, True), parse_float=lambda s: _Number(s, False),
                            parse_constant=lambda s: _Number(s, False), object_pairs_hook=dict)


def _loads(text: str) -> Any:
    """The first JSON value of ``text``; what follows it is ignored, as Spark's parser does."""
    stripped = text.lstrip()
    return _DECODER.raw_decode(stripped)[0]


def _java_double(text: str) -> str:
    """A JSON fraction as Spark's JSON writer prints it: Java's
    ``Double.toString`` (``1.5``, ``100.0``, ``-1.0E-7``, ``1.2345E10``)."""
    x = float(text)
    if math.isnan(x) or math.isinf(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    exact = decimal.Decimal(repr(abs(x)))  # the shortest digits that read back as x
    if 1e-3 <= abs(x) < 1e7:
        plain = format(exact, "f")
        return sign + (plain if "." in plain else plain + ".0")
    digits = "".join(map(str, exact.as_tuple().digits)).rstrip("0") or "0"
    exponent = exact.adjusted()
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


def _json_text(value: Any) -> str:
    """A JSON value as the compact text Spark's string fields take."""
    if isinstance(value, _Number):
        return value.text if value.integral else _java_double(value.text)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_json_text(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _to_timestamp(value: Any, zone: dt.tzinfo) -> int:
    if isinstance(value, _Number):
        if not value.integral:
            raise _Fail
        return int(value.text) * 1_000_000
    if not isinstance(value, str):
        raise _Fail
    text = value.strip().replace(" ", "T", 1)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        stamp = dt.datetime.fromisoformat(text)
    except ValueError:
        raise _Fail from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=zone)
    delta = stamp - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _boolean(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise _Fail


def _integer(bits: int) -> Callable[[Any], int]:
    def integer(v: Any) -> int:
        if not isinstance(v, _Number) or not v.integral:
            raise _Fail
        number = int(v.text)
        if not -(1 << (bits - 1)) <= number < (1 << (bits - 1)):
            raise _Fail
        return number
    return integer


def _floating(v: Any) -> float:
    if isinstance(v, _Number):
        return float(v.text) if v.text not in _SPECIAL_FLOATS else _SPECIAL_FLOATS[v.text]
    if isinstance(v, str) and v in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[v]
    raise _Fail


def _exact(kind: DecimalType) -> Callable[[Any], decimal.Decimal]:
    def exact(v: Any) -> decimal.Decimal:
        text = v.text if isinstance(v, _Number) else v
        if not isinstance(text, str) or not _DECIMAL_TEXT.match(text):
            raise _Fail
        rounded = decimal.Decimal(text).quantize(decimal.Decimal(1).scaleb(-kind.scale),
                                                 rounding=decimal.ROUND_HALF_UP)
        if len(rounded.as_tuple().digits) > kind.precision and rounded != 0:
            raise _Fail
        return rounded
    return exact


def _date(v: Any) -> dt.date:
    match = _DATE.match(v) if isinstance(v, str) else None
    if match is None:
        raise _Fail
    try:
        return dt.date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        raise _Fail from None


def _binary(v: Any) -> bytes:
    if not isinstance(v, str):
        raise _Fail
    try:
        return base64.b64decode(v, validate=True)
    except ValueError:
        raise _Fail from None


def _struct(kind: StructType, zone: dt.tzinfo) -> Callable[[Any], dict[str, Any]]:
    fields = [(f.name, _nullable(_converter(f.dataType, zone))) for f in kind.fields]

    def struct(v: Any) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise _Fail
        return {name: convert(v.get(name)) for name, convert in fields}
    return struct


def _converter(kind: DataType, zone: dt.tzinfo) -> Callable[[Any], Any]:
    """The function from a parsed JSON value to ``kind``'s Python value (for
    ``pa.array``); raises ``_Fail`` where Spark's parser fails the field."""
    if isinstance(kind, StringType):
        return lambda v: v if isinstance(v, str) else _json_text(v)
    if isinstance(kind, BooleanType):
        return _boolean
    if type(kind) in _INT_RANGE:
        return _integer(_INT_RANGE[type(kind)])
    if isinstance(kind, (FloatType, DoubleType)):
        return _floating
    if isinstance(kind, DecimalType):
        return _exact(kind)
    if isinstance(kind, (TimestampType, TimestampNTZType)):
        utc = dt.timezone.utc if isinstance(kind, TimestampNTZType) else zone
        return lambda v: _to_timestamp(v, utc)
    if isinstance(kind, DateType):
        return _date
    if isinstance(kind, BinaryType):
        return _binary
    if isinstance(kind, ArrayType):
        element = _whole(_converter(kind.elementType, zone))
        return lambda v: [element(e) for e in v] if isinstance(v, list) else _raise()
    if isinstance(kind, MapType):
        value = _whole(_converter(kind.valueType, zone))
        if not isinstance(kind.keyType, StringType):
            raise OptionError(f"value.format=json: a map's keys must be strings, not {kind.keyType.simpleString()}")
        return lambda v: [(k, value(x)) for k, x in v.items()] if isinstance(v, dict) else _raise()
    if isinstance(kind, StructType):
        return _struct(kind, zone)
    raise OptionError(f"value.format=json: the type {kind.simpleString()} is not supported; use "
                      "boolean, integers, float, double, decimal, string, binary, date, timestamp, "
                      "array, map<string, ...> or struct")


def _raise() -> Any:
    raise _Fail


def _whole(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An array's element or a map's value: null stays null; one that does
    not convert fails the whole record."""
    def run(v: Any) -> Any:
        if v is None:
            return None
        try:
            return convert(v)
        except _Fail:
            raise _RecordFail from None
    return run


def _nullable(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Null stays null; a value that does not convert becomes null (partial results)."""
    def run(v: Any) -> Any:
        if v is None:
            return None
        try:
            return convert(v)
        except _Fail:
            return None
    return run


@dataclass(frozen=True)
class JsonValues:
    """How one source decodes its values (made on the driver, pickled to tasks)."""

    #: the query's schema: the value's fields and the metadata columns
    schema: StructType
    #: the Arrow schema of the batches handed to Spark
    arrow_schema: pa.Schema
    #: fields filled from the Kafka record, not from the value
    metadata: tuple[str, ...]
    mode: str = PERMISSIVE
    time_zone: str = "UTC"

    @property
    def value_fields(self) -> list[str]:
        return [f.name for f in self.schema.fields if f.name not in self.metadata]

    def decode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Kafka's columns (``schema.arrow_schema``) in, the query's columns out."""
        fields = self._fast(batch.column("value"))
        if fields is None:
            fields = self._reference(batch)
        columns = [batch.column(name) if name in self.metadata else fields[name] for name in self.schema.names]
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema)

    # -- the fast path ------------------------------------------------------------

    def _fast(self, values: pa.Array) -> dict[str, pa.Array] | None:
        if len(values) == 0:
            return {name: pa.nulls(0, self.arrow_schema.field(name).type) for name in self.value_fields}
        if not self._fast_types:
            return None
        blank = pc.or_kleene(pc.is_null(values), pc.equal(pc.binary_length(values), 0))
        filled = pc.if_else(blank, pa.scalar(b"{}", pa.binary()), values)
        if pc.any(pc.match_substring(filled, "\n")).as_py():
            return None  # pretty-printed records: the reference path reads them one by one
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(filled)], pa.int32()), filled),
                                pa.scalar(b"\n", pa.binary()))[0].as_buffer()
        value_schema = pa.schema([self.arrow_schema.field(name) for name in self.value_fields])
        try:
            table = pa_json.read_json(
                pa.BufferReader(joined),
                read_options=pa_json.ReadOptions(block_size=max(1 << 20, joined.size + 1)),
                parse_options=pa_json.ParseOptions(explicit_schema=value_schema,
                                                   unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if table.num_rows != len(values):
            return None
        columns = {name: table.column(name).combine_chunks() for name in self.value_fields}
        return columns if all(_fits(column) for column in columns.values()) else None

    @cached_property
    def _fast_types(self) -> bool:
        """pyarrow reads these as Spark does (timestamps: only in UTC;
        decimals: at the top level, where ``_fits`` checks their precision)."""
        def plain(kind: DataType, top: bool = False) -> bool:
            if isinstance(kind, (MapType, BinaryType, DateType, FloatType, TimestampNTZType)):
                return False
            if isinstance(kind, DecimalType):
                return top
            if isinstance(kind, TimestampType):
                return self.time_zone.upper() == "UTC"
            if isinstance(kind, ArrayType):
                return plain(kind.elementType)
            if isinstance(kind, StructType):
                return all(plain(f.dataType) for f in kind.fields)
            return True
        return all(plain(f.dataType, top=True) for f in self.schema.fields if f.name not in self.metadata)

    # -- the reference path -------------------------------------------------------

    def _reference(self, batch: pa.RecordBatch) -> dict[str, pa.Array]:
        zone = dt.timezone.utc if self.time_zone.upper() == "UTC" else ZoneInfo(self.time_zone)
        kinds = {f.name: f.dataType for f in self.schema.fields}
        converters = {name: _nullable(_converter(kinds[name], zone)) for name in self.value_fields}
        out: dict[str, list[Any]] = {name: [] for name in self.value_fields}
        for index, raw in enumerate(batch.column("value").to_pylist()):
            record = self._parse(raw, batch, index)
            try:
                row = [None if record is None else convert(record.get(name))
                       for name, convert in converters.items()]
            except _RecordFail:
                row = [None] * len(converters)
            for name, value in zip(converters, row):
                out[name].append(value)
        return {name: self._array(column, self.arrow_schema.field(name).type)
                for name, column in out.items()}

    def _parse(self, raw: bytes | None, batch: pa.RecordBatch, index: int) -> dict[str, Any] | None:
        if raw is None or not raw.strip():
            return None
        try:
            record = _loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            record = None
        if isinstance(record, dict):
            return record
        if self.mode == FAILFAST:
            where = (f"topic {batch.column('topic')[index]} partition {batch.column('partition')[index]} "
                     f"offset {batch.column('offset')[index]}")
            raise MalformedValueError(f"{where}: the value is not a JSON object (value.mode=FAILFAST; "
                                      "PERMISSIVE reads it as a row of nulls)")
        return None

    @staticmethod
    def _array(values: Sequence[Any], kind: pa.DataType) -> pa.Array:
        if pa.types.is_timestamp(kind):
            return pa.array(values, pa.int64()).cast(kind)
        return pa.array(values, kind)


def _fits(column: pa.Array) -> bool:
    """pyarrow reads a decimal past its precision (123456789.5 as decimal(10, 2));
    Spark's from_json makes it null: the reference path decides such a batch."""
    kind = column.type
    if not pa.types.is_decimal(kind):
        return True
    wide = pa.decimal128(38, kind.scale)
    bound = pa.scalar(decimal.Decimal(10) ** (kind.precision - kind.scale), wide)
    return not pc.any(pc.greater_equal(pc.abs(column.cast(wide)), bound)).as_py()


def make_json_values(schema: StructType, metadata: Sequence[str], kafka_schema: StructType,
                     mode: str, time_zone: str) -> JsonValues:
    """Driver: the decoder of a query whose schema is ``schema``; refuses by
    name a metadata column that is not Kafka's or has another type."""
    from pyspark.sql.pandas.types import to_arrow_schema

    kafka = {f.name: f.dataType for f in kafka_schema.fields}
    for name in metadata:
        if name not in kafka:
            raise OptionError(f"option 'metadataColumns' names {name!r}, which is not a column of the "
                              f"Kafka source ({', '.join(kafka)})")
        if name not in schema.names:
            raise OptionError(f"option 'metadataColumns' names {name!r}, which the schema given with "
                              ".schema(...) does not have: add it, as {name} {kafka[name].simpleString()}")
        given = schema[name].dataType
        if given != kafka[name]:
            raise OptionError(f"column {name!r}: metadataColumns takes Kafka's {kafka[name].simpleString()}, "
                              f"the schema says {given.simpleString()}")
    for field in schema.fields:
        if field.name not in metadata:
            _converter(field.dataType, dt.timezone.utc)  # refuses an unsupported type, by name
    try:
        ZoneInfo(time_zone) if time_zone.upper() != "UTC" else None
    except (KeyError, ValueError):
        raise OptionError(f"option 'value.timeZone' = {time_zone!r} is not a time zone name") from None
    # Spark's own conversion (timestamps in UTC): Spark refuses a batch whose
    # schema differs from the declared one in any detail.
    return JsonValues(schema, to_arrow_schema(schema, timezone="UTC"), tuple(metadata), mode, time_zone)
