"""Sample orders: produced to Kafka, and the totals the output must match."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from decimal import Decimal

from confluent_kafka.admin import AdminClient, NewTopic

from eoskit.runtime.devtools.services.produce import produce_records


@dataclass(frozen=True)
class OrderTotals:
    count: int
    amount: Decimal
    #: customer -> (total amount, orders): what running totals end at.
    by_customer: dict[str, tuple[Decimal, int]] = field(default_factory=dict, compare=False)


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


#: About how long an order's JSON value is (a 6-digit order id, a 5-digit amount).
ORDER_VALUE_BYTES = 106


def produce_orders(bootstrap: str, topic: str, count: int, partitions: int, seed: int = 7,
                   value_bytes: int = 0) -> OrderTotals:
    """``count`` JSON orders keyed by order id; returns what the sink must hold.
    ``value_bytes``: each value is made about this long (within a few
    bytes) by lengthening every customer name by the same number of ``x``s
    (the benchmarks' record sizes; still 500 customers); 0 leaves the orders
    as they are (about 100 bytes)."""
    rng = random.Random(seed)
    amounts: list[Decimal] = []
    by_customer: dict[str, tuple[Decimal, int]] = {}
    padding = "-" + "x" * (value_bytes - ORDER_VALUE_BYTES - 1) if value_bytes > ORDER_VALUE_BYTES else ""

    def orders():
        for order_id in range(1, count + 1):
            amount = Decimal(rng.randint(100, 99_999)) / 100
            amounts.append(amount)
            customer = f"customer-{rng.randint(1, 500)}{padding}"
            value = json.dumps({
                "order_id": order_id,
                "customer": customer,
                "amount": str(amount),
                "created_at": "2026-11-21T12:00:00Z",
            }).encode()
            total, orders = by_customer.get(customer, (Decimal("0"), 0))
            by_customer[customer] = (total + amount, orders + 1)
            yield order_id % partitions, str(order_id).encode(), value

    produce_records(bootstrap, topic, orders())
    return OrderTotals(count, sum(amounts, Decimal("0")), by_customer)
