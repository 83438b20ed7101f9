"""Probes of the Kafka broker under test for gaps that break exactly-once
from the broker's side, so that a crash test can tell a broker bug from an
eoskit one (measured on the local broker, Tansu 0.6; Apache Kafka has none).

Deferred transactional offsets: Kafka applies the consumer-group offsets a
transaction sent (``send_offsets_to_transaction``) when the transaction
commits, and an OffsetFetch with ``require_stable`` (what a read_committed
consumer's ``committed()`` sends) waits while any are pending. Tansu, when
the committed transaction shares a partition with another transaction that
is still open, writes the COMMIT record and acknowledges the commit but
keeps the offsets pending until that other one ends (its ``txn_end``), and
answers OffsetFetch with the old offsets meanwhile; a race between two
EndTxn calls can leave them pending for good. The Kafka sink's progress
markers are such offsets: on that broker a task retried, or a batch
replayed, while a marker is pending finds the older marker and writes its
rows again. ``defers_transactional_offsets`` reproduces the gap in a few
hundred milliseconds. ``held_pending`` finds the offsets left pending for
good: partitions whose read_committed end stays below the log's end
although no transaction is open any more.
"""

from __future__ import annotations

import re
import time
import uuid
from functools import lru_cache

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 15.0

DEFERRED_OFFSETS = (
    "the Kafka broker under test acknowledges a transaction's commit but keeps the "
    "consumer-group offsets it sent pending while another transaction on a shared partition "
    "is open, and answers OffsetFetch (require_stable) with the old offsets meanwhile "
    "(Tansu's txn_end; eoskit.twophase.conformance.broker_gaps): the Kafka sink's progress "
    "markers can read stale there, so a retried task or a replayed batch may write again. "
    "Exactly-once is proven against Apache Kafka (EOSKIT_SERVICES=docker)")


#: What a stale progress marker makes a crash test fail with: rows written
#: twice and none missing, a key's update repeated, a replay not refused.
STALE_MARKER = re.compile(r": [1-9][0-9]* duplicated, 0 missing|a batch was written twice|"
                          r"the job did not fail")


def explained_by_deferred_offsets(bootstrap: str, failure: str) -> str | None:
    """The reason to report a crash test's failure as expected, or None: its
    first line (``failure``) is what a stale progress marker makes, and the
    broker at ``bootstrap`` defers transactional offsets. Any other failure,
    or this one on a broker without the gap, is a failure."""
    if STALE_MARKER.search(failure) and defers_transactional_offsets(bootstrap):
        return f"{failure} -- {DEFERRED_OFFSETS}"
    return None


@lru_cache(maxsize=None)
def defers_transactional_offsets(bootstrap: str) -> bool:
    """Does the broker keep a committed transaction's group offsets pending
    while another transaction on the same partition is open? (Kafka: no.)"""
    tag = uuid.uuid4().hex[:8]
    data, markers, group = f"eoskit-probe-{tag}", f"eoskit-probe-{tag}-m", f"eoskit-probe-{tag}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(data, 1, 1), NewTopic(markers, 1, 1)]).values():
        future.result(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while not {data, markers} <= set(admin.list_topics(timeout=TIMEOUT_S).topics):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the probe's topics {data}, {markers} did not appear")
        time.sleep(0.1)
    producers = []
    try:
        for name in ("open", "committed"):
            made = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{group}-{name}"})
            made.init_transactions(TIMEOUT_S)
            made.begin_transaction()
            made.produce(data, name.encode(), partition=0)
            made.flush(TIMEOUT_S)
            producers.append(made)
        holder, committing = producers
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "isolation.level": "read_committed", "enable.auto.commit": False})
        try:
            committing.send_offsets_to_transaction([TopicPartition(markers, 0, 42)],
                                                   reader.consumer_group_metadata(), TIMEOUT_S)
            committing.commit_transaction(TIMEOUT_S)
            [committed] = reader.committed([TopicPartition(markers, 0)], TIMEOUT_S)
        finally:
            reader.close()
        holder.abort_transaction(TIMEOUT_S)
        return committed.offset != 42
    finally:
        for future in admin.delete_topics([data, markers]).values():
            try:
                future.result(TIMEOUT_S)
            except Exception:  # noqa: BLE001 - a probe's topics; best effort
                pass


def _end(bootstrap: str, topic: str, partition: int, isolation: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"eoskit-probe-{uuid.uuid4().hex[:8]}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S,
                                              cached=False)[1]
    finally:
        consumer.close()


def held_pending(bootstrap: str, topic: str, partitions: range) -> list[int]:
    """Partitions of ``topic`` that the broker still holds a transaction open
    on (read_committed end below the log's end). Called when every producer
    of the topic is done, it names what the broker left pending for good."""
    return [p for p in partitions
            if _end(bootstrap, topic, p, "read_committed") < _end(bootstrap, topic, p, "read_uncommitted")]
