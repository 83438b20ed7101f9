"""Sample orders: produced to Kafka, and the totals the output must match."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from decimal import Decimal

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass(frozen=True)
class OrderTotals:
    count: int
    amount: Decimal


def recreate_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A fresh topic, so that a rerun of the demo starts from nothing."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        for future in admin.delete_topics([topic]).values():
            future.result(30)
        while topic in admin.list_topics(timeout=30).topics:
            time.sleep(0.2)
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    while topic not in admin.list_topics(timeout=30).topics:
        time.sleep(0.2)


def produce_orders(bootstrap: str, topic: str, count: int, partitions: int, seed: int = 7) -> OrderTotals:
    """``count`` JSON orders keyed by order id; the last of each partition is
    sent in a batch of its own (the local broker reports offsets of whole
    batches only)."""
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"})
    total = Decimal("0")
    last: dict[int, tuple[bytes, bytes]] = {}
    for order_id in range(1, count + 1):
        amount = Decimal(rng.randint(100, 99_999)) / 100
        total += amount
        value = json.dumps({
            "order_id": order_id,
            "customer": f"customer-{rng.randint(1, 500)}",
            "amount": str(amount),
            "created_at": "2026-11-21T12:00:00Z",
        }).encode()
        partition = order_id % partitions
        if partition in last:
            key, previous = last[partition]
            producer.produce(topic, key=key, value=previous, partition=partition)
        last[partition] = (str(order_id).encode(), value)
        producer.poll(0)
    producer.flush(60)
    for partition, (key, value) in last.items():
        producer.produce(topic, key=key, value=value, partition=partition)
        producer.flush(60)
    return OrderTotals(count, total)
