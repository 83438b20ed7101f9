"""Spark types to SQL column types, through SQLAlchemy's portable types.

One mapping serves both SQL sinks: creating a table from a DataFrame, and
checking that an existing column can hold what the DataFrame gives it.
"""

from __future__ import annotations

import datetime
import decimal
import uuid

import sqlalchemy as sa
from pyspark.sql import types as T
from sqlalchemy.dialects import mysql

#: MySQL / MariaDB spellings where the portable type is too small there:
#: TEXT and BLOB hold 64 KiB, DATETIME drops the microseconds.
_MYSQL = ("mysql", "mariadb")


class UnsupportedTypeError(TypeError):
    """A Spark column type the SQL sinks cannot write."""


def sqlalchemy_type(spark_type: T.DataType, key: bool = False) -> sa.types.TypeEngine:
    """The column type to create; ``key``: the column is part of the primary
    key (MySQL cannot index a TEXT column without a prefix length)."""
    if isinstance(spark_type, T.StringType):
        return sa.Text().with_variant(mysql.VARCHAR(255) if key else mysql.LONGTEXT(), *_MYSQL)
    if isinstance(spark_type, T.LongType):
        return sa.BigInteger()
    if isinstance(spark_type, T.IntegerType):
        return sa.Integer()
    if isinstance(spark_type, (T.ShortType, T.ByteType)):
        return sa.SmallInteger()
    if isinstance(spark_type, T.DoubleType):
        return sa.Double()
    if isinstance(spark_type, T.FloatType):
        return sa.REAL()
    if isinstance(spark_type, T.DecimalType):
        return sa.Numeric(spark_type.precision, spark_type.scale)
    if isinstance(spark_type, T.BooleanType):
        return sa.Boolean()
    if isinstance(spark_type, T.DateType):
        return sa.Date()
    if isinstance(spark_type, T.TimestampNTZType):
        return sa.DateTime(timezone=False).with_variant(mysql.DATETIME(fsp=6), *_MYSQL)
    if isinstance(spark_type, T.TimestampType):
        return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), *_MYSQL)
    if isinstance(spark_type, T.BinaryType):
        return sa.LargeBinary().with_variant(
            mysql.VARBINARY(255) if key else mysql.LONGBLOB(), *_MYSQL)
    raise UnsupportedTypeError(f"Spark type {spark_type.simpleString()} has no SQL column mapping")


#: createTableColumnTypes' Spark type names (``jdbc.SPARK_TYPES``) as Spark types.
_DECLARABLE = {
    "boolean": T.BooleanType(), "tinyint": T.ByteType(), "smallint": T.ShortType(),
    "int": T.IntegerType(), "bigint": T.LongType(), "float": T.FloatType(),
    "double": T.DoubleType(), "date": T.DateType(), "timestamp": T.TimestampType(),
    "timestamp_ntz": T.TimestampNTZType(), "string": T.StringType(), "binary": T.BinaryType(),
}


def declared_type(name: str, args: tuple[int, ...], key: bool = False) -> sa.types.TypeEngine:
    """The column type for a ``createTableColumnTypes`` entry: a Spark SQL
    type name (canonical, see ``jdbc.SPARK_TYPES``) and its numbers. CHAR
    and VARCHAR keep their length, as Spark's JDBC writer does; DECIMAL
    without numbers is Spark's DECIMAL(10, 0)."""
    if name == "char":
        return sa.CHAR(args[0])
    if name == "varchar":
        return sa.VARCHAR(args[0])
    if name == "decimal":
        precision, scale = (tuple(args) + (10, 0)[len(args):])[:2]
        return sa.Numeric(precision, scale)
    return sqlalchemy_type(_DECLARABLE[name], key=key)


def _python_type(column_type: sa.types.TypeEngine) -> type | None:
    try:
        return column_type.python_type
    except NotImplementedError:
        return None


def can_fill(spark_type: T.DataType, column_type: sa.types.TypeEngine) -> bool:
    """Whether every value of ``spark_type`` fits a column of ``column_type``
    without a lossy or failing conversion."""
    target = _python_type(column_type)
    if target is None:
        return isinstance(spark_type, T.StringType)  # e.g. uuid, json: the server parses text
    if isinstance(spark_type, T.StringType):
        return target in (str, dict, list, uuid.UUID)
    if isinstance(spark_type, T.BooleanType):
        # MySQL has no boolean type: BOOL is TINYINT(1).
        return target is bool or isinstance(column_type, mysql.TINYINT)
    if isinstance(spark_type, (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        return target in (int, decimal.Decimal, float)
    if isinstance(spark_type, (T.DoubleType, T.FloatType)):
        return target in (float, decimal.Decimal)
    if isinstance(spark_type, T.DecimalType):
        return target in (decimal.Decimal, float) or (target is int and spark_type.scale == 0)
    if isinstance(spark_type, T.DateType):
        return target in (datetime.date, datetime.datetime)
    if isinstance(spark_type, (T.TimestampType, T.TimestampNTZType)):
        return target is datetime.datetime
    if isinstance(spark_type, T.BinaryType):
        return target is bytes
    return False
