"""Option checking of the Kafka source: every bad option is named."""

import os

import pytest

from eoskit.connectors.kafka.schema import arrow_schema, spark_schema
from eoskit.connectors.kafka.offsets import Timestamps
from eoskit.connectors.kafka.settings import (
    OPTIONS,
    SPARK_ONLY,
    KafkaSourceSettings,
    TopicNotFoundError,
    parse_duration_s,
)
from eoskit.core.options import OptionError

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
        ({"subscribe": "a", "startingTimestamp": "-5"}, "option 'startingTimestamp'"),
        ({"subscribe": "a", "startingTimestamp": "yesterday"}, "option 'startingTimestamp'"),
        ({"subscribe": "a", "startingOffsetsByTimestamp": "{"}, "option 'startingOffsetsByTimestamp' is not valid JSON"),
        ({"subscribe": "a", "startingOffsetsByTimestamp": '{"a": {"0": -1}}'}, "a-0=-1"),
        ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "skip"}, "expected one of error, latest"),
        ({"subscribe": "a", "maxTriggerDelay": "soon"}, "option 'maxTriggerDelay'"),
        ({"subscribe": "a", "minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "10"},
         "'minOffsetsPerTrigger' = 50 is higher than 'maxOffsetsPerTrigger' = 10"),
        ({"subscribe": "a", "maxRecordsPerPartition": "0"}, "option 'maxRecordsPerPartition'"),
        ({"subscribe": "a", "minPauseBetweenBatches": "5s"},
         "option 'minPauseBetweenBatches' needs the option 'checkpointLocation'"),
        ({"subscribe": "a", "minPauseBetweenBatches": "a while", "checkpointLocation": "/ck"},
         "option 'minPauseBetweenBatches'"),
    ],
)
def test_bad_options_are_refused_by_name(options, fragment):
    with pytest.raises(OptionError) as err:
        parse(**options)
    assert fragment in str(err.value)


def test_bootstrap_servers_required():
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        KafkaSourceSettings.parse({"subscribe": "a"})


def test_the_source_s_settings_are_declared_once_by_their_fields():
    """Issue 32, 3a: the option set is derived from the fields (each field's
    option, then those its derivation reads), in the order the docs show;
    the rules that span options are the class's named checks; the settings
    travel to executors whole."""
    import pickle

    from eoskit.core.options import declarations

    assert OPTIONS.settings is KafkaSourceSettings
    read = [o.name for _, d in declarations(KafkaSourceSettings) for o in (d.option, *d.reads) if o]
    assert read == [o.name for o in OPTIONS.options]
    assert read[:4] == ["subscribe", "subscribePattern", "assign", "startingOffsets"]
    assert [c.__name__ for c in KafkaSourceSettings.CHECKS] == [
        "min_offsets_within_max", "pause_needs_a_checkpoint", "broadcast_is_whole", "value_options_are_whole"]
    s = parse(subscribe="a", maxOffsetsPerTrigger="5", groupIdPrefix="p",
              minPauseBetweenBatches="5s", checkpointLocation="/ck")
    copy = pickle.loads(pickle.dumps(s))
    assert (copy.subscription, copy.kafka, copy.max_offsets_per_trigger, copy.min_pause_s,
            copy.given) == (s.subscription, s.kafka, 5, 5.0, s.given)
    assert s.given == {"subscribe", "maxOffsetsPerTrigger", "groupIdPrefix",
                       "minPauseBetweenBatches", "checkpointLocation"}
    assert parse(subscribe="a", minPauseBetweenBatches="0").min_pause_s is None


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


@pytest.mark.parametrize("headers", [False, True])
def test_a_task_reads_with_the_arrow_schema_its_reader_carries_from_the_driver(monkeypatch, headers):
    """The reader is pickled to the executor with the schema made for it:
    ``read`` passes that on, making none."""
    import pickle

    from eoskit.connectors.kafka import source
    from eoskit.connectors.kafka.offsets import OffsetRange

    options = {**BASE, "subscribe": "a", "includeHeaders": str(headers).lower()}
    data_source = source.KafkaDataSource(options)
    for reader in (data_source.streamReader(spark_schema(headers)), data_source.reader(spark_schema(headers))):
        copy = pickle.loads(pickle.dumps(reader))
        monkeypatch.setattr(source, "arrow_schema", None)  # nothing makes one on the executor
        seen = []
        monkeypatch.setattr(source, "read_range", lambda *args: seen.append(args) or iter(()))
        assert list(copy.read(source.KafkaInputPartition(OffsetRange("a", 0, 0, 5)))) == []
        monkeypatch.undo()
        assert seen[0][2].equals(arrow_schema(headers))


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
    declared = importlib.import_module(module)
    rows = declared.OPTIONS.docs() if hasattr(declared, "OPTIONS") else declared.docs()
    assert block.strip() == "\n".join(rows), (
        f"docs/{page} is out of date: regenerate it with scripts/options_docs.py")


