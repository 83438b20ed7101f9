"""Runtime settings declared once, and the restart strategies' arithmetic."""

from __future__ import annotations

import argparse

import pytest

from eoskit.runtime.job.restart import ExponentialDelay, FailureRate, FixedDelay, NoRestart, parse_strategy
from eoskit.runtime.job.settings import JobSettings, SettingError, add_flags, from_flags, parse_duration


def test_durations_read_the_way_spark_triggers_are_written():
    assert parse_duration("5 seconds") == 5.0
    assert parse_duration("500 ms") == 0.5
    assert parse_duration("2m") == 120.0
    assert parse_duration(3) == 3.0
    with pytest.raises(ValueError, match="duration"):
        parse_duration("soon")


@pytest.mark.parametrize("values, message", [
    ({"checkpoint_interval": "-1 s"}, "checkpoint_interval (--checkpoint-interval) = '-1 s': a duration cannot be negative"),
    ({"checkpoint_interval": "0s"}, "greater than zero"),
    ({"tolerable_failures": -2}, "tolerable_failures"),
    ({"min_pause": "-3s"}, "min_pause (--min-pause) = '-3s': a duration cannot be negative"),
    ({"mode": "twice"}, "exactly_once or at_least_once"),
    ({"restart_strategy": "fixed_delay(attempts=0, delay=1s)"}, "attempts = 0: must be at least 1"),
    ({"restart_strategy": "sometimes"}, "unknown restart strategy 'sometimes'"),
    ({"retention": 3}, "unknown setting(s) retention"),
    ({"retained_checkpoints": 0}, "retained_checkpoints (--retained-checkpoints) = 0: the smallest value that works is 2"),
    ({"retained_checkpoints": 1}, "the smallest value that works is 2"),
    ({"retained_checkpoints": -5}, "the smallest value that works is 2"),
    ({"retained_checkpoints": 2.5}, "retained_checkpoints (--retained-checkpoints) = 2.5: expected a whole number"),
    ({"retained_checkpoints": True}, "expected a whole number"),
    ({"tolerable_failures": "1.5"}, "tolerable_failures (--tolerable-failures) = '1.5': expected a whole number"),
])
def test_nonsense_settings_are_refused_naming_the_setting(values, message):
    with pytest.raises(SettingError) as err:
        JobSettings.of(**values)
    assert message in str(err.value)


def test_flags_are_derived_from_the_declarations_and_win_over_the_job_file():
    parser = argparse.ArgumentParser()
    add_flags(parser)
    args = parser.parse_args(["--checkpoint-interval", "2s", "--restart-strategy", "none"])
    settings = JobSettings.of(checkpoint_interval="10 seconds", mode="at_least_once")
    merged = settings.override(from_flags(args))
    assert merged.checkpoint_interval == 2.0 and merged.mode == "at_least_once"
    assert isinstance(merged.restart_strategy, NoRestart)
    assert isinstance(JobSettings().strategy(), ExponentialDelay)


def test_min_pause_reaches_a_source_that_can_hold_batches_back_only():
    from eoskit.connectors.kafka import KafkaSource
    from eoskit.runtime.job.pipeline import Pipeline

    assert JobSettings.of(min_pause="2s").min_pause == 2.0 and JobSettings().min_pause == 0
    kafka = KafkaSource("localhost:9092", {"subscribe": "orders"})
    paused = kafka.with_min_pause(1.25, "/data/ck")
    assert paused.options == {"subscribe": "orders", "minPauseBetweenBatches": "1250ms",
                              "checkpointLocation": "/data/ck"}
    assert kafka.options == {"subscribe": "orders"}  # a copy

    class RateSource:
        def read_stream(self, spark): ...
        def describe(self): return "rate"

    Pipeline("ok", kafka, sink=object(), min_pause="2s")  # type: ignore[arg-type]
    with pytest.raises(SettingError, match="min_pause .* the source rate cannot hold a batch back"):
        Pipeline("job", RateSource(), sink=object(), min_pause="2s")  # type: ignore[arg-type]


def test_fixed_delay_gives_up_after_its_attempts():
    tracker = parse_strategy("fixed_delay(attempts=2, delay=10s)").tracker()
    assert [tracker.on_failure(t) for t in (0, 1, 2)] == [10.0, 10.0, None]
    assert parse_strategy("fixed_delay(3, 1m)") == FixedDelay(3, 60.0)


def test_failure_rate_counts_failures_within_the_interval():
    tracker = FailureRate(max_failures=2, interval=60, delay=1).tracker()
    assert [tracker.on_failure(t) for t in (0, 10, 70, 75)] == [1, 1, 1, 1]
    assert tracker.on_failure(76) is None  # 70, 75, 76 within 60 s


