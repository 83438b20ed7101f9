"""PostgreSQL spelling: names composed as psycopg ``sql.Identifier``s, so
that user-given names reach SQL only quoted by the driver."""

from __future__ import annotations

from psycopg import sql

from eoskit.connectors.sql.tables import TargetTable


def table_sql(target: TargetTable) -> sql.Composable:
    """The target table, schema-qualified when it names a schema."""
    if target.schema:
        return sql.Identifier(target.schema, target.name)
    return sql.Identifier(target.name)


def in_schema(target: TargetTable, name: str) -> sql.Composable:
    """Table ``name`` in the target's schema (the marker and staging tables)."""
    return sql.Identifier(*([target.schema] if target.schema else []), name)
