"""The keyed-state examples of examples/keyed_state.py (docs/state.md), run:
value, list and map state, state TTL, processing-time and event-time
timers, each on the RocksDB backend through a ``Pipeline``, with small
inputs whose batches the test lays out file by file."""

from __future__ import annotations

import io
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from eoskit.runtime import Pipeline
from eoskit.runtime.state.checkpoints import Checkpoint
from eoskit.runtime.job.jobfile import load_module
from eoskit.runtime.state.keyed import StateTTLError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "keyed_state.py"


@pytest.fixture(scope="module")
def examples():
    return load_module(EXAMPLES, "eoskit_examples_keyed_state")


def run(name, source, sink, transform, checkpoint, spark):
    Pipeline(name, source, sink, transform=transform, state_backend="rocksdb").run(
        checkpoint, until_caught_up=True, spark=spark, out=io.StringIO())


def test_value_state_keeps_running_totals_across_batches_and_restarts(
        spark, examples, json_files, gathered, tmp_path):
    orders, sink = json_files("customer string, amount long"), gathered()
    orders.add({"customer": "c1", "amount": 10}, {"customer": "c2", "amount": 5})
    orders.add({"customer": "c1", "amount": 1})
    run("totals", orders, sink, examples.running_totals, tmp_path / "ck", spark)
    orders.add({"customer": "c1", "amount": 100}, {"customer": "c2", "amount": 1})
    run("totals", orders, sink, examples.running_totals, tmp_path / "ck", spark)  # state from the checkpoint
    by_batch = {b: sorted((r["customer"], r["orders"], r["total"]) for r in rows)
                for b, rows in sink.batches.items()}
    assert by_batch == {0: [("c1", 1, 10), ("c2", 1, 5)], 1: [("c1", 2, 11)],
                        2: [("c1", 3, 111), ("c2", 2, 6)]}


def test_list_state_buffers_readings_between_markers_across_batches(
        spark, examples, json_files, gathered, tmp_path):
    events, sink = json_files("device string, seq long, kind string, value long"), gathered()
    e = lambda device, seq, kind, value=None: {"device": device, "seq": seq, "kind": kind, "value": value}  # noqa: E731
    events.add(e("d1", 1, "reading", 99), e("d1", 2, "start"), e("d1", 4, "reading", 2), e("d1", 3, "reading", 1),
               e("d2", 1, "start"), e("d2", 2, "reading", 7), e("d2", 3, "end"))
    events.add(e("d1", 5, "reading", 3), e("d1", 6, "end"), e("d1", 7, "reading", 4))
    run("sessions", events, sink, examples.sessions_between_markers, tmp_path / "ck", spark)
    assert {b: [(r["device"], r["readings"], r["values"]) for r in rows] for b, rows in sink.batches.items()} == {
        0: [("d2", 1, [7])], 1: [("d1", 3, [1, 2, 3])]}


def test_map_state_keeps_a_quantity_per_product(spark, examples, json_files, gathered, tmp_path):
    items, sink = json_files("customer string, product string, quantity long"), gathered()
    items.add({"customer": "c1", "product": "apple", "quantity": 2}, {"customer": "c1", "product": "pear", "quantity": 1})
    items.add({"customer": "c1", "product": "apple", "quantity": 3}, {"customer": "c1", "product": "pear", "quantity": 0})
    run("basket", items, sink, examples.quantities_per_product, tmp_path / "ck", spark)
    assert {b: sorted((r["product"], r["quantity"]) for r in rows) for b, rows in sink.batches.items()} == {
        0: [("*", 2), ("apple", 2), ("pear", 1)], 1: [("*", 1), ("apple", 5), ("pear", 0)]}


def started(name, source, sink, transform, checkpoint, spark):
    """A processing-time query: in ProcessingTime mode Spark runs a batch at
    every trigger, data or not (timers and TTL need them), so it is never
    idle and ``processAllAvailable`` would wait for good: see ``processed``."""
    pipeline = Pipeline(name, source, sink, transform=transform, state_backend="rocksdb",
                        checkpoint_interval="200 ms")
    return pipeline.start(spark, str(checkpoint))


