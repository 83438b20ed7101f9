"""The target table: found, created, and checked against the DataFrame
before any data moves, with errors that say what to change.

Names are matched the way Spark's JDBC source matches them, because that
is what a Spark user's ``dbtable`` and DataFrame were written for:

- ``dbtable`` is SQL text (``identifiers.py``): on PostgreSQL a bare name
  means its lower-case folding and a quoted one means itself; on MySQL the
  server's ``lower_case_table_names`` decides whether case matters. A
  table that is missing but exists in another case is named in the error,
  with the ``dbtable`` that reaches it.
- DataFrame columns find their table columns case-insensitively, as
  Spark's JDBC writer does with ``spark.sql.caseSensitive=false`` (its
  default); an exact match wins, two table columns that differ only in
  case and match neither exactly are refused as ambiguous. Every statement
  then uses the table's own spelling (``TargetTable.column_of``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sqlalchemy as sa
from pyspark.sql.types import StructType

from eoskit.connectors.sql.identifiers import Part, TableName, ascii_lower, display
from eoskit.connectors.sql.jdbc import table_kwargs
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.types import UnsupportedTypeError, can_fill, declared_type, sqlalchemy_type
from eoskit.twophase.contract import SinkError

_MYSQL = ("mysql", "mariadb")


@dataclass(frozen=True)
class TargetTable:
    """The table as found in the database (names exactly as stored)."""

    schema: str | None
    name: str
    columns: dict[str, sa.types.TypeEngine]
    #: DataFrame column -> the table column it fills.
    column_of: dict[str, str] = field(default_factory=dict)
    #: The upsert key, spelled as the table spells it.
    key: tuple[str, ...] = ()
    #: The SQLAlchemy dialect name, for showing names as that database reads them.
    dialect: str = ""
    #: DataFrame columns the table has no column for, carried for dead letters
    #: only (``deadLetterSourceColumns``): never written to the table.
    carried: tuple[str, ...] = ()

    @property
    def qualified(self) -> str:
        """The table's name for messages: bare where that reads back the same."""
        rules = NameRules.for_dialect(self.dialect)
        return display([self.schema, self.name], rules.quote, rules.folds)


@dataclass(frozen=True)
class NameRules:
    """How a database reads a table name: does it fold bare names to lower
    case, and does it compare table names without regard to case."""

    dialect: str
    quote: str = '"'
    folds: bool = False
    ignores_case: bool = False

    @classmethod
    def for_dialect(cls, dialect: str, lower_case_table_names: int = 0) -> "NameRules":
        if dialect == "postgresql":
            return cls(dialect, '"', folds=True)
        if dialect in _MYSQL:
            return cls(dialect, "`", ignores_case=lower_case_table_names != 0)
        return cls(dialect)

    @classmethod
    def of(cls, engine: sa.Engine) -> "NameRules":
        dialect = engine.dialect.name
        if dialect not in _MYSQL:
            return cls.for_dialect(dialect)
        with engine.connect() as conn:
            lctn = int(conn.exec_driver_sql("SELECT @@lower_case_table_names").scalar() or 0)
        return cls.for_dialect(dialect, lctn)

    def wanted(self, part: Part) -> str:
        """The name the database looks for when given ``part``."""
        return ascii_lower(part.name) if self.folds and not part.quoted else part.name

    def pick(self, stored: list[str], part: Part) -> str | None:
        """The stored name ``part`` refers to, if any."""
        wanted = self.wanted(part)
        if wanted in stored:
            return wanted
        if self.ignores_case:
            same = [s for s in stored if s.lower() == wanted.lower()]
            if len(same) == 1:
                return same[0]
        return None

    def show(self, *names: str | None) -> str:
        return display(list(names), self.quote, self.folds)

    @property
    def schema_word(self) -> str:
        return "database" if self.dialect in _MYSQL else "schema"

    def why_not(self, part: Part) -> str:
        """Why a stored name that differs from ``part`` only in case is not it."""
        if self.folds and not part.quoted:
            return ("PostgreSQL folds a bare name in dbtable to lower case, as Spark's JDBC "
                    "source does")
        if self.folds:
            return "a quoted name in dbtable is taken exactly as written"
        return ("this server compares table and database names case-sensitively "
                "(lower_case_table_names = 0)")


def _case_variants(stored: list[str], wanted: str) -> list[str]:
    return [s for s in stored if s.lower() == wanted.lower() and s != wanted]


@dataclass(frozen=True)
class _Lookup:
    """Where the table is (or would be created), or why there is no such place."""

    schema: str | None
    name: str
    exists: bool
    #: A same-name-but-for-case table or schema, explained; "" if none.
    variant: str = ""


