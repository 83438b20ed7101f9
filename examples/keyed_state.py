"""Keyed state on Spark's ``transformWithState``: the classic patterns.

Each pattern is a ``StatefulProcessor`` and a function that applies it to a
DataFrame of events, ready to be a ``Pipeline``'s ``transform``. They need
the RocksDB state backend (``Pipeline(..., state_backend="rocksdb")``).
docs/state.md walks through them beside their Flink counterparts;
integration_tests/test_keyed_state_examples.py runs every one.

1. ``running_totals``: a value state, the running count and sum per key.
2. ``sessions_between_markers``: a list state, events buffered between a
   start and an end marker, emitted whole at the end.
3. ``quantities_per_product``: a map state, a quantity per product for
   each customer.
4. ``first_seen_within``: a value state with a TTL, deduplication that
   forgets a key after a quiet spell.
5. ``idle_alerts``: a processing-time timer, fired when a key has been quiet.
6. ``closed_after_event_time``: an event-time timer, fired when the
   watermark passes the key's last event plus a timeout.
7. ``per_minute_counts``: the classic count per key and minute, a tumbling
   event-time window whose state Spark keeps per (key, window) and drops
   once the watermark passes the window's end (no processor needed).
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from eoskit.runtime.state.keyed import replace_timer, ttl


# 1. Value state (Flink: ValueState<Tuple2<Long, Long>>) ---------------------------

class RunningTotals(StatefulProcessor):
    """Per customer: orders so far and their total amount."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.totals = handle.getValueState("totals", "orders long, total long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        orders, total = self.totals.get() or (0, 0)
        for row in rows:
            orders, total = orders + 1, total + row.amount
        self.totals.update((orders, total))
        yield Row(customer=key[0], orders=orders, total=total)


def running_totals(orders: DataFrame) -> DataFrame:
    """``orders(customer, amount)`` -> ``(customer, orders, total)``, updated per batch."""
    return orders.groupBy("customer").transformWithState(
        RunningTotals(), "customer string, orders long, total long", "Update", "None")


# 2. List state (Flink: ListState, the buffering example) -------------------------

class SessionsBetweenMarkers(StatefulProcessor):
    """Per device: readings buffered from a ``start`` marker to an ``end``
    marker, then emitted as one row; the buffer may span batches. Rows of
    one batch are taken in ``seq`` order (Spark promises no order within a
    key's rows)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.buffer = handle.getListState("buffer", "seq long, value long")
        self.open = handle.getValueState("open", "open boolean")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        for row in sorted(rows, key=lambda r: r.seq):
            if row.kind == "start":
                self.buffer.clear()
                self.open.update((True,))
            elif row.kind == "end" and self.open.exists():
                values = [value for _, value in self.buffer.get()]
                self.buffer.clear()
                self.open.clear()
                yield Row(device=key[0], readings=len(values), values=values)
            elif row.kind == "reading" and self.open.exists():
                self.buffer.appendValue((row.seq, row.value))


def sessions_between_markers(events: DataFrame) -> DataFrame:
    """``events(device, seq, kind, value)``, kind start | reading | end ->
    ``(device, readings, values)`` once per closed session."""
    return events.groupBy("device").transformWithState(
        SessionsBetweenMarkers(), "device string, readings long, values array<long>", "Update", "None")


# 3. Map state (Flink: MapState<String, Long>) ------------------------------------

class QuantitiesPerProduct(StatefulProcessor):
    """Per customer: the quantity of each product in the basket; a quantity
    of 0 takes the product out. Emits the products each batch touched."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.basket = handle.getMapState("basket", "product string", "quantity long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        touched = set()
        for row in rows:
            current = self.basket.getValue((row.product,))
            quantity = (current[0] if current else 0) + row.quantity
            if row.quantity == 0 or quantity <= 0:
                self.basket.removeKey((row.product,))
            else:
                self.basket.updateValue((row.product,), (quantity,))
            touched.add(row.product)
        for product in sorted(touched):
            current = self.basket.getValue((product,))
            yield Row(customer=key[0], product=product, quantity=current[0] if current else 0)
        yield Row(customer=key[0], product="*", quantity=sum(1 for _ in self.basket.keys()))


