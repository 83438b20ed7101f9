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