def _lookup(inspector: sa.Inspector, rules: NameRules, table: TableName) -> _Lookup:
    schema: str | None = None
    if table.schema is not None:
        schemas = inspector.get_schema_names()
        schema = rules.pick(schemas, table.schema)
        if schema is None:
            wanted = rules.wanted(table.schema)
            variants = _case_variants(schemas, wanted)
            hint = ""
            if variants:
                hint = (f"; {rules.show(variants[0])} does, but {rules.why_not(table.schema)}: "
                        f"set dbtable to {rules.show(variants[0], rules.wanted(table.table))}")
            raise SinkError(f"{rules.schema_word} {rules.show(wanted)} of dbtable {table} does "
                            f"not exist{hint}")
    names = inspector.get_table_names(schema=schema)
    name = rules.pick(names, table.table)
    if name is not None:
        return _Lookup(schema, name, True)
    wanted = rules.wanted(table.table)
    variants = _case_variants(names, wanted)
    variant = ""
    if variants:
        fix = rules.show(schema, variants[0])
        variant = (f"{fix} does, but {rules.why_not(table.table)}: to write to it, set "
                   f"dbtable to {fix}")
    return _Lookup(schema, wanted, False, variant)


def create_table(engine: sa.Engine, settings: SqlSinkSettings, schema: StructType,
                 table_schema: str | None, table_name: str) -> None:
    metadata = sa.MetaData()
    columns = []
    key, _ = match_key(settings.key, schema.fieldNames())
    declared = _declared_types(settings, schema, key)
    for spark_field in schema.fields:
        in_key = spark_field.name in key
        try:
            column_type = declared.get(spark_field.name) or sqlalchemy_type(spark_field.dataType, key=in_key)
        except UnsupportedTypeError as exc:
            raise SinkError(f"cannot create {settings.dbtable}: column {spark_field.name!r}: {exc}") from None
        # autoincrement=False: an integer key holds the DataFrame's values, never
        # a generated serial / AUTO_INCREMENT (which MySQL would apply to 0).
        columns.append(sa.Column(spark_field.name, column_type, primary_key=in_key,
                                 nullable=not in_key, autoincrement=False))
    sa.Table(table_name, metadata, *columns, schema=table_schema, **table_kwargs(settings.table_options))
    metadata.create_all(engine, checkfirst=True)


def _declared_types(settings: SqlSinkSettings, schema: StructType,
                    key: tuple[str, ...]) -> dict[str, sa.types.TypeEngine]:
    """``createTableColumnTypes`` by DataFrame column, each checked to hold
    the column's values before anything is created (Spark matches the names
    case-insensitively, as here)."""
    by_lower = {name.lower(): name for name in schema.fieldNames()}
    spark_types = {f.name: f.dataType for f in schema.fields}
    declared: dict[str, sa.types.TypeEngine] = {}
    for column, column_type in settings.column_types:
        name = by_lower.get(column.lower())
        if name is None:
            raise SinkError(f"cannot create {settings.dbtable}: option 'createTableColumnTypes' "
                            f"names column {column!r}, which the DataFrame does not have "
                            f"(its columns: {_names(schema.fieldNames())})")
        declared[name] = declared_type(column_type.name, column_type.args, key=name in key)
        if not can_fill(spark_types[name], declared[name]):
            raise SinkError(f"cannot create {settings.dbtable}: option 'createTableColumnTypes' "
                            f"makes column {name!r} {column_type}, which cannot hold the "
                            f"DataFrame's {spark_types[name].simpleString()}: cast the column in "
                            "the transform, or declare a type that holds it")
    return declared


def _names(names: list[str]) -> str:
    return ", ".join(names) or "none"


def match_columns(given: list[str], table: list[str]) -> tuple[dict[str, str], list[str]]:
    """Each DataFrame column's table column, and the problems: the same
    name, else the one table column whose name differs only in case (Spark's
    JDBC writer with ``spark.sql.caseSensitive=false``)."""
    column_of: dict[str, str] = {}
    problems: list[str] = []
    missing: list[str] = []
    for name in given:
        if name in table:
            column_of[name] = name
            continue
        same = [c for c in table if c.lower() == name.lower()]
        if len(same) == 1:
            column_of[name] = same[0]
        elif same:
            problems.append(
                f"DataFrame column {name!r} matches table columns "
                f"{' and '.join(map(repr, same))}, which differ only in case: rename the "
                "DataFrame column to the one it fills"
            )
        else:
            missing.append(name)
    if missing:
        problems.append(
            f"DataFrame column(s) {', '.join(map(repr, missing))} have no column in the table "
            f"(DataFrame columns: {_names(given)}; table columns: {_names(table)}): rename or "
            "drop them in the transform"
        )
    filled: dict[str, list[str]] = {}
    for name, column in column_of.items():
        filled.setdefault(column, []).append(name)
    for column, names in filled.items():
        if len(names) > 1:
            problems.append(f"DataFrame columns {' and '.join(map(repr, names))} would both fill "
                            f"table column {column!r}: drop or rename one of them")
    return column_of, problems


