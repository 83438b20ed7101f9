"""Savepoints of a real Spark checkpoint: a stateful Kafka -> Kafka job
(dropDuplicates, so the state store matters) runs, its savepoint travels
local -> S3 -> a new local checkpoint, and the job resumes from it with
exact output: no record of the savepoint's batches again (offsets), no
duplicate let through (state), new records once (the sink id carried).
"""

from __future__ import annotations

import shutil
import uuid
from io import StringIO

import pytest
from pyspark.sql import functions as F

from eoskit.connectors.kafka import KafkaSink, KafkaSource
from eoskit.runtime import Pipeline
from eoskit.runtime.job import fingerprint
from eoskit.runtime.state.checkpoints import Checkpoint
from eoskit.runtime.state.savepoints import (
    IncompatibleSavepointError,
    create_savepoint,
    dispose_savepoint,
    inspect_savepoint,
    restore_savepoint,
    restored_from,
)
from eoskit.runtime.devtools.services.kafka_topic import read_topic

PER_TRIGGER = 20  # 40 records in 2 batches


def dedupe(spark, kafka, source, out, checkpoint, sink_id):
    df = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", str(PER_TRIGGER)).load()
          .select(F.col("value").cast("string").alias("value")).dropDuplicates(["value"]))
    query = (df.writeStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
             .option("topic", out).option("sinkId", sink_id)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None


def values(kafka, topic):
    return sorted(int(r.value) for r in read_topic(kafka, topic).records())


def test_a_savepoint_travels_through_s3_and_the_job_resumes_exactly(
        spark, kafka, new_topic, produce_to, numbered_records, s3_bucket, s3_storage_options, tmp_path):
    source, out, rewound = new_topic(2, "spsrc"), new_topic(2, "spout"), new_topic(2, "sprew")
    produce_to(source, numbered_records(2, 20))  # values 0..39; value v at partition v % 2, offset v // 2
    sink_id = f"sp{uuid.uuid4().hex[:8]}"
    dedupe(spark, kafka, source, out, tmp_path / "ck", sink_id)
    checkpoint = Checkpoint(str(tmp_path / "ck"))
    assert checkpoint.latest_committed() == 1 and len(checkpoint.batch_ids()) == 2
    assert [op.rows for op in checkpoint.state_operators()] == [40]  # read from Spark's own files

    options = {"s3": s3_storage_options}
    target = f"s3://{s3_bucket}/savepoints/dedupe-1"
    created = create_savepoint(str(tmp_path / "ck"), target, job_name="dedupe", storage_options=options)
    early = create_savepoint(str(tmp_path / "ck"), str(tmp_path / "sp-early"), batch=0, job_name="dedupe")
    manifest = inspect_savepoint(target, storage_options=options)
    assert manifest == created and manifest.batch == 1
    assert manifest.offsets == ({source: {"0": 20, "1": 20}},)
    assert [s.sink_id for s in manifest.sinks] == [sink_id] and manifest.spark_version
    shutil.rmtree(tmp_path / "ck")  # the job's old checkpoint is gone for good

    # New records, and records whose values the job has seen (0..9): the state must drop them.
    produce_to(source, {p: [(str(v).encode(), str(v).encode()) for v in [*range(40, 50), *range(10)] if v % 2 == p]
                        for p in (0, 1)})
    restore_savepoint(target, str(tmp_path / "ck2"), job_name="dedupe", storage_options=options)
    assert restored_from(str(tmp_path / "ck2"))["sinkIds"] == [sink_id]
    dedupe(spark, kafka, source, out, tmp_path / "ck2", sink_id)
    assert values(kafka, out) == list(range(50))
    assert Checkpoint(str(tmp_path / "ck2")).batch(2).offsets == ({source: {"0": 30, "1": 30}},)

    # An earlier savepoint rewinds: the job goes on from batch 0's end offsets
    # with batch 0's state (here into another topic, under another sink id).
    ends = early.offsets[0][source]
    restore_savepoint(str(tmp_path / "sp-early"), str(tmp_path / "ck3"), job_name="dedupe")
    dedupe(spark, kafka, source, rewound, tmp_path / "ck3", f"sq{uuid.uuid4().hex[:8]}")
    after_batch_0 = [v for v in range(40) if v // 2 >= ends[str(v % 2)]]
    assert 0 < len(after_batch_0) < 40
    assert values(kafka, rewound) == after_batch_0 + list(range(40, 50))

    assert dispose_savepoint(target, storage_options=options).leftovers == []
    assert s3fs_files(s3_storage_options, s3_bucket) == []


def s3fs_files(storage_options, bucket):
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **storage_options)
    return fs.find(bucket)


def dedupe_job(kafka, source, out, sink_id, deduplicate=True):
    def transform(df):
        values = df.select(F.col("value").cast("string").alias("value"))
        return values.dropDuplicates(["value"]) if deduplicate else values

    return Pipeline("fingerprinted", KafkaSource(kafka, {"subscribe": source, "startingOffsets": "earliest"}),
                    KafkaSink(kafka, {"topic": out, "sinkId": sink_id}), transform=transform)


def test_a_restore_into_a_changed_query_is_refused_before_any_data_moves(
        spark, kafka, new_topic, produce_to, numbered_records, tmp_path):
    """The savepoint records the query's fingerprint; a job reading another
    topic, or without the savepoint's stateful operator, is refused naming
    the difference, with nothing restored and nothing written; the same
    query (its plan naming the operators the checkpoint holds) resumes."""
    source, other, out = new_topic(2, "fpsrc"), new_topic(2, "fpoth"), new_topic(2, "fpout")
    produce_to(source, numbered_records(2, 10))  # values 0..19
    sink_id = f"fp{uuid.uuid4().hex[:8]}"
    first = dedupe_job(kafka, source, out, sink_id)
    first.run(tmp_path / "ck", until_caught_up=True, spark=spark, out=StringIO())
    # The savepoint as the running job takes it (eoskit savepoint trigger / stop).
    manifest = create_savepoint(str(tmp_path / "ck"), str(tmp_path / "sp"), job_name="fingerprinted",
                                job=fingerprint.of_pipeline(first))
    assert manifest.fingerprint["source"] == {"format": "eoskit-kafka", "subscribe": [source]}
    assert [o["kind"] for o in manifest.fingerprint["stateOperators"]] == ["deduplication"]
    produce_to(source, {p: [(str(v).encode(), str(v).encode()) for v in [*range(20, 30), *range(5)]
                            if v % 2 == p] for p in (0, 1)})

    changed = [
        (dedupe_job(kafka, other, out, sink_id),
         f"the savepoint's source is eoskit-kafka subscribing to topics ['{source}'], this job's is "
         f"eoskit-kafka subscribing to topics ['{other}']"),
        (dedupe_job(kafka, source, out, sink_id, deduplicate=False),
         "the savepoint's state is of the stateful operators [0: deduplication], this job's query has none"),
    ]
    for job, difference in changed:
        with pytest.raises(IncompatibleSavepointError) as err:
            job.run(tmp_path / "ck-changed", until_caught_up=True, spark=spark, out=StringIO(),
                    from_savepoint=str(tmp_path / "sp"))
        assert difference in str(err.value)
        assert not (tmp_path / "ck-changed").exists()
    assert values(kafka, out) == list(range(20))  # nothing written

    dedupe_job(kafka, source, out, sink_id).run(tmp_path / "ck2", until_caught_up=True, spark=spark,
                                                out=StringIO(), from_savepoint=str(tmp_path / "sp"))
    assert values(kafka, out) == list(range(30))
