"""The target table: found, created, and checked against the DataFrame
before any data moves, with errors that say what to change."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from pyspark.sql.types import StructType

from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.types import UnsupportedType, can_fill, sqlalchemy_type
from eoskit.twophase.contract import SinkError


@dataclass(frozen=True)
class TargetTable:
    """The table as found in the database (names exactly as stored)."""

    schema: str | None
    name: str
    columns: dict[str, sa.types.TypeEngine]

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


def _find(inspector: sa.Inspector, schema: str | None, table: str) -> tuple[str | None, str] | None:
    """The stored name: exact first, then folded as the server folds unquoted
    names (Spark's JDBC source passes dbtable unquoted)."""
    for candidate_schema in dict.fromkeys([schema, schema.lower() if schema else None]):
        names = inspector.get_table_names(schema=candidate_schema)
        for candidate in (table, table.lower()):
            if candidate in names:
                return candidate_schema, candidate
    return None


def create_table(engine: sa.Engine, settings: SqlSinkSettings, schema: StructType) -> None:
    metadata = sa.MetaData()
    columns = []
    for field in schema.fields:
        try:
            column_type = sqlalchemy_type(field.dataType, key=field.name in settings.key)
        except UnsupportedType as exc:
            raise SinkError(f"cannot create {settings.dbtable}: column {field.name!r}: {exc}") from None
        # autoincrement=False: an integer key holds the DataFrame's values, never
        # a generated serial / AUTO_INCREMENT (which MySQL would apply to 0).
        columns.append(sa.Column(field.name, column_type,
                                 primary_key=field.name in settings.key,
                                 nullable=field.name not in settings.key,
                                 autoincrement=False))
    sa.Table(settings.table, metadata, *columns, schema=settings.schema)
    metadata.create_all(engine, checkfirst=True)


def resolve_table(engine: sa.Engine, settings: SqlSinkSettings, schema: StructType) -> TargetTable:
    """Find (or create) the table and refuse a DataFrame it cannot take."""
    inspector = sa.inspect(engine)
    found = _find(inspector, settings.schema, settings.table)
    if found is None and settings.create_table:
        create_table(engine, settings, schema)
        inspector = sa.inspect(engine)
        found = _find(inspector, settings.schema, settings.table)
    if found is None:
        raise SinkError(
            f"table {settings.dbtable} does not exist; create it, or set the option "
            "createTable=true to create it from the DataFrame schema"
        )
    table_schema, table_name = found
    reflected = inspector.get_columns(table_name, schema=table_schema)
    columns = {c["name"]: c["type"] for c in reflected}
    target = TargetTable(table_schema, table_name, columns)
    problems = []
    for field in schema.fields:
        if field.name not in columns:
            near = [c for c in columns if c.lower() == field.name.lower()]
            hint = f" (the table has {near[0]!r}: rename the DataFrame column)" if near else ""
            problems.append(f"DataFrame column {field.name!r} is not a column of the table{hint}")
        elif not can_fill(field.dataType, columns[field.name]):
            problems.append(
                f"column {field.name!r} is {columns[field.name]} in the table but "
                f"{field.dataType.simpleString()} in the DataFrame: cast it in the transform"
            )
    given = set(schema.fieldNames())
    for column in reflected:
        if column["name"] not in given and not column.get("nullable", True) \
                and column.get("default") is None and not column.get("autoincrement") is True \
                and not column.get("identity") and not column.get("computed"):
            problems.append(f"table column {column['name']!r} is NOT NULL without a default "
                            "and the DataFrame does not provide it")
    if settings.mode == "upsert":
        missing = [k for k in settings.key if k not in given]
        if missing:
            problems.append(f"key column(s) {', '.join(missing)} are not in the DataFrame")
        elif not _has_unique(inspector, table_schema, table_name, settings.key):
            problems.append(
                f"upsert needs a primary key or unique constraint on ({', '.join(settings.key)}) "
                f"in {target.qualified}"
            )
    if problems:
        raise SinkError(f"cannot write to {target.qualified}: " + "; ".join(problems))
    return target


def _has_unique(inspector: sa.Inspector, schema: str | None, table: str, key: tuple[str, ...]) -> bool:
    wanted = set(key)
    if set(inspector.get_pk_constraint(table, schema=schema).get("constrained_columns") or []) == wanted:
        return True
    for constraint in inspector.get_unique_constraints(table, schema=schema):
        if set(constraint["column_names"]) == wanted:
            return True
    for index in inspector.get_indexes(table, schema=schema):
        if index.get("unique") and set(index["column_names"]) == wanted:
            return True
    return False