@pytest.mark.parametrize("name", sorted(SPARK_ONLY))
def test_spark_options_eoskit_lacks_are_named_as_such_not_as_typos(name):
    with pytest.raises(OptionError) as err:
        parse(subscribe="a", **{name.upper(): "1"})
    text = str(err.value)
    assert f"option '{name}' is a Spark Kafka source option that the eoskit-kafka source does not take" in text
    assert SPARK_ONLY[name] in text
    assert "unknown option" not in text and "Did you mean" not in text


def test_typos_are_still_typos():
    with pytest.raises(OptionError, match="Did you mean 'minOffsetsPerTrigger'"):
        parse(subscribe="a", minOffsetPerTrigger="5")


def test_docs_name_every_spark_option_eoskit_lacks():
    from pathlib import Path

    docs = (Path(__file__).parents[1] / "docs" / "kafka-source.md").read_text()
    for name in SPARK_ONLY:
        assert f"`{name}`" in docs


def test_timestamp_options_follow_sparks_precedence():
    s = parse(subscribe="a", startingOffsets="earliest",
              startingOffsetsByTimestamp='{"a": {"0": 10}}', startingTimestamp="99")
    assert s.starting_offsets == Timestamps("startingTimestamp", everywhere=99)
    s = parse(subscribe="a", startingOffsets="earliest", startingOffsetsByTimestamp='{"a": {"0": 10}}')
    assert s.starting_offsets == Timestamps("startingOffsetsByTimestamp", per_partition={("a", 0): 10})
    assert s.starting_no_match == "error"
    s = parse(subscribe="a", endingTimestamp="5", startingOffsetsByTimestampStrategy="LATEST")
    assert s.ending_offsets == Timestamps("endingTimestamp", everywhere=5)
    assert s.starting_no_match == "latest"


@pytest.mark.parametrize("text, seconds", [("15m", 900), ("30s", 30), ("500ms", 0.5), ("2", 0.002), ("1h", 3600)])
def test_durations_are_sparks_time_strings(text, seconds):
    assert parse_duration_s(text) == pytest.approx(seconds)


def test_trigger_limits():
    s = parse(subscribe="a", minOffsetsPerTrigger="5", maxOffsetsPerTrigger="10", maxTriggerDelay="30s")
    assert (s.min_offsets_per_trigger, s.max_offsets_per_trigger, s.max_trigger_delay_s) == (5, 10, 30)
    assert parse(subscribe="a").max_trigger_delay_s == 900


def test_min_pause_between_batches_is_measured_from_the_checkpoint_s_commit_log(tmp_path):
    from eoskit.twophase.decision_log import last_commit_time

    s = parse(subscribe="a", minPauseBetweenBatches="1500ms", checkpointLocation=str(tmp_path))
    assert (s.min_pause_s, s.checkpoint_location) == (1.5, str(tmp_path))
    assert parse(subscribe="a").min_pause_s is None
    assert last_commit_time(str(tmp_path)) is None  # no batch committed yet
    (tmp_path / "commits").mkdir()
    for batch, written in ((9, 1000.0), (10, 2000.0)):  # 10 is the newest, numerically
        path = tmp_path / "commits" / str(batch)
        path.write_text("v1\n{}")
        os.utime(path, (written, written))
    (tmp_path / "commits" / ".10.crc").write_text("")
    assert last_commit_time(f"file:{tmp_path}") == 2000.0


def test_group_id_prefix_names_the_readers_group_unless_group_id_is_given():
    from eoskit.connectors.kafka.client import consumer_config

    one, two = parse(subscribe="a", groupIdPrefix="acl-team"), parse(subscribe="a", groupIdPrefix="acl-team")
    assert one.kafka["group.id"].startswith("acl-team-")
    assert one.kafka["group.id"] != two.kafka["group.id"]  # one group per query
    assert consumer_config(one.kafka)["group.id"] == one.kafka["group.id"]
    fixed = parse(subscribe="a", groupIdPrefix="acl-team", **{"kafka.group.id": "mine"})
    assert fixed.kafka["group.id"] == "mine"


def test_batch_reads_refuse_latest_start():
    for start in ("latest", '{"a": {"0": -1}}'):
        with pytest.raises(OptionError) as err:
            parse(subscribe="a", startingOffsets=start).check_batch()
        assert "option 'startingOffsets' cannot be latest" in str(err.value)
    parse(subscribe="a", startingOffsets="earliest").check_batch()


