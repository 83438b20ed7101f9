"""``eoskit chaos --records N``'s scratch input against a real broker, without
Spark: the Kafka source's scratch copy of its input topic is created like it
(three partitions), filled with exactly the generated records (read back with
a plain read_committed consumer), pinned by the source that reads it, and
deleted; the job's own topic is never written."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from eoskit.connectors.kafka import KafkaSource
from eoskit.connectors.kafka.pin import offsets
from eoskit.connectors.kafka.scratch_input import RecordRefusedError
from eoskit.runtime.devtools.chaos.generate import generate
from eoskit.runtime.job.components import InputRecord

RECORDS = 50

GENERATOR = '''
def orders(n):
    """Every shape a generator may return: values, (key, value), dicts."""
    for i in range(n):
        if i % 5 == 0:
            yield f"plain-{i}"
        elif i % 5 == 1:
            yield (f"k{i}", f"v{i}".encode())
        elif i % 5 == 2:
            yield {"key": f"k{i}", "value": f"v{i}", "headers": {"n": str(i)}, "partition": i % 3}
        else:
            yield {"value": f"v{i}", "headers": [("n", str(i).encode()), ("shop", "berlin")]}
'''


def read_all(kafka: str, topic: str) -> list[tuple]:
    """Every committed record of ``topic`` as (partition, key, value, headers)."""
    consumer = Consumer({"bootstrap.servers": kafka, "group.id": "eoskit-test-records",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        partitions = sorted(consumer.list_topics(timeout=30).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        # An empty partition is not read: the consumer's position there stays unknown.
        assigned = [TopicPartition(topic, p, 0) for p in partitions if ends[p] > 0]
        consumer.assign(assigned)
        rows: list[tuple] = []
        deadline = time.monotonic() + 60
        while any(tp.offset < ends[tp.partition] for tp in consumer.position(assigned)):
            assert time.monotonic() < deadline, f"reading {topic} to its end took too long"
            for message in consumer.consume(500, timeout=1.0):
                assert message.error() is None, message.error()
                rows.append((message.partition(), message.key(), message.value(),
                             tuple(message.headers() or ())))
        return rows
    finally:
        consumer.close()


def topics(kafka: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": kafka}).list_topics(timeout=30).topics)


@pytest.fixture
def source(kafka, new_topic) -> KafkaSource:
    """A job's source over a new topic of three partitions, one record in it
    (the job's real input, which the scratch input must leave alone)."""
    from eoskit.runtime.devtools.services.produce import produce_records

    topic = new_topic(3, prefix="orders")
    produce_records(kafka, topic, [(0, b"real", b"real")])
    return KafkaSource(kafka, {"subscribe": topic, "startingOffsets": "latest", "maxOffsetsPerTrigger": "10"})


def test_the_generated_records_fill_a_scratch_copy_of_the_input_and_nothing_else(
        kafka, source, tmp_path):
    topic = source.options["subscribe"]
    (tmp_path / "gen.py").write_text(GENERATOR)
    made = generate(f"{tmp_path / 'gen.py'}:orders", RECORDS)
    scratch = source.scratch_input("chaostesti")
    assert scratch.name == f"topic {topic}-chaostesti"
    try:
        scratch.create()
        assert scratch.produce(made) == RECORDS
        written = read_all(kafka, f"{topic}-chaostesti")
        assert Counter(row[1:] for row in written) == Counter(
            (r.key, r.value, r.headers) for r in made)
        placed = {key: partition for partition, key, _, _ in written if key is not None}
        assert all(placed[r.key] == r.partition for r in made if r.partition is not None)
        assert len({p for p, *_ in written}) == 3  # the copy has the original's three partitions
        assert read_all(kafka, topic) == [(0, b"real", b"real", ())]  # the real input untouched

        moved = scratch.source()
        pin = moved.pin()
        assert offsets(pin) == RECORDS  # no transaction markers: an idempotent producer's records only
        assert set(pin["start"]) == set(pin["end"]) == {f"{topic}-chaostesti"}
        per_partition = Counter(p for p, *_ in written)
        assert {int(p): end - pin["start"][f"{topic}-chaostesti"][p]
                for p, end in pin["end"][f"{topic}-chaostesti"].items()} == per_partition
        assert moved.describe_pin(pin) == f"{topic}-chaostesti: 3 partitions, {RECORDS} offsets"
        bounded = moved.bounded(pin)
        assert bounded.options["subscribe"] == f"{topic}-chaostesti"
    finally:
        scratch.drop()
    deadline = time.monotonic() + 30
    while f"{topic}-chaostesti" in topics(kafka) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert f"{topic}-chaostesti" not in topics(kafka) and topic in topics(kafka)
    scratch.drop()  # dropping what is not there is no error


def test_a_record_naming_a_partition_the_topic_lacks_is_refused_before_any_is_written(kafka, source):
    scratch = source.scratch_input("chaostestj")
    try:
        scratch.create()
        with pytest.raises(RecordRefusedError, match=f"the record at index 1 names partition 3, but "
                           f"{scratch.scratch_topic} has partitions 0 to 2"):
            scratch.produce([InputRecord(None, b"a", (), 2), InputRecord(None, b"b", (), 3)])
        assert read_all(kafka, scratch.scratch_topic) == []
    finally:
        scratch.drop()


JOB = '''
from eoskit.connectors.kafka import KafkaSink, KafkaSource
from eoskit.runtime import Pipeline

pipeline = Pipeline("records_job",
                    KafkaSource({kafka!r}, {{"subscribe": {topic!r}, "maxOffsetsPerTrigger": "5"}}),
                    KafkaSink({kafka!r}, {{"topic": {out!r}}}))
'''


def test_the_command_s_preparation_pins_the_scratch_input_that_each_run_s_job_reads(
        kafka, source, new_topic, tmp_path):
    """Chaos.prepare with --records against the broker, up to the runs (no
    Spark): each run's job file, loaded here, reads the pinned scratch input."""
    import io
    import json

    from eoskit.runtime.devtools.chaos.redirect import redirected
    from eoskit.runtime.devtools.chaos.runner import ROLE_LETTERS, Chaos, ChaosSettings

    topic, out = source.options["subscribe"], new_topic(2, prefix="out")
    job = tmp_path / "records_job.py"
    job.write_text(JOB.format(kafka=kafka, topic=topic, out=out))
    (tmp_path / "gen.py").write_text(GENERATOR)
    spec = f"{tmp_path / 'gen.py'}:orders"
    chaos = Chaos(ChaosSettings(job, seed=1, workdir=tmp_path / "runs", records=20, generator=spec),
                  out=io.StringIO())
    try:
        chaos.prepare()
        scratch_in = f"{topic}-chaos{chaos.token}i"
        said = chaos.out.getvalue().splitlines()
        assert said[:2] == [f"eoskit chaos: input: 20 records generated by {spec} into topic {scratch_in}",
                            f"eoskit chaos: input pinned: {scratch_in}: 3 partitions, 20 offsets"]
        assert read_all(kafka, topic) == [(0, b"real", b"real", ())]
        assert len(read_all(kafka, scratch_in)) == 20
        for run in chaos.runs:
            moved = redirected(str(run.folder / "chaos-run.json"))
            assert moved.source.options["subscribe"] == scratch_in
            assert json.loads(moved.source.options["stopAtOffsets"]) == chaos.pin["end"]
            assert moved.sink.options["topic"] == f"{out}-chaos{chaos.token}{ROLE_LETTERS[run.role]}"
    finally:
        chaos.cleanup()
    deadline = time.monotonic() + 30
    left = {t for t in topics(kafka) if f"chaos{chaos.token}" in t}
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = {t for t in topics(kafka) if f"chaos{chaos.token}" in t}
    assert left == set() and {topic, out} <= topics(kafka)
