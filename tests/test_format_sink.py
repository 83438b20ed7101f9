"""FormatSink checks a plug-in's options as Spark will give them to it."""

import sys
import types

import pytest
from pyspark.sql.datasource import DataSource

from eoskit.core.options import Option, OptionError, OptionSet, parse_str


SEEN = []
TABLE = Option("dbtable", parse_str, None, "the table")
OPTIONS = OptionSet((TABLE,), owner="acme-sqlite")


class AcmeSource(DataSource):
    """A plug-in's data source: it looks its options up as Spark gives them
    (lower-cased keys), and checks them with an ``OptionSet``."""

    @classmethod
    def name(cls):
        return "acme-sqlite"

    def __init__(self, options):
        super().__init__(options)
        SEEN.append(options)
        OPTIONS.normalise(options)
        if options.get("dbtable") is None:  # as Spark gives it: lower-cased
            raise OptionError("option 'dbTable' is required")


@pytest.fixture
def acme(monkeypatch):
    import eoskit.connectors.plugins as registry
    from eoskit.connectors.plugins import Plugin

    module = types.ModuleType("acme_sqlite_for_tests")
    module.AcmeSource = AcmeSource
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(registry, "plugins", lambda: (
        Plugin(format="acme-sqlite", data_source=f"{module.__name__}:AcmeSource"),))
    SEEN.clear()


def test_the_data_source_gets_a_case_insensitive_mapping_as_from_spark(acme):
    from pyspark.sql.datasource import CaseInsensitiveDict

    from eoskit.connectors.format_sink import FormatSink

    sink = FormatSink("acme-sqlite", {"dbTable": "orders"})
    (given,) = SEEN
    assert isinstance(given, CaseInsensitiveDict)
    assert given["DBTABLE"] == given["dbtable"] == "orders"
    assert sink.all_options() == {"dbTable": "orders"}  # passed to Spark as the user wrote them


def test_a_bad_option_stops_the_build_with_the_plug_in_s_error(acme):
    from eoskit.connectors.format_sink import FormatSink

    with pytest.raises(OptionError, match="unknown option 'dbtabel' for acme-sqlite. Did you mean 'dbtable'"):
        FormatSink("acme-sqlite", {"dbTabel": "orders"})
    with pytest.raises(OptionError, match="no installed eoskit sink has the format 'acme-sqlit'"):
        FormatSink("acme-sqlit", {})