def test_exponential_delay_grows_caps_and_resets_after_a_quiet_spell():
    tracker = ExponentialDelay(initial=1, max=4, multiplier=2, reset_after=100, jitter=0).tracker()
    assert [tracker.on_failure(t) for t in (0, 1, 2, 3, 4)] == [1, 2, 4, 4, 4]
    assert tracker.on_failure(200) == 1
    assert NoRestart().tracker().on_failure(0) is None


def test_a_restart_is_not_tried_for_what_it_cannot_fix():
    from eoskit.runtime.job.failures import classify

    spark_text = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: Writing job failed.\n"
        "Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "x.py", line 3, in write\n'
        "eoskit.twophase.contract.SinkError: table orders does not exist in PostgreSQL\n")
    failure = classify(spark_text)
    assert failure.line() == "table orders does not exist in PostgreSQL"
    assert failure.permanent
    down = ("Traceback (most recent call last):\n  File \"x\", line 1\n"
            "eoskit.twophase.contract.ServiceUnavailableError: cannot connect to PostgreSQL\n")
    assert not classify(down).permanent
    assert not classify("[USER_RAISED_EXCEPTION] poison record").permanent


def test_the_smallest_retention_that_works_is_accepted():
    assert JobSettings.of(retained_checkpoints="2").retained_checkpoints == 2
    assert JobSettings.of(retained_checkpoints=100.0).retained_checkpoints == 100


# -- one settings system (issue 22, step 3) -------------------------------------


def test_settings_and_options_are_one_declaration_form():
    from eoskit.runtime.job.settings import SETTINGS
    from eoskit.core.options import Option

    assert all(isinstance(s, Option) for s in SETTINGS)


@pytest.mark.parametrize("text, bare, seconds", [
    ("500ms", "s", 0.5), ("30s", "ms", 30.0), ("15m", "ms", 900.0), ("2h", "s", 7200.0),
    ("1d", "ms", 86400.0), ("250us", "s", 0.00025), ("5 seconds", "s", 5.0),
    ("1500", "ms", 1.5), ("5", "s", 5.0), (5, "s", 5.0), (0.5, "s", 0.5),
])
def test_one_duration_grammar_whose_bare_number_unit_is_declared(text, bare, seconds):
    from eoskit.core.options import parse_duration

    assert parse_duration(text, bare) == pytest.approx(seconds)


def test_a_bare_number_counts_as_each_declaration_says():
    from eoskit.connectors.kafka.settings import parse_duration_s

    # Spark's Kafka source reads maxTriggerDelay's bare number as milliseconds;
    # the runtime's settings, like their Python numbers, as seconds.
    assert parse_duration_s("1500") == 1.5
    assert JobSettings.of(min_pause="2").min_pause == 2.0


@pytest.mark.parametrize("bad", ["-1s", "5 fortnights", "soon", ""])
def test_a_bad_duration_names_the_setting_and_the_option(bad):
    from eoskit.connectors.kafka.settings import KafkaSourceSettings
    from eoskit.runtime.job.settings import SettingError
    from eoskit.core.options import OptionError

    with pytest.raises(SettingError, match="setting min_pause"):
        JobSettings.of(min_pause=bad)
    with pytest.raises(OptionError, match="option 'maxTriggerDelay'"):
        KafkaSourceSettings.parse({"kafka.bootstrap.servers": "b:1", "subscribe": "t",
                                   "maxTriggerDelay": bad, "minOffsetsPerTrigger": "5"})


@pytest.mark.parametrize("text, value", [("true", True), ("on", True), ("1", True), ("YES", True),
                                         ("false", False), ("off", False), ("0", False), ("No", False)])
def test_one_bool_parser_for_settings_and_options(text, value):
    from eoskit.core.options import parse_bool

    assert parse_bool(text) is value
    assert JobSettings.of(state_backend="rocksdb", incremental_checkpoints=text).incremental_checkpoints is value


def test_the_protocol_reads_its_options_through_their_declarations_in_any_case():
    from eoskit.twophase.sink_options import CHECKPOINT, COMMIT_MODE, SINK_ID

    given = {"COMMITMODE": "Idempotent", "sinkid": "orders", "checkpointLocation": "/ck"}
    assert (COMMIT_MODE.get(given), SINK_ID.get(given), CHECKPOINT.get(given)) == ("idempotent", "orders", "/ck")
    assert COMMIT_MODE.get({}) == "exactly_once"


# -- TTL cleanup (issue 36, design section 3) --------------------------------------


