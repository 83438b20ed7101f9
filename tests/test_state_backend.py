"""The state backend setting (``eoskit.runtime.state.backend``): declared like
every setting, derived from a job's spark_conf, and held to the backend its
checkpoint was written with (read from offset-log entries laid out as Spark
4.3 writes them; checked against real ones by
integration_tests/test_state_backend.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eoskit.runtime.job.settings import JobSettings, SettingError
from eoskit.runtime.state.backend import (
    PROVIDERS,
    check_checkpoint,
    recorded_backend,
    settings_with_spark_conf,
)

PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"


def offsets_entry(ck: Path, batch: int, provider: str | None) -> None:
    conf = {"spark.sql.shuffle.partitions": "2"}
    if provider:
        conf[PROVIDER_KEY] = provider
    (ck / "offsets").mkdir(parents=True, exist_ok=True)
    (ck / "metadata").write_text(json.dumps({"id": "q"}))
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": conf}
    (ck / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{{\"logOffset\":0}}")


def test_the_backend_settings_parse_and_default_like_flinks():
    assert JobSettings().state_backend == "hashmap" and not JobSettings().incremental_checkpoints
    settings = JobSettings.of(state_backend="RocksDB", incremental_checkpoints="true")
    assert settings.state_backend == "rocksdb" and settings.incremental_checkpoints is True
    assert JobSettings.of(state_backend="rocksdb", incremental_checkpoints="off").incremental_checkpoints is False


@pytest.mark.parametrize("values, message", [
    ({"state_backend": "memory"}, "state_backend (--state-backend) = 'memory': expected hashmap or rocksdb"),
    ({"state_backend": "rocksdb", "incremental_checkpoints": "maybe"}, "expected true or false"),
    ({"incremental_checkpoints": True}, "incremental_checkpoints (--incremental-checkpoints) = True needs "
                                         "state_backend = 'rocksdb' (it is 'hashmap')"),
])
def test_bad_backend_settings_are_refused_naming_the_setting(values, message):
    with pytest.raises(SettingError) as err:
        JobSettings.of(**values)
    assert message in str(err.value)


def test_a_flag_that_turns_the_backend_back_to_hashmap_is_checked_against_the_job_file():
    settings = JobSettings.of(state_backend="rocksdb", incremental_checkpoints=True)
    with pytest.raises(SettingError, match="needs state_backend = 'rocksdb'"):
        settings.override({"state_backend": "hashmap"})


def test_a_provider_named_in_spark_conf_sets_the_backend_and_a_contradiction_is_refused():
    conf = {PROVIDER_KEY: PROVIDERS["rocksdb"],
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"}
    derived = JobSettings.of(**settings_with_spark_conf(conf, {}))
    assert derived.state_backend == "rocksdb" and derived.incremental_checkpoints
    short = {PROVIDER_KEY: "HDFSBackedStateStoreProvider"}
    assert settings_with_spark_conf(short, {"state_backend": "hashmap"})["state_backend"] == "hashmap"
    with pytest.raises(SettingError, match="state_backend = 'hashmap' contradicts spark_conf"):
        settings_with_spark_conf(conf, {"state_backend": "hashmap"})
    with pytest.raises(SettingError, match="'com.example.MyStore', which is neither backend"):
        settings_with_spark_conf({PROVIDER_KEY: "com.example.MyStore"}, {})


def test_the_backend_of_a_checkpoint_is_read_from_its_newest_offset_log_entry(tmp_path):
    ck = tmp_path / "ck"
    assert recorded_backend(str(ck)) is None  # not started yet
    offsets_entry(ck, 0, PROVIDERS["hashmap"])
    offsets_entry(ck, 1, PROVIDERS["rocksdb"])
    assert recorded_backend(str(ck)) == ("rocksdb", PROVIDERS["rocksdb"], 1)
    check_checkpoint(str(ck), JobSettings.of(state_backend="rocksdb"))
    with pytest.raises(SettingError) as err:
        check_checkpoint(str(ck), JobSettings())
    message = str(err.value)
    assert "state_backend (--state-backend) = 'hashmap'" in message
    assert "keeps its state in 'rocksdb' (RocksDBStateStoreProvider, recorded in offsets/1)" in message


def test_a_checkpoint_without_a_recorded_provider_or_batch_is_not_held_to_one(tmp_path):
    ck = tmp_path / "ck"
    (ck / "offsets").mkdir(parents=True)
    (ck / "metadata").write_text("{}")
    assert recorded_backend(str(ck)) is None
    offsets_entry(ck, 0, None)
    check_checkpoint(str(ck), JobSettings.of(state_backend="rocksdb"))
    offsets_entry(ck, 1, "com.example.MyStore")
    with pytest.raises(SettingError, match="keeps its state in 'com.example.MyStore'"):
        check_checkpoint(str(ck), JobSettings())
