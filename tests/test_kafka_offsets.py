"""Offset handling of the Kafka source: pure functions, no broker."""

import json

import pytest

from eoskit.connectors.kafka.offsets import (
    MinOffsetsGate,
    MinPauseGate,
    OffsetRange,
    Timestamps,
    available,
    from_json_dict,
    parse_offsets_option,
    plan_ranges,
    rate_limit,
    resolve_spec,
    resolve_timestamps,
    split_ranges,
    split_reserved,
    to_json,
    to_json_dict,
)
from eoskit.core.options import OptionError


def test_json_round_trip_keeps_spark_shape():
    offsets = {("orders", 1): 17, ("orders", 0): 42, ("audit", 3): 5}
    data = to_json_dict(offsets)
    assert data == {"audit": {"3": 5}, "orders": {"0": 42, "1": 17}}
    assert from_json_dict(json.loads(json.dumps(data))) == offsets


def test_keys_sorted_topics_then_partitions_numerically():
    offsets = {("b", 10): 1, ("b", 2): 1, ("a", 0): 1}
    assert to_json(offsets) == '{"a":{"0":1},"b":{"2":1,"10":1}}'
    # Insertion order must not matter: Spark compares offset JSON text.
    assert to_json(dict(reversed(list(offsets.items())))) == to_json(offsets)


PIN = {"name": "rules", "version": 7, "offsets": {"fraud-rules": {"0": 415}}, "digest": "sha256:9f"}


def test_reserved_entries_follow_the_topics_and_are_not_offsets():
    offsets = {("payments", 1): 1187, ("payments", 0): 1200}
    data = to_json_dict(offsets, {"@broadcast": PIN})
    # Topics first (sorted), then the pin: the same state gives the same text.
    assert json.dumps(data, separators=(",", ":")) == (
        '{"payments":{"0":1200,"1":1187},"@broadcast":{"name":"rules","version":7,'
        '"offsets":{"fraud-rules":{"0":415}},"digest":"sha256:9f"}}')
    restored = json.loads(json.dumps(data))
    assert from_json_dict(restored) == offsets
    assert split_reserved(restored) == ({"payments": {"0": 1200, "1": 1187}}, {"@broadcast": PIN})


def test_a_reserved_key_must_start_with_at():
    with pytest.raises(ValueError, match="broadcast"):
        to_json_dict({}, {"broadcast": PIN})


def test_checkpoint_cli_prints_the_pin_and_leaves_it_out_of_offset_rows():
    from eoskit.runtime.cli.checkpoint import format_offsets, offset_rows

    source = {"payments": {"0": 1200}, "@broadcast": PIN}
    assert format_offsets([source]) == "payments 0:1200; rules v7 fraud-rules 0:415"
    assert offset_rows([source]) == [(0, "payments", "0", 1200)]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('{"t": {"0": 1', "nor valid JSON"),
        ('["t"]', "expected a JSON object"),
        ('{"t": [1]}', "must map partition numbers"),
        ('{"t": {"x": 1}}', "partition 'x'"),
        ('{"t": {"0": "1"}}', "whole number"),
        ('{"t": {"0": -3}}', "invalid"),
    ],
)
def test_malformed_offsets_name_the_option(text, fragment):
    with pytest.raises(OptionError) as err:
        parse_offsets_option(text, "startingOffsets")
    assert "startingOffsets" in str(err.value)
    assert fragment in str(err.value)


def test_spec_resolution_uses_sentinels_and_refuses_unknown_partitions():
    parts = [("t", 0), ("t", 1)]
    earliest = {("t", 0): 3, ("t", 1): 0}
    latest = {("t", 0): 10, ("t", 1): 20}
    spec = parse_offsets_option('{"t": {"0": -2, "1": 7}}', "startingOffsets")
    assert resolve_spec(spec, parts, earliest, latest, "startingOffsets", "latest") == {
        ("t", 0): 3,
        ("t", 1): 7,
    }
    assert resolve_spec("latest", parts, earliest, latest, "x", "latest") == latest
    with pytest.raises(OptionError, match="t-5"):
        resolve_spec({("t", 5): 1}, parts, earliest, latest, "startingOffsets", "latest")


def test_rate_limit_shares_in_proportion_to_backlog():
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 300, ("t", 1): 200}
    end = rate_limit(start, latest, 100)
    assert end == {("t", 0): 75, ("t", 1): 125}
    assert sum(end[tp] - start[tp] for tp in start) <= 100
    assert rate_limit(start, latest, None) == latest
    assert rate_limit(start, latest, 10_000) == latest


def test_rate_limit_moves_small_partitions_at_least_one():
    start = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 1000, ("t", 1): 1}
    end = rate_limit(start, latest, 10)
    assert end[("t", 1)] == 1


def test_plan_ranges_new_partition_reads_from_earliest():
    ranges, losses = plan_ranges({("t", 0): 5}, {("t", 0): 9, ("t", 1): 4}, {("t", 0): 0, ("t", 1): 0})
    assert ranges == [OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 0, 4)]
    assert losses == []


