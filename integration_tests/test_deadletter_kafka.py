"""Dead letters in the Kafka sink, against the real broker: records the sink
cannot write (over the producer's or the topic's size limit, naming a
partition the topic lacks) go to ``deadLetterTopic`` in the task's own
transaction, the others to the output, each exactly once, through a task
killed after its commit too. Verified by a plain read_committed consumer
(``kafka_topic.read_topic``)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import functions as F

from eoskit.core import crash
from eoskit.testing.conformance import Workload
from eoskit.testing.conformance.harness import Run
from eoskit.testing.conformance.kafka import KafkaTopicTarget
from eoskit.runtime.devtools.services.kafka_topic import read_topic

#: Also run on Apache Kafka 3.9 (the kafka3 tier, conftest.py).
pytestmark = pytest.mark.kafka_versions

#: The output topics' max.message.bytes: a 3000-byte value is over it.
OUTPUT_LIMIT = 2000
#: The dead-letter topic's: a dead letter of a 3000-byte value is cut to fit.
DEAD_LETTER_LIMIT = 1500

def create(bootstrap: str, name: str, partitions: int, max_bytes: int | None = None) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"max.message.bytes": str(max_bytes)} if max_bytes else {}
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
        future.result(30)
    while name not in admin.list_topics(timeout=10).topics:
        time.sleep(0.2)
    return name


def letters(bootstrap: str, topic: str) -> list[tuple[bytes | None, dict, dict]]:
    """(key, JSON value, headers) of every committed dead letter."""
    return [(r.key, json.loads(r.value), dict(r.headers)) for r in read_topic(bootstrap, topic).records()]


def test_records_the_sink_cannot_write_go_to_the_dead_letter_topic(
        spark, kafka, new_topic, produce_to, numbered_records, tmp_path):
    source = new_topic(3, "dlsrc")
    produce_to(source, numbered_records(3, 100))
    out = create(kafka, f"dlout-{uuid.uuid4().hex[:8]}", 2, OUTPUT_LIMIT)
    dead = create(kafka, f"dldlq-{uuid.uuid4().hex[:8]}", 1, DEAD_LETTER_LIMIT)
    n = F.col("value").cast("string").cast("int")
    df = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", source).option("startingOffsets", "earliest").load()
          .select("key",
                  F.when(n % 10 == 1, F.expr("repeat('x', 3000)")).otherwise(
                      F.col("value").cast("string")).alias("value"),
                  F.when(n % 10 == 2, F.lit(7)).otherwise(F.lit(None)).cast("int").alias("partition"),
                  F.col("partition").alias("src_partition"), F.col("offset").alias("src_offset")))
    query = (df.writeStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
             .option("topic", out).option("deadLetterTopic", dead)
             .option("deadLetterSourceColumns", "src_partition,src_offset")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    output = read_topic(kafka, out)
    assert sorted(int(r.value) for r in output.records()) == [i for i in range(300) if i % 10 not in (1, 2)]
    assert output.open_transactions == {}
    where = {int(r.key): (r.partition, r.offset) for r in read_topic(kafka, source).records()}
    found = letters(kafka, dead)
    assert sorted(int(key) for key, _, _ in found) == [i for i in range(300) if i % 10 in (1, 2)]
    positions = set()
    for key, letter, headers in found:
        i = int(key)
        assert letter["source"] == {"src_partition": where[i][0], "src_offset": where[i][1]}
        assert letter["task_partition"] == where[i][0] and letter["topic"] == out
        positions.add((letter["batch"], letter["task_partition"], letter["row_in_task"]))
        assert headers["eoskit.error"].decode() == letter["error"]
        assert headers["eoskit.position"].decode().endswith(
            f":{letter['batch']}:{letter['task_partition']}:{letter['row_in_task']}")
        if i % 10 == 1:
            size = 36 + len(key) + 3000  # framing, key, value
            assert f"is {size} bytes (key, value, headers and framing), over {OUTPUT_LIMIT - 61}" in letter["error"]
            assert letter["size"] == 3000 and letter["truncated"] is True
            assert 0 < len(letter["value"]) < DEAD_LETTER_LIMIT and set(letter["value"]) == {"x"}
        else:
            assert letter["error"] == (f"the row names partition 7 of topic {out!r}, which has "
                                       "partitions 0..1")
            assert letter["value"] == str(i) and letter["truncated"] is False
    assert len(positions) == len(found)


def test_a_missing_dead_letter_topic_is_refused_before_data_moves(spark, kafka, new_topic, tmp_path):
    source = new_topic(1, "dlsrc")
    out = new_topic(1, "dlout")
    df = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", source).option("startingOffsets", "earliest").load())
    query = (df.select("value").writeStream.format("eoskit-kafka")
             .option("kafka.bootstrap.servers", kafka).option("topic", out)
             .option("deadLetterTopic", "no-such-topic-eoskit-dl")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    with pytest.raises(Exception, match="option 'deadLetterTopic': topic 'no-such-topic-eoskit-dl' does not exist"):
        query.awaitTermination(120)


# --- A Python worker killed after its task committed records, dead letters
# and marker: Spark's retry finds the marker and writes nothing again.

class PoisonedKafkaTarget(KafkaTopicTarget):
    """The conformance job's rows as Kafka records, one id in ten with a
    value over the output topic's max.message.bytes."""

    select = ("CAST(id AS STRING) AS key",
              "CASE WHEN id % 10 = 1 THEN repeat('x', 3000) ELSE "
              "to_json(named_struct('id', id, 'amount', amount)) END AS value")

    def options(self, table: str) -> dict[str, str]:
        return {**super().options(table), "deadLetterTopic": f"{table}-dlq"}

    def create_table(self, table: str) -> None:
        create(self.bootstrap, table, 2, OUTPUT_LIMIT)
        create(self.bootstrap, f"{table}-dlq", 1)

    def in_doubt(self, prefix: str, table: str) -> list[str]:
        return [f"{t} partition {p}" for t in (table, f"{table}-dlq")
                for p in read_topic(self.bootstrap, t).open_transactions]


@pytest.mark.crash
def test_a_task_killed_after_commit_is_not_written_twice(kafka, tmp_path):
    workload = Workload.produce(kafka, records=2000, partitions=4, batches=2)
    target = PoisonedKafkaTarget(kafka)
    run = Run(target, workload, tmp_path, table=f"dlk-{uuid.uuid4().hex[:8]}")
    target.create_table(run.table)
    once = tmp_path / "crashed-once"
    code, log = run.run_job(**{crash.ENV: f"{crash.TASK_AFTER_COMMIT}@1", crash.ONCE_ENV: str(once)})
    assert once.exists(), "the crash point did not fire"
    assert code == 0, f"the retried task did not recover the batch (exit {code}):\n{log[-3000:]}"
    written = sorted(i for i, _ in target.rows(run.table))
    expected = [i for i in range(2000) if i % 10 != 1]
    duplicated, missing = len(written) - len(set(written)), len(set(expected) - set(written))
    assert written == expected, (f"{run.table}: {len(written)} records for {len(expected)}: "
                                 f"{duplicated} duplicated, {missing} missing")
    found = letters(kafka, f"{run.table}-dlq")
    assert sorted(int(key) for key, _, _ in found) == [i for i in range(2000) if i % 10 == 1]
    assert {letter["batch"] for _, letter, _ in found} == {0, 1}
    assert all(letter["value"] == "x" * 3000 and not letter["truncated"] for _, letter, _ in found)
    run.assert_nothing_prepared()
