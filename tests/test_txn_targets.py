"""``eoskit txn`` says which of --url and --path names which sink, and a
plug-in's ``in_doubt(kind, target, options)`` receives what its docs say."""

import pytest

from eoskit.runtime.cli.main import build_parser


def _help(capsys, *args):
    with pytest.raises(SystemExit):
        build_parser().parse_args([*args, "--help"])
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("verb", ["list", "resolve"])
def test_the_help_says_which_flag_names_which_sink(capsys, verb):
    text = _help(capsys, "txn", verb)
    assert "--url a server the sink reaches by URL" in text and "PostgreSQL, MySQL/MariaDB" in text
    assert "--path a place in a file system the sink writes to" in text and "eoskit-parquet" in text
    assert "A plug-in's sink takes the one its documentation names" in text
    assert "eoskit-kafka" in text  # nothing prepared: the command does not apply


def test_a_plug_in_is_asked_with_the_kind_the_target_as_typed_and_the_storage_options(monkeypatch, tmp_path):
    import eoskit.connectors.plugins as registry
    from eoskit.connectors.plugins import Plugin
    from eoskit.runtime.cli import txn as txn_cli

    asked = []

    def not_mine(kind, target, options):
        asked.append(("acme-a", kind, target, dict(options)))
        return None

    def mine(kind, target, options):
        asked.append(("acme-b", kind, target, dict(options)))
        return "the sink" if kind == "url" and target.startswith("acme://") else None

    monkeypatch.setattr(registry, "plugins", lambda: (
        Plugin(format="acme-a", data_source="x:A", in_doubt=not_mine),
        Plugin(format="acme-b", data_source="x:B", in_doubt=mine),
        Plugin(format="acme-c", data_source="x:C")))
    args = build_parser().parse_args(["txn", "list", "--url", "acme://db/1", "--storage-option",
                                      "s3.region=eu", "--checkpoint-dir", str(tmp_path)])
    assert txn_cli._sink(args) == "the sink"
    options = {"fs.s3.region": "eu"}
    assert asked == [("acme-a", "url", "acme://db/1", options), ("acme-b", "url", "acme://db/1", options)]

    args = build_parser().parse_args(["txn", "list", "--path", "/data/x", "--checkpoint-dir", str(tmp_path)])
    with pytest.raises(registry.PluginError, match="no eoskit sink handles the path '/data/x'.*acme-a, acme-b"):
        txn_cli._sink(args)


@pytest.mark.parametrize("url, sink, backend", [
    ("jdbc:postgresql://u:pw@127.0.0.1:1/db?sslmode=require", "PostgresTransactions", "postgresql"),
    ("jdbc:mariadb://u:pw@127.0.0.1:1/db", "MySQLTransactions", "mysql"),  # connects with PyMySQL
    ("jdbc:mysql://u:pw@127.0.0.1:1/db", "MySQLTransactions", "mysql"),
])
def test_a_jdbc_url_names_its_sql_sink_as_the_sink_s_url_option_does(url, sink, backend):
    """``eoskit txn list --url jdbc:...`` finds the sink that takes that URL,
    translated as the sink's ``url`` option translates it."""
    from eoskit.connectors.plugins import in_doubt_sink

    found = in_doubt_sink("url", url, {})
    assert type(found).__name__ == sink and not found.in_query
    assert (found.url.get_backend_name(), found.url.host, found.url.port, found.url.database,
            found.url.username, found.url.password) == (backend, "127.0.0.1", 1, "db", "u", "pw")


def test_a_jdbc_url_of_another_database_is_no_sql_sink_s():
    from eoskit.connectors.sql.urls import owns_url

    assert not owns_url("url", "jdbc:oracle:thin:@host:1521/db", ("postgresql", "mysql", "mariadb"))
    assert not owns_url("path", "jdbc:postgresql://h/db", ("postgresql",))
