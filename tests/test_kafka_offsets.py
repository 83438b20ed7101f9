"""Offset handling of the Kafka source: pure functions, no broker."""

import json

import pytest

from eoskit.connectors.kafka.offsets import (
    OffsetRange,
    from_json_dict,
    parse_offsets_option,
    plan_ranges,
    rate_limit,
    resolve_spec,
    split_ranges,
    to_json,
    to_json_dict,
)
from eoskit.connectors.options import OptionError


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