def test_plan_ranges_reports_retention_loss_and_skips_to_earliest():
    ranges, losses = plan_ranges({("t", 0): 5}, {("t", 0): 20}, {("t", 0): 12})
    assert ranges == [OffsetRange("t", 0, 12, 20)]
    assert len(losses) == 1 and "5 to 11" in losses[0].message


def test_plan_ranges_reports_recreated_topic():
    ranges, losses = plan_ranges({("t", 0): 50}, {("t", 0): 8}, {("t", 0): 0})
    assert ranges == [OffsetRange("t", 0, 0, 8)]
    assert "went back from 50 to 8" in losses[0].message


def test_plan_ranges_reports_deleted_partition_and_new_partition_with_deleted_head():
    _, losses = plan_ranges({("gone", 0): 3}, {("t", 0): 8}, {("t", 0): 2})
    messages = " ".join(loss.message for loss in losses)
    assert "gone-0 was deleted" in messages
    assert "records 0 to 1 were deleted" in messages


def test_empty_ranges_are_not_planned():
    ranges, _ = plan_ranges({("t", 0): 5}, {("t", 0): 5}, {("t", 0): 0})
    assert ranges == []


def test_split_ranges_covers_every_offset_once():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 10, 13)]
    split = split_ranges(ranges, 8)
    assert len(split) >= 8
    for original in ranges:
        pieces = sorted(r for r in split if r.partition == original.partition)
        assert pieces[0].start == original.start and pieces[-1].end == original.end
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 2) == ranges


def test_max_records_per_partition_caps_every_task_then_min_partitions_applies():
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 10, 13)]
    capped = split_ranges(ranges, None, max_records=300)
    assert [r.size for r in capped if r.partition == 0] == [250, 250, 250, 250]
    assert [r for r in capped if r.partition == 1] == [OffsetRange("t", 1, 10, 13)]
    assert all(r.size <= 300 for r in capped)
    both = split_ranges(ranges, 10, max_records=300)
    assert len(both) > len(capped) and all(r.size <= 300 for r in both)  # minPartitions is a hint
    assert sum(r.size for r in both) == 1003


def test_available_counts_offsets_past_the_start():
    assert available({("t", 0): 5, ("t", 1): 9}, {("t", 0): 8, ("t", 1): 9, ("t", 2): 4}) == 7


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_min_offsets_gate_waits_for_enough_offsets_or_the_delay():
    clock = FakeClock()
    gate = MinOffsetsGate(10, 60.0, clock)
    assert gate.admit(0)  # the first trigger always passes, as in Spark
    clock.now += 5
    assert not gate.admit(3)  # too few, delay not over
    clock.now += 5
    assert gate.admit(10)  # enough
    clock.now += 59
    assert not gate.admit(9)
    clock.now += 1  # 60 s since the last admitted trigger
    assert gate.admit(1)
    clock.now += 1
    assert not gate.admit(1)


def test_min_pause_gate_holds_triggers_until_the_pause_after_the_last_commit():
    clock = FakeClock()
    commits: list[float | None] = [None]
    gate = MinPauseGate(3.0, lambda: commits[0], clock)
    assert gate.left() == 0  # nothing committed yet: the first batch starts at once
    commits[0] = clock.now  # a batch ends now
    assert gate.left() == 3.0
    clock.now += 2.5
    assert gate.left() == pytest.approx(0.5)
    clock.now += 0.5
    assert gate.left() == 0
    commits[0] = clock.now + 10  # a clock ahead of ours (another host) counts as now
    assert gate.left() == 3.0


def test_timestamps_need_every_partition_read_and_no_other():
    parts = [("t", 0), ("t", 1)]
    assert Timestamps("startingTimestamp", everywhere=7).request(parts) == {("t", 0): 7, ("t", 1): 7}
    spec = Timestamps("startingOffsetsByTimestamp", per_partition={("t", 0): 5})
    with pytest.raises(OptionError, match="gives no timestamp for t-1"):
        spec.request(parts)
    spec = Timestamps("startingOffsetsByTimestamp", per_partition={("t", 0): 5, ("t", 1): 5, ("t", 9): 5})
    with pytest.raises(OptionError, match="names partitions that do not exist: t-9"):
        spec.request(parts)


def test_start_timestamp_without_a_later_record_fails_or_starts_latest_by_strategy():
    spec = Timestamps("startingTimestamp", everywhere=50)
    requested = {("t", 0): 50, ("t", 1): 50}
    found = {("t", 0): 4, ("t", 1): None}
    latest = {("t", 0): 9, ("t", 1): 12}
    with pytest.raises(OptionError) as err:
        resolve_timestamps(spec, requested, found, latest, is_start=True)
    assert "option 'startingTimestamp'" in str(err.value)
    assert "t-1 (timestamp 50)" in str(err.value)
    assert "startingOffsetsByTimestampStrategy=latest" in str(err.value)
    assert resolve_timestamps(spec, requested, found, latest, True, "latest") == {("t", 0): 4, ("t", 1): 12}
    # an end with no later record reads to the latest offset
    assert resolve_timestamps(spec, requested, found, latest, is_start=False) == {("t", 0): 4, ("t", 1): 12}


def test_min_partitions_rounds_half_up_as_spark():
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 10)]
    assert len(split_ranges(ranges, 5)) == 6  # 2.5 tasks per range: 3 each, as Spark
