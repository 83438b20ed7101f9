"""The dev tools' producer (``produce_records``), which the demo, the
benchmarks and the tests fill their topics with, against the real broker:
a local queue that fills up slows it down instead of failing it."""

from __future__ import annotations

from eoskit.runtime.devtools.services.kafka_topic import read_topic
from eoskit.runtime.devtools.services.produce import produce_records

RECORDS = 20_000
PARTITIONS = 2


def test_a_full_local_queue_waits_for_deliveries_and_loses_no_record(kafka, new_topic):
    topic = new_topic(PARTITIONS, "produce")
    records = ((i % PARTITIONS, str(i).encode(), str(i).encode()) for i in range(RECORDS))
    # A queue of 500 records fills many times over 20,000 (the default holds
    # 100,000, which 1M records into 64 partitions filled on 2026-12-08).
    produce_records(kafka, topic, records, config={"queue.buffering.max.messages": 500})
    log = read_topic(kafka, topic)
    for partition in range(PARTITIONS):
        values = [int(r.value) for r in log.committed[partition]]
        assert values == list(range(partition, RECORDS, PARTITIONS)), f"partition {partition}"
