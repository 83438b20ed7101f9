"""The demo's enrichment of an order, as Spark columns and as plain Python.

An enriched order is the order as produced plus ``amount_with_tax`` (the
amount times 1.20, rounded half up to the cent) and ``tier`` (``gold`` from
500.00, ``silver`` from 100.00, else ``bronze``), keyed by its order id.

Written twice from the same constants: :func:`enrich_orders` is the Spark
transform of the demo's Kafka-to-Kafka job and of the Kafka benchmark's
eoskit query; :func:`enrich_order` and :func:`enrich_value` do the same to
one record, for the benchmark's hand-written loops; :func:`check_enriched`
checks one record of the output. One of those loops runs in Quix Streams'
own virtualenv, which has no PySpark: so this module imports only the
standard library at the top, and PySpark inside :func:`enrich_orders`.
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

TAX_FACTOR = Decimal("1.20")
#: (lowest amount, tier), highest first; below every bound: ``bronze``.
TIERS = ((Decimal("500.00"), "gold"), (Decimal("100.00"), "silver"))
LOWEST_TIER = "bronze"
CENT = Decimal("0.01")
#: ``created_at`` stays text: the enriched record carries it through unchanged.
ORDER_SCHEMA = "order_id BIGINT, customer STRING, amount DECIMAL(12,2), created_at STRING"
FIELDS = ("order_id", "customer", "amount", "created_at", "amount_with_tax", "tier")


def with_tax(amount: Decimal) -> Decimal:
    return (amount * TAX_FACTOR).quantize(CENT, rounding=ROUND_HALF_UP)


def tier(amount: Decimal) -> str:
    for bound, name in TIERS:
        if amount >= bound:
            return name
    return LOWEST_TIER


def enrich_order(order: dict[str, Any]) -> dict[str, Any]:
    """Add ``amount_with_tax`` and ``tier`` to one parsed order (in place)."""
    amount = Decimal(order["amount"])
    order["amount_with_tax"] = str(with_tax(amount))
    order["tier"] = tier(amount)
    return order


def enrich_value(value: bytes) -> tuple[bytes, bytes]:
    """One JSON order -> (key, JSON enriched order), as :func:`enrich_orders` does."""
    order = enrich_order(json.loads(value))
    return str(order["order_id"]).encode(), json.dumps(order, separators=(",", ":")).encode()


def enrich_orders(df: DataFrame) -> DataFrame:
    """Kafka records of JSON orders -> ``key`` (order id) and ``value`` (the
    enriched order as JSON), the columns the eoskit-kafka sink writes."""
    from pyspark.sql import functions as F

    orders = df.select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
    amount = F.col("o.amount")
    tiers = F.when(amount >= F.lit(TIERS[0][0]), F.lit(TIERS[0][1]))
    for bound, name in TIERS[1:]:
        tiers = tiers.when(amount >= F.lit(bound), F.lit(name))
    enriched = F.struct(
        F.col("o.order_id").alias("order_id"),
        F.col("o.customer").alias("customer"),
        amount.cast("string").alias("amount"),
        F.col("o.created_at").alias("created_at"),
        F.round(amount * F.lit(TAX_FACTOR), 2).cast("decimal(12,2)").cast("string")
        .alias("amount_with_tax"),
        tiers.otherwise(F.lit(LOWEST_TIER)).alias("tier"),
    )
    return orders.select(F.col("o.order_id").cast("string").alias("key"),
                         F.to_json(enriched).alias("value"))


class EnrichedOrder(NamedTuple):
    order_id: int
    amount: Decimal
    created_at: str


def check_enriched(value: bytes) -> EnrichedOrder:
    """The order in one enriched record; raises ValueError when it is not
    JSON, or its added fields are not what the rules above give."""
    order = json.loads(value)
    amount = Decimal(str(order["amount"]))
    expected = (with_tax(amount), tier(amount))
    found = (order.get("amount_with_tax"), order.get("tier"))
    if found[0] is None or Decimal(str(found[0])) != expected[0] or found[1] != expected[1]:
        raise ValueError(f"order {order.get('order_id')}: amount {amount} enriched as "
                         f"{found}, expected {(str(expected[0]), expected[1])}")
    return EnrichedOrder(int(order["order_id"]), amount, order["created_at"])
