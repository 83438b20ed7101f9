"""The plug-in's one declaration, found by eoskit through the
``eoskit.plugins`` entry point in pyproject.toml. It must be cheap to
import: it names its modules as strings."""

from eoskit.connectors.plugins import Plugin

PLUGIN = Plugin(
    format="eoskit-sqlite",
    data_source="eoskit_sqlite.datasource:SqliteDataSource",
    # `eoskit txn list --path app.db`: the two-phase sink that owns a SQLite file.
    in_doubt=lambda kind, target, options: _in_doubt(kind, target),
)


def _in_doubt(kind: str, target: str):
    from eoskit_sqlite.sink import SqliteSink

    return SqliteSink.for_path(target) if kind == "path" and SqliteSink.is_database(target) else None
