"""A SQL sink's scratch copy (``runtime.components.Scratch``): the table,
and its dead-letter and marker tables, suffixed in the same schema, created
like the originals (``CREATE TABLE ... LIKE``, the dialect's statement), read
with a plain ``SELECT``, dropped at the end.

Runs on the driver of ``eoskit chaos``. Names are found as the sink finds
them (``NameRules``: PostgreSQL folds a bare name) and every statement
quotes them through SQLAlchemy's identifier preparer: nothing a user gives
is pasted into SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ContextManager

import sqlalchemy as sa
from pyspark.sql.types import StructType

from eoskit.connectors.sql.identifiers import Part, TableName
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.tables import NameRules

if TYPE_CHECKING:
    from eoskit.connectors.sql.datasource import SqlPipelineSink

#: Options a scratch sink takes from the original under another name, or drops.
_RENAMED = ("dbtable", "deadlettertable", "markertable")
_DROPPED = ("sinkid",)  # each run's checkpoint gives it a sink id of its own


def _suffixed(name: TableName, suffix: str, quote: str) -> str:
    """``name`` with ``_<suffix>`` on its table part, as dbtable text that
    reads back as the same parts (quoted parts stay quoted)."""
    def text(part: Part) -> str:
        return quote + part.name.replace(quote, quote * 2) + quote if part.quoted else part.name

    table = Part(f"{name.table.name}_{suffix}", name.table.quoted)
    return ".".join(text(p) for p in (name.schema, table) if p is not None)


@dataclass
class SqlScratch:
    """The scratch copy of ``original``'s tables, named with ``suffix``."""

    original: "SqlPipelineSink"
    suffix: str

    def __post_init__(self) -> None:
        self._settings = self._parse(self.original)
        quote = self.original.data_source.sink_type.DATABASE.identifier_quotes[0]
        options = {k: v for k, v in self.original.options.items()
                   if k.lower() not in _RENAMED + _DROPPED}
        dead = self._settings.dead_letter_table
        if dead is not None:
            options["deadLetterTable"] = _suffixed(dead, self.suffix, quote)
        options["markerTable"] = f"{self._settings.marker_table}_{self.suffix}"
        self._sink = replace(self.original, dbtable=_suffixed(self._settings.table, self.suffix, quote),
                             options=options)
        self._scratch_settings = self._parse(self._sink)
        self.name = f"table {self._sink.dbtable}"

    @staticmethod
    def _parse(sink: "SqlPipelineSink") -> SqlSinkSettings:
        source = sink.data_source
        return SqlSinkSettings.parse(sink.all_options(), source.short_name, source.sink_type)

    def sink(self) -> "SqlPipelineSink":
        return self._sink

    def _lookup(self) -> ContextManager[sa.Engine]:
        return self.original.data_source.sink_type(self._settings, StructType()).lookup()

    def _pairs(self, rules: NameRules) -> list[tuple[str | None, str, str]]:
        """``(schema, original, scratch)`` stored names of each table copied."""
        old, new = self._settings, self._scratch_settings
        pairs = [(old.table, new.table)]
        if old.dead_letter_table is not None and new.dead_letter_table is not None:
            pairs.append((old.dead_letter_table, new.dead_letter_table))
        return [(rules.wanted(a.schema) if a.schema else None, rules.wanted(a.table), rules.wanted(b.table))
                for a, b in pairs]

    def create(self) -> None:
        with self._lookup() as engine:
            rules = NameRules.of(engine)
            inspector = sa.inspect(engine)
            like = self.original.data_source.sink_type.DATABASE.create_like
            quote = engine.dialect.identifier_preparer.quote
            with engine.begin() as conn:
                for schema, old, new in self._pairs(rules):
                    if not inspector.has_table(old, schema):
                        continue  # the sink creates it (createTable), as it would the original
                    def qualified(name: str) -> str:
                        return ".".join(quote(p) for p in (schema, name) if p is not None)
                    conn.exec_driver_sql(like.format(new=qualified(new), old=qualified(old)))

    def rows(self) -> tuple[tuple[str, ...], list[tuple], tuple[str, ...]]:
        with self._lookup() as engine:
            rules = NameRules.of(engine)
            schema, _, new = self._pairs(rules)[0]
            table = sa.Table(new, sa.MetaData(), schema=schema, autoload_with=engine)
            with engine.connect() as conn:
                rows = [tuple(r) for r in conn.execute(sa.select(table))]
            key = tuple(sa.inspect(engine).get_pk_constraint(new, schema).get("constrained_columns") or ())
            return tuple(c.name for c in table.columns), rows, key or self._settings.key

    def drop(self) -> None:
        with self._lookup() as engine:
            rules = NameRules.of(engine)
            quote = engine.dialect.identifier_preparer.quote
            schema = self._pairs(rules)[0][0]
            names = [new for _, _, new in self._pairs(rules)] + [self._scratch_settings.marker_table]
            with engine.begin() as conn:
                for name in names:
                    qualified = ".".join(quote(p) for p in (schema, name) if p is not None)
                    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {qualified}")