class _RecordingConf:
    """The one part of a SparkSession ``backend.apply`` touches."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _Session:
    def __init__(self) -> None:
        self.conf = _RecordingConf()


SNAPSHOT = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
COMPACT = "spark.sql.streaming.stateStore.rocksdb.compactOnCommit"


def test_the_ttl_cleanup_settings_become_spark_confs():
    from eoskit.runtime.state import backend

    session = _Session()
    backend.apply(session, JobSettings.of(state_backend="rocksdb", state_snapshot_interval="2",
                                          state_compact_on_commit="on"))
    assert session.conf.values[SNAPSHOT] == "2" and session.conf.values[COMPACT] == "true"
    defaults = _Session()
    backend.apply(defaults, JobSettings())
    # Spark's own default snapshot interval is 10 too; compaction is off.
    assert defaults.conf.values[SNAPSHOT] == "10" and defaults.conf.values[COMPACT] == "false"
    assert defaults.conf.values[backend.PROVIDER_KEY].endswith("HDFSBackedStateStoreProvider")


@pytest.mark.parametrize("values, message", [
    ({"state_compact_on_commit": True},
     "setting state_compact_on_commit (--state-compact-on-commit) = True needs state_backend = "
     "'rocksdb' (it is 'hashmap')"),
    ({"state_backend": "hashmap", "state_compact_on_commit": "yes"}, "state_compact_on_commit"),
    ({"state_snapshot_interval": 0},
     "state_snapshot_interval (--state-snapshot-interval) = 0: expected a whole number, 1 or more"),
    ({"state_snapshot_interval": "2.5"}, "expected a whole number"),
    ({"state_backend": "rocksdb", "state_compact_on_commit": "sometimes"}, "expected true or false"),
])
def test_bad_ttl_cleanup_settings_are_refused_naming_the_setting(values, message):
    with pytest.raises(SettingError) as err:
        JobSettings.of(**values)
    assert message in str(err.value)


def test_compaction_on_a_job_file_is_checked_against_a_hashmap_flag():
    settings = JobSettings.of(state_backend="rocksdb", state_compact_on_commit=True)
    with pytest.raises(SettingError, match="state_compact_on_commit .* needs state_backend = 'rocksdb'"):
        settings.override({"state_backend": "hashmap"})
    # The snapshot interval applies to both backends.
    assert JobSettings.of(state_snapshot_interval=3).override(
        {"state_backend": "rocksdb"}).state_snapshot_interval == 3


def test_the_ttl_cleanup_flags_are_derived_from_the_declarations():
    parser = argparse.ArgumentParser()
    add_flags(parser)
    args = parser.parse_args(["--state-snapshot-interval", "4", "--state-compact-on-commit", "true"])
    merged = JobSettings.of(state_backend="rocksdb").override(from_flags(args))
    assert merged.state_snapshot_interval == 4 and merged.state_compact_on_commit is True


def test_a_job_whose_spark_conf_sets_the_cleanup_keys_keeps_them():
    from eoskit.runtime.state.backend import settings_with_spark_conf, spark_confs

    conf = {"spark.sql.streaming.stateStore.providerClass": "RocksDBStateStoreProvider",
            SNAPSHOT: "5", COMPACT: "true"}
    derived = JobSettings.of(**settings_with_spark_conf(conf, {}))
    assert (derived.state_snapshot_interval, derived.state_compact_on_commit) == (5, True)
    # apply would have put the defaults (10, false) over the job's own keys.
    assert spark_confs(derived)[SNAPSHOT] == "5" and spark_confs(derived)[COMPACT] == "true"
    # A setting given wins over the key, as for incremental_checkpoints.
    given = settings_with_spark_conf(conf, {"state_snapshot_interval": 7})
    assert JobSettings.of(**given).state_snapshot_interval == 7
    with pytest.raises(SettingError, match="state_snapshot_interval .* = '0'"):
        JobSettings.of(**settings_with_spark_conf({SNAPSHOT: "0"}, {}))


def _spark_class_strings(jar_prefix: str, member: str) -> bytes:
    import zipfile
    from pathlib import Path

    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob(f"{jar_prefix}_*.jar"))
    if not jars:
        pytest.skip(f"no {jar_prefix} jar in this pyspark")
    with zipfile.ZipFile(jars[0]) as jar:
        return jar.read(member)


def test_the_cleanup_keys_are_the_ones_the_installed_spark_declares():
    """Read from the jars' class files, without starting Spark: a renamed
    key would be set and silently ignored."""
    from eoskit.runtime.state.backend import COMPACT_KEY, SNAPSHOT_KEY

    sql_conf = _spark_class_strings("spark-catalyst", "org/apache/spark/sql/internal/SQLConf$.class")
    assert SNAPSHOT_KEY.encode() in sql_conf
    rocksdb_conf = _spark_class_strings(
        "spark-sql", "org/apache/spark/sql/execution/streaming/state/RocksDBConf$.class")
    # RocksDBConf declares its keys as a prefix and a name.
    prefix, _, name = COMPACT_KEY.rpartition(".")
    assert prefix.encode() in rocksdb_conf and name.encode() in rocksdb_conf