def quantities_per_product(items: DataFrame) -> DataFrame:
    """``items(customer, product, quantity)`` -> ``(customer, product,
    quantity)`` per touched product, and ``(customer, "*", products in the basket)``."""
    return items.groupBy("customer").transformWithState(
        QuantitiesPerProduct(), "customer string, product string, quantity long", "Update", "None")


# 4. State TTL (Flink: StateTtlConfig) --------------------------------------------

class FirstSeenWithin(StatefulProcessor):
    """Deduplication that forgets: an event id passes the first time it is
    seen, and again only once its state expired ``quiet`` after it passed."""

    def __init__(self, quiet: str) -> None:
        self.quiet = ttl(quiet, state="seen")

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.seen = handle.getValueState("seen", "at long", ttlDurationMs=self.quiet)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        count = sum(1 for _ in rows)
        if not self.seen.exists():
            self.seen.update((timerValues.getCurrentProcessingTimeInMs(),))
            yield Row(id=key[0], duplicates_dropped=count - 1)


def first_seen_within(events: DataFrame, quiet: str = "10 minutes") -> DataFrame:
    """``events(id)`` -> ``(id, duplicates_dropped)`` when ``id`` passes."""
    return events.groupBy("id").transformWithState(
        FirstSeenWithin(quiet), "id string, duplicates_dropped long", "Update", "ProcessingTime")


# 5. Processing-time timer (Flink: registerProcessingTimeTimer) -------------------

class IdleAlerts(StatefulProcessor):
    """Per user: an alert once the user has sent nothing for ``idle``
    (wall-clock time), with the events since the last alert."""

    def __init__(self, idle: str) -> None:
        self.idle = ttl(idle, state="the idle timeout")

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.events = handle.getValueState("events", "n long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        n = (self.events.get() or (0,))[0] + sum(1 for _ in rows)
        self.events.update((n,))
        replace_timer(self.handle, timerValues.getCurrentProcessingTimeInMs() + self.idle)
        return iter(())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        n = (self.events.get() or (0,))[0]
        self.events.clear()
        yield Row(user=key[0], events=n, idle_since_ms=expiredTimerInfo.getExpiryTimeInMs() - self.idle)


def idle_alerts(events: DataFrame, idle: str = "5 minutes") -> DataFrame:
    """``events(user)`` -> ``(user, events, idle_since_ms)`` once per quiet spell."""
    return events.groupBy("user").transformWithState(
        IdleAlerts(idle), "user string, events long, idle_since_ms long", "Update", "ProcessingTime")


# 6. Event-time timer (Flink: registerEventTimeTimer, CountWithTimeoutFunction) --

class ClosedAfterEventTime(StatefulProcessor):
    """Per key: count events; once the watermark passes the key's last event
    time plus ``timeout``, emit the count and forget the key."""

    def __init__(self, timeout: str) -> None:
        self.timeout = ttl(timeout, state="the event-time timeout")

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("state", "n long, last_ms long")

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        n, last = self.state.get() or (0, 0)
        for row in rows:
            n, last = n + 1, max(last, int(row.ts.timestamp() * 1000))
        self.state.update((n, last))
        replace_timer(self.handle, last + self.timeout)
        return iter(())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        n, last = self.state.get()
        self.state.clear()
        yield Row(key=key[0], events=n, last_ms=last)


def closed_after_event_time(events: DataFrame, timeout: str = "1 minute",
                            lateness: str = "0 seconds") -> DataFrame:
    """``events(key, ts timestamp)`` -> ``(key, events, last_ms)`` once the key is closed."""
    return (events.withWatermark("ts", lateness).groupBy("key").transformWithState(
        ClosedAfterEventTime(timeout), "key string, events long, last_ms long", "Update", "EventTime"))


# 7. Keyed tumbling window (Flink: keyBy(...).window(TumblingEventTimeWindows.of(1 min)).count)

def per_minute_counts(events: DataFrame, lateness: str = "0 seconds") -> DataFrame:
    """``events(key, ts timestamp)`` -> ``(key, minute, events)``, one row per
    key and minute once the watermark has passed the minute (append mode);
    events later than ``lateness`` behind the newest are dropped."""
    return (events.withWatermark("ts", lateness)
            .groupBy("key", F.window("ts", "1 minute").alias("w"))
            .agg(F.count("*").alias("events"))
            .select("key", F.col("w.start").alias("minute"), "events"))
