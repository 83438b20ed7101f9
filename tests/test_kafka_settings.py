"""Option checking of the Kafka source: every bad option is named."""

import pytest

from eoskit.connectors.kafka.schema import arrow_schema, spark_schema
from eoskit.connectors.kafka.settings import KafkaSourceSettings, OPTIONS
from eoskit.connectors.options import OptionError

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1"}


def parse(**extra):
    return KafkaSourceSettings.parse({**BASE, **extra})


def test_spark_option_names_are_accepted_case_insensitively():
    s = parse(subscribe="a, b", STARTINGOFFSETS="earliest", maxOffsetsPerTrigger="10",
              failOnDataLoss="false", includeHeaders="true", minPartitions="4")
    assert s.subscription.topics == ("a", "b")
    assert s.starting_offsets == "earliest"
    assert s.max_offsets_per_trigger == 10
    assert s.fail_on_data_loss is False and s.include_headers is True
    assert s.min_partitions == 4


def test_kafka_options_pass_through_without_prefix():
    s = parse(subscribe="a", **{"kafka.security.protocol": "PLAINTEXT"})
    assert s.kafka == {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "PLAINTEXT"}


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({}, "exactly one of the options 'subscribe'"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "subscribe, assign were given"),
        ({"subscribe": "a", "maxOffsetPerTrigger": "1"}, "Did you mean 'maxOffsetsPerTrigger'"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "'maxOffsetsPerTrigger'"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "'failOnDataLoss'"),
        ({"assign": "{oops"}, "option 'assign' is not valid JSON"),
        ({"assign": '{"a": ["x"]}'}, "option 'assign' must look like"),
        ({"subscribePattern": "("}, "option 'subscribePattern'"),
        ({"subscribe": "a", "startingOffsets": "{"}, "option 'startingOffsets'"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, "'endingOffsets' cannot be earliest"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "use startingOffsets"),
        ({"subscribe": "a", "kafka.isolation.level": "weird"}, "kafka.isolation.level"),
    ],
)
def test_bad_options_are_refused_by_name(options, fragment):
    with pytest.raises(OptionError) as err:
        parse(**options)
    assert fragment in str(err.value)


def test_bootstrap_servers_required():
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        KafkaSourceSettings.parse({"subscribe": "a"})


def test_pattern_subscription_matches_whole_names_and_skips_internal_topics():
    s = parse(subscribePattern="ord.*")
    topics = {"orders": [0, 1], "audit-orders": [0], "__consumer_offsets": [0], "ord": [0]}
    assert s.subscription.select(topics) == [("ord", 0), ("orders", 0), ("orders", 1)]


def test_subscribe_ignores_topics_not_yet_created():
    s = parse(subscribe="a,b")
    assert s.subscription.select({"a": [0]}) == [("a", 0)]


def test_arrow_schema_is_exactly_what_spark_expects():
    from pyspark.sql.pandas.types import to_arrow_schema

    for headers in (False, True):
        assert arrow_schema(headers).equals(to_arrow_schema(spark_schema(headers), timezone="UTC"))


def test_option_docs_are_generated_from_declarations():
    rows = list(OPTIONS.docs())
    assert any("`maxOffsetsPerTrigger`" in r for r in rows)


def _pages() -> dict[str, str]:
    """docs page -> declaring module, from scripts/options_docs.py (not installed)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "scripts" / "options_docs.py"
    spec = importlib.util.spec_from_file_location("options_docs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PAGES


@pytest.mark.parametrize("page, module", sorted(_pages().items()))
def test_docs_option_tables_match_the_declarations(page, module):
    import importlib
    from pathlib import Path

    docs = (Path(__file__).parents[1] / "docs" / page).read_text()
    block = docs.split("<!-- options:begin -->\n")[1].split("<!-- options:end -->")[0]
    assert block.strip() == "\n".join(importlib.import_module(module).OPTIONS.docs()), (
        f"docs/{page} is out of date: regenerate it with scripts/options_docs.py")