def match_key(key: tuple[str, ...], provided: list[str]) -> tuple[tuple[str, ...], list[str]]:
    """The upsert key as the table spells it (matched like the columns,
    among the table columns the DataFrame fills), and the key names that
    match none."""
    matched, missing = [], []
    for name in key:
        same = [name] if name in provided else [c for c in provided if c.lower() == name.lower()]
        if len(same) == 1:
            matched.append(same[0])
        else:
            missing.append(name)
    return tuple(matched), missing


def resolve_table(engine: sa.Engine, settings: SqlSinkSettings, schema: StructType,
                  carried: tuple[str, ...] = ()) -> TargetTable:
    """Find (or create) the table and refuse a DataFrame it cannot take.
    Columns in ``carried`` that the table lacks are left out of the write."""
    inspector = sa.inspect(engine)
    rules = NameRules.of(engine)
    found = _lookup(inspector, rules, settings.table)
    if not found.exists:
        if found.variant:
            raise SinkError(f"table {rules.show(found.schema, found.name)} does not exist; "
                            f"{found.variant}")
        if not settings.create_table:
            raise SinkError(
                f"table {rules.show(found.schema, found.name)} does not exist (the option "
                "createTable=false refuses a missing table): create it, or leave createTable out "
                "for the sink to create it from the DataFrame schema"
            )
        create_table(engine, settings, schema, found.schema, found.name)
        inspector = sa.inspect(engine)
    table_schema, table_name = found.schema, found.name
    reflected = inspector.get_columns(table_name, schema=table_schema)
    columns = {c["name"]: c["type"] for c in reflected}
    lower = {c.lower() for c in columns}
    left_out = tuple(c for c in schema.fieldNames() if c in carried and c.lower() not in lower)
    written = [c for c in schema.fieldNames() if c not in left_out]
    column_of, problems = match_columns(written, list(columns))
    for spark_field in schema.fields:
        column = column_of.get(spark_field.name)
        if column is not None and not can_fill(spark_field.dataType, columns[column]):
            problems.append(
                f"column {column!r} is {columns[column]} in the table but "
                f"{spark_field.dataType.simpleString()} in the DataFrame: cast it in the transform"
            )
    provided = list(column_of.values())
    for column in reflected:
        if column["name"] not in provided and not column.get("nullable", True) \
                and column.get("default") is None and not column.get("autoincrement") is True \
                and not column.get("identity") and not column.get("computed"):
            problems.append(f"table column {column['name']!r} is NOT NULL without a default "
                            "and the DataFrame does not provide it")
    key: tuple[str, ...] = ()
    shown = rules.show(table_schema, table_name)
    if settings.mode == "upsert":
        key, missing = match_key(settings.key, provided)
        if missing:
            problems.append(f"key column(s) {', '.join(missing)} are not in the DataFrame")
        elif not _has_unique(inspector, table_schema, table_name, key):
            problems.append(
                f"upsert needs a primary key or unique constraint on ({', '.join(key)}) "
                f"in {shown}"
            )
    if problems:
        raise SinkError(f"cannot write to {shown}: " + "; ".join(problems))
    return TargetTable(table_schema, table_name, columns, column_of, key, rules.dialect, left_out)


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


_TOKEN = re.compile(r'"((?:[^"]|"")+)"|`((?:[^`]|``)+)`|([^\W\d][\w$]*)')


def constraint_columns(engine: sa.Engine, target: TargetTable, constraint: str) -> tuple[str, ...]:
    """The columns a named constraint or unique index of the table covers
    (for an error about a refused row); a CHECK constraint's are the
    columns its expression names. Empty if unknown."""
    inspector = sa.inspect(engine)
    schema, table = target.schema, target.name
    pk = inspector.get_pk_constraint(table, schema=schema)
    if constraint == pk.get("name") or (constraint == "PRIMARY" and target.dialect in _MYSQL):
        return tuple(pk.get("constrained_columns") or ())
    for kind in (inspector.get_unique_constraints, inspector.get_indexes):
        for found in kind(table, schema=schema):
            if found.get("name") == constraint:
                return tuple(c for c in found.get("column_names") or () if c)
    for foreign in inspector.get_foreign_keys(table, schema=schema):
        if foreign.get("name") == constraint:
            return tuple(foreign.get("constrained_columns") or ())
    for check in inspector.get_check_constraints(table, schema=schema):
        if check.get("name") == constraint:
            named = []
            lower = {c.lower(): c for c in target.columns}
            for quoted, backquoted, bare in _TOKEN.findall(check.get("sqltext") or ""):
                name = quoted.replace('""', '"') or backquoted.replace("``", "`")
                column = name if name in target.columns else lower.get(bare.lower()) if bare else None
                if column and column not in named:
                    named.append(column)
            return tuple(named)
    return ()
