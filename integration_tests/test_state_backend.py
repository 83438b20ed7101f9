"""The state backend setting on real checkpoints: the provider Spark records
in the offset log, RocksDB changelog files for incremental checkpoints, and
the refusals (transformWithState on the hash map backend, another backend
for an existing checkpoint) before any query starts."""

from __future__ import annotations

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor

from eoskit.runtime import Pipeline
from eoskit.runtime.state.checkpoints import Checkpoint
from eoskit.runtime.job.settings import SettingError
from eoskit.runtime.state.backend import PROVIDER_KEY, PROVIDERS


class Counter(StatefulProcessor):
    def init(self, handle):
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key, rows, timerValues):
        n = (self.count.get() or (0,))[0] + sum(1 for _ in rows)
        self.count.update((n,))
        yield Row(k=key[0], n=n)


def count_per_key(df):
    return df.groupBy("k").transformWithState(Counter(), "k string, n long", "Update", "None")


def test_transform_with_state_on_the_hashmap_backend_is_refused_naming_the_setting(
        spark, json_files, gathered, tmp_path):
    source = json_files("k string")
    pipeline = Pipeline("tws_hashmap", source, gathered(), transform=count_per_key)
    with pytest.raises(SettingError) as err:
        pipeline.run(tmp_path / "ck", until_caught_up=True, spark=spark)
    assert "uses transformWithState, which keeps its state in RocksDB only: set state_backend = " \
           "'rocksdb' (--state-backend rocksdb); it is 'hashmap'" in str(err.value)
    assert not (tmp_path / "ck" / "offsets").exists()


def test_a_checkpoint_keeps_the_backend_it_was_written_with(spark, json_files, gathered, tmp_path):
    source = json_files("k string")
    source.add({"k": "a"}, {"k": "b"}, {"k": "a"})
    ck = tmp_path / "ck"

    def job(**settings):
        sink = gathered()
        transform = lambda df: df.groupBy("k").agg(F.count("*").alias("n"))  # noqa: E731
        return Pipeline("backend", source, sink, transform=transform, **settings), sink

    pipeline, sink = job(state_backend="rocksdb", incremental_checkpoints=True)
    pipeline.run(ck, until_caught_up=True, spark=spark)
    assert sorted((r["k"], r["n"]) for r in sink.rows()) == [("a", 2), ("b", 1)]
    checkpoint = Checkpoint(str(ck))
    assert checkpoint.batch_conf()[1][PROVIDER_KEY] == PROVIDERS["rocksdb"]
    assert any(p.endswith(".changelog") for p in checkpoint.files())  # incremental: changelogs
    assert [op.provider for op in checkpoint.state_operators()] == ["rocksdb"]

    source.add({"k": "b"})
    with pytest.raises(SettingError) as err:
        job()[0].run(ck, until_caught_up=True, spark=spark)
    assert "state_backend (--state-backend) = 'hashmap', but checkpoint" in str(err.value)
    assert "keeps its state in 'rocksdb' (RocksDBStateStoreProvider, recorded in offsets/0)" in str(err.value)

    # Incremental checkpoints may be switched off between runs; the state goes on.
    pipeline, sink = job(state_backend="rocksdb")
    pipeline.run(ck, until_caught_up=True, spark=spark)
    assert [(r["k"], r["n"]) for r in sink.rows()] == [("b", 2)]