def processed(query, files: int, timeout: float = 60) -> int:
    """The batch that read the source's ``files``-th file, once Spark reports it committed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for progress in query.recentProgress:
            end = progress["sources"][0]["endOffset"]
            end = json.loads(end) if isinstance(end, str) else end
            if progress["numInputRows"] > 0 and end and end["logOffset"] == files - 1:
                return progress["batchId"]
        assert query.exception() is None, query.exception()
        time.sleep(0.05)
    raise TimeoutError(f"file {files} was not processed within {timeout} s")


def test_state_ttl_forgets_a_key_after_a_quiet_spell(spark, examples, json_files, gathered, tmp_path):
    events, sink = json_files("id string"), gathered()
    query = started("dedupe", events, sink, lambda df: examples.first_seen_within(df, "2 seconds"),
                    tmp_path / "ck", spark)
    try:
        arrivals = []
        for pause in (0, 0, 3.0):
            time.sleep(pause)
            events.add({"id": "a"}, {"id": "a"})
            arrivals.append(processed(query, events.count))
    finally:
        query.stop()
    stamps = {b: Checkpoint(str(tmp_path / "ck")).batch(b).timestamp_ms for b in arrivals}
    # Expected from the batches' own processing times: an id passes when its
    # state (written when it last passed) is older than the TTL.
    expected, passed_at = [], None
    for batch in arrivals:
        if passed_at is None or stamps[batch] - passed_at > 2000:
            expected.append((batch, "a", 1))
            passed_at = stamps[batch]
    got = [(b, r["id"], r["duplicates_dropped"]) for b, rows in sorted(sink.batches.items()) for r in rows]
    assert got == expected
    assert len(expected) == 2 or stamps[arrivals[1]] - stamps[arrivals[0]] > 2000  # the middle one was dropped


def test_a_ttl_of_zero_or_less_is_refused_naming_the_state(examples):
    with pytest.raises(StateTTLError, match="TTL of seen = '0 s': a state TTL must be greater than zero"):
        examples.FirstSeenWithin("0 s")
    with pytest.raises(StateTTLError, match="TTL of seen = 'soon'"):
        examples.FirstSeenWithin("soon")


IDLE_S = 10


def test_a_processing_time_timer_fires_once_a_key_is_idle(spark, examples, json_files, gathered, tmp_path):
    events, sink = json_files("user string"), gathered()
    # Idle after 10 s: long enough that u1's second batch lands before its
    # timer fires however slow a loaded machine runs the first one.
    query = started("idle", events, sink, lambda df: examples.idle_alerts(df, f"{IDLE_S} seconds"),
                    tmp_path / "ck", spark)
    try:
        events.add({"user": "u1"}, {"user": "u1"}, {"user": "u2"})
        first = processed(query, 1)
        events.add({"user": "u1"})  # u1 again: its timer moves on
        processed(query, 2)
        deadline = time.monotonic() + 30 + 2 * IDLE_S
        while sum(len(rows) for rows in list(sink.batches.values())) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
    alerts = {r["user"]: (b, r["events"], r["idle_since_ms"]) for b, rows in sink.batches.items() for r in rows}
    assert sorted(alerts) == ["u1", "u2"] and alerts["u1"][1] == 3 and alerts["u2"][1] == 1
    checkpoint = Checkpoint(str(tmp_path / "ck"))
    for batch, _, idle_since in alerts.values():  # fired in a batch at least IDLE_S after the key's last event
        assert checkpoint.batch(batch).timestamp_ms >= idle_since + IDLE_S * 1000 and batch > first
    assert alerts["u1"][2] > alerts["u2"][2]


def test_an_event_time_timer_fires_when_the_watermark_passes(spark, examples, json_files, gathered, tmp_path):
    events, sink = json_files("key string, ts timestamp"), gathered()
    at = lambda seconds: datetime.fromtimestamp(1_700_000_000 + seconds, timezone.utc).isoformat()  # noqa: E731
    events.add({"key": "a", "ts": at(0)}, {"key": "b", "ts": at(10)})
    events.add({"key": "a", "ts": at(30)}, {"key": "c", "ts": at(100)})
    run("closing", events, sink, lambda df: examples.closed_after_event_time(df, "1 minute"), tmp_path / "ck", spark)
    closed = sorted((r["key"], r["events"], r["last_ms"] // 1000 - 1_700_000_000)
                    for rows in sink.batches.values() for r in rows)
    # The watermark reaches 100 s: a (last event 30 s) and b (10 s) close, c (100 s) stays open.
    assert closed == [("a", 2, 30), ("b", 1, 10)]
    assert all(not rows for b, rows in sink.batches.items() if b < 2)  # nothing before the watermark moved


def test_a_count_per_key_and_minute_is_emitted_once_the_watermark_passes_the_minute(
        spark, examples, json_files, gathered, tmp_path):
    events, sink = json_files("key string, ts timestamp"), gathered("append")
    at = lambda seconds: datetime.fromtimestamp(1_700_000_040 + seconds, timezone.utc).isoformat()  # noqa: E731
    # 1_700_000_040 is the start of a minute.
    events.add({"key": "a", "ts": at(1)}, {"key": "a", "ts": at(59)}, {"key": "b", "ts": at(30)})
    events.add({"key": "a", "ts": at(61)}, {"key": "b", "ts": at(150)})
    run("per_minute", events, sink, examples.per_minute_counts, tmp_path / "ck", spark)
    counts = sorted((r["key"], int(r["minute"].timestamp()) - 1_700_000_040, r["events"]) for r in sink.rows())
    # The watermark reaches 150 s: minutes 0 and 1 are final, minute 2 (b at 150 s) is not.
    assert counts == [("a", 0, 2), ("a", 60, 1), ("b", 0, 1)]