@pytest.mark.parametrize("option, value", [
    ("endingOffsets", "latest"), ("endingTimestamp", "5"), ("endingOffsetsByTimestamp", '{"a": {"0": 5}}'),
])
def test_streaming_reads_refuse_ending_options(option, value):
    s = parse(subscribe="a", **{option: value})
    s.check_batch()
    with pytest.raises(OptionError, match=f"option '{option}' applies to batch reads"):
        s.check_stream()


def test_missing_subscribed_topic_is_named():
    broker = {"here": [0, 1]}
    with pytest.raises(TopicNotFoundError) as err:
        parse(subscribe="here,gone").subscription.require_present(broker, "b:9092")
    assert "option 'subscribe' names topic 'gone' that does not exist at kafka.bootstrap.servers='b:9092'" in str(err.value)
    parse(subscribePattern="nothing.*").subscription.require_present(broker, "b:9092")


def test_missing_assigned_topic_or_partition_is_named():
    broker = {"here": [0, 1, 2]}
    with pytest.raises(TopicNotFoundError, match="option 'assign' names topic 'gone' that does not exist"):
        parse(assign='{"gone": [0], "here": [0]}').subscription.require_present(broker, "b:9092")
    with pytest.raises(TopicNotFoundError) as err:
        parse(assign='{"here": [1, 7]}').subscription.require_present(broker, "b:9092")
    assert "partitions that do not exist at kafka.bootstrap.servers='b:9092': here-7 (here has partitions 0-2)" in str(err.value)
    # once running, a partition that disappears is data loss, not a planning error
    assert parse(assign='{"here": [1, 7]}').subscription.select(broker) == [("here", 1)]


def test_the_sink_producer_batches_fit_the_smallest_topic_limit():
    """Kafka compares a whole record batch with a topic's max.message.bytes,
    and librdkafka does not split a batch the broker refuses: batch.size
    stays under the smallest limit of the sink's topics; a smaller one given
    as an option is kept."""
    from eoskit.connectors.kafka.sink_settings import BATCH_HEADER_BYTES, KafkaSinkSettings

    settings = KafkaSinkSettings.parse({"kafka.bootstrap.servers": "b:9092", "topic": "t"})
    assert settings.with_batches_under([]) is settings
    assert settings.with_batches_under([2_000_000]) is settings  # librdkafka's 1 MB fits
    fitted = settings.with_batches_under([1500, 2000])
    assert fitted.producer_config()["batch.size"] == str(1500 - BATCH_HEADER_BYTES)
    small = KafkaSinkSettings.parse({"kafka.bootstrap.servers": "b:9092", "topic": "t",
                                     "kafka.batch.size": "500"})
    assert small.with_batches_under([1500]).producer_config()["batch.size"] == "500"


def test_java_fetch_max_wait_is_librdkafka_s_fetch_wait_max_and_wins_over_eoskit_s_default():
    from eoskit.connectors.kafka.client import FETCH_WAIT_MAX_MS, consumer_config

    assert consumer_config(parse(subscribe="a").kafka)["fetch.wait.max.ms"] == FETCH_WAIT_MAX_MS
    config = consumer_config(parse(subscribe="a", **{"kafka.fetch.max.wait.ms": "250"}).kafka)
    assert config["fetch.wait.max.ms"] == "250" and "fetch.max.wait.ms" not in config


def test_java_max_request_size_is_the_sink_s_record_size_limit():
    from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings

    settings = KafkaSinkSettings.parse({"kafka.bootstrap.servers": "b:9092", "topic": "t",
                                        "kafka.max.request.size": "2097152"})
    assert settings.max_message_bytes == 2097152
    assert settings.producer_config()["message.max.bytes"] == "2097152"


@pytest.mark.parametrize("option", ["kafka.metric.reporters", "kafka.default.api.timeout.ms",
                                    "kafka.key.serializer", "kafka.buffer.memory", "kafka.linger.ms"])
def test_java_settings_the_source_cannot_use_are_refused_when_it_is_created(option):
    with pytest.raises(OptionError, match=f"option '{option}' "):
        parse(subscribe="a", **{option: "x"})


@pytest.mark.parametrize("name, value, says", [
    ("acks", "1", "acks=all"),
    ("request.required.acks", "0", "acks=all"),
    ("max.in.flight.requests.per.connection", "10", "at most 5 requests"),
    ("retries", "0", "retries"),
])
def test_the_sink_refuses_producer_values_its_idempotent_producer_cannot_take(name, value, says):
    from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings

    with pytest.raises(OptionError) as err:
        KafkaSinkSettings.parse({"kafka.bootstrap.servers": "h:9092", "topic": "t", f"kafka.{name}": value})
    assert f"option 'kafka.{name}'" in str(err.value) and says in str(err.value)
    KafkaSinkSettings.parse({"kafka.bootstrap.servers": "h:9092", "topic": "t", "kafka.acks": "all",
                             "kafka.max.in.flight.requests.per.connection": "5", "kafka.retries": "3"})
