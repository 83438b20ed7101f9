"""The benchmarks' input topic: produced once per run, read to its end
offsets, deleted at the end."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from eoskit.runtime.devtools.demo.orders import OrderTotals, produce_orders, recreate_topic


def produce(bootstrap: str, topic: str, records: int, partitions: int, value_bytes: int = 0
            ) -> tuple[OrderTotals, float]:
    """A fresh topic with the demo's orders; returns their totals and the seconds it took.

    The topic is created explicitly, with the partitions asked for;
    ``value_bytes``: each record's value about this long (0: the demo's).
    """
    started = time.perf_counter()
    recreate_topic(bootstrap, topic, partitions)
    totals = produce_orders(bootstrap, topic, records, partitions, value_bytes=value_bytes)
    return totals, time.perf_counter() - started


def delete_topic(bootstrap: str, topic: str) -> None:
    """The broker keeps a million records per run otherwise."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(30)


def end_offsets(consumer: Consumer, topic: str, partitions: int) -> dict[int, int]:
    return {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
        for p in range(partitions)
    }
