"""Broadcast folds (connectors/kafka/broadcast_fold.py): pure, no Kafka."""

from __future__ import annotations

import json
import random

import pytest

from eoskit.connectors.kafka.broadcast_fold import (
    LATEST,
    BroadcastRecord,
    BroadcastRecordError,
    BroadcastStateError,
    BroadcastTooLarge,
    Fold,
    LatestEntry,
    canonical_json,
    check_size,
    fold,
    normalise_spec,
    order,
    resolve_fold,
)
from eoskit.core.options import OptionError
from eoskit.testing import broadcast_folds
from eoskit.twophase.verdicts import Verdict, verdict_of


def rec(key, value, partition=0, offset=0, ts=None, topic="rules"):
    key = key.encode() if isinstance(key, str) else key
    value = value.encode() if isinstance(value, str) else value
    return BroadcastRecord(key, value, partition, offset, ts, topic=topic)


def test_latest_keeps_the_last_value_per_key_and_where_it_was_read():
    records = [rec("a", "1", 0, 0, 10), rec("b", "1", 1, 0, 11), rec("a", "2", 0, 5, 12)]
    state = fold(LATEST.initial(), records, LATEST)
    assert state == {b"a": LatestEntry(b"2", 0, 5, 12), b"b": LatestEntry(b"1", 1, 0, 11)}


def test_latest_tombstone_removes_the_key_and_a_later_value_brings_it_back():
    state = fold({}, [rec("a", "1", 0, 0), rec("b", "1", 0, 1), rec("a", None, 0, 2)], LATEST)
    assert set(state) == {b"b"}
    state = fold(state, [rec("a", "3", 0, 3)], LATEST)
    assert state[b"a"].value == b"3"
    # A tombstone for a key never seen is no error and changes nothing.
    assert fold(state, [rec("zz", None, 0, 4)], LATEST) == state


def test_fold_orders_by_partition_then_offset_whatever_the_input_order():
    records = [rec("k", str(i), i % 3, i) for i in range(30)]
    shuffled = records[:]
    random.Random(7).shuffle(shuffled)
    assert order(shuffled) == sorted(records, key=lambda r: (r.partition, r.offset))
    # The last partition's last offset wins, not the last record given.
    assert fold({}, shuffled, LATEST)[b"k"] == LatestEntry(b"29", 2, 29, None)


def test_fold_leaves_the_given_state_unchanged():
    before = {b"a": LatestEntry(b"1", 0, 0, None)}
    snapshot = dict(before)
    after = fold(before, [rec("a", None, 0, 1), rec("b", "2", 0, 2)], LATEST)
    assert before == snapshot and after == {b"b": LatestEntry(b"2", 0, 2, None)}
    assert LATEST.apply(before, rec("c", "3", 0, 3)) is not before and before == snapshot


def test_latest_refuses_a_null_key_naming_topic_partition_offset():
    with pytest.raises(BroadcastRecordError, match="topic rules partition 2 offset 41") as info:
        fold({}, [rec(None, "x", 2, 41)], LATEST)
    assert "key" in str(info.value)
    assert verdict_of(info.value) is Verdict.PERMANENT


@pytest.mark.parametrize("spec", ["eoskit.testing.broadcast_folds:count_by_key",
                                  "eoskit.testing.broadcast_folds:make_count_by_key",
                                  "eoskit.testing.broadcast_folds:CountByKey"])
def test_user_fold_by_name_object_factory_or_class(spec):
    chosen = resolve_fold(spec)
    assert isinstance(chosen, Fold) and isinstance(chosen, broadcast_folds.CountByKey)
    state = fold(chosen.initial(), [rec("a", "1", 0, 1), rec("a", None, 0, 2), rec("b", "1", 1, 0)],
                 chosen, spec)
    assert state == {"a": 2, "b": 1}


def test_latest_by_name_any_case():
    assert resolve_fold("latest") is LATEST and resolve_fold(" Latest ") is LATEST
    assert normalise_spec(" LATEST") == "latest"
    assert normalise_spec(" pkg.mod:f ") == "pkg.mod:f"


@pytest.mark.parametrize("spec, says", [
    ("no_such_module_xyz:fold", "no module no_such_module_xyz"),
    ("eoskit.testing.broadcast_folds:missing", "no attribute 'missing'"),
    ("eoskit.testing.broadcast_folds", "package.module:name"),
    ("eoskit.testing.broadcast_folds:", "package.module:name"),
    ("__main__:fold", "job file"),
    ("eoskit.testing.broadcast_folds:as_lambda", "lambda"),
    ("eoskit.testing.broadcast_folds:not_a_fold", "neither a Fold"),
    ("eoskit.testing.broadcast_folds:returns_nothing", "returned NoneType"),
])
def test_unusable_folds_are_refused_naming_option_and_spec(spec, says):
    with pytest.raises(OptionError) as info:
        resolve_fold(spec, option="broadcastFold")
    message = str(info.value)
    assert says in message and f"broadcastFold={spec!r}" in message
    assert verdict_of(info.value) is Verdict.BAD_INPUT


def test_user_fold_error_names_the_record_and_the_fold():
    class Boom:
        def initial(self):
            return {}

        def apply(self, state, record):
            raise KeyError("nope")

    with pytest.raises(KeyError) as info:
        fold({}, [rec("a", "1", 3, 9)], Boom(), "pkg:boom")
    assert any("partition 3 offset 9" in note and "pkg:boom" in note for note in info.value.__notes__)


def test_canonical_json_is_sorted_compact_and_refuses_non_json():
    state = {"b": [1, 2], "a": {"y": None, "x": "é"}}
    data = canonical_json(state)
    assert json.loads(data) == state
    assert data == canonical_json(json.loads(json.dumps(state, indent=4)))  # order and spacing ignored
    assert b" " not in data and data.index(b'"a"') < data.index(b'"b"')
    not_json = broadcast_folds.not_json
    with pytest.raises(BroadcastStateError, match="pkg:f"):
        canonical_json(fold(not_json.initial(), [rec("a", "1")], not_json), "pkg:f")
    with pytest.raises(BroadcastStateError):
        canonical_json({"x": float("nan")})


def test_size_limit_names_the_option():
    check_size(100, 100)
    with pytest.raises(BroadcastTooLarge, match=r"101 bytes, over broadcastMaxBytes=100"):
        check_size(101, 100)
    with pytest.raises(BroadcastTooLarge, match="myOption"):
        check_size(5, 4, option="myOption")
    assert verdict_of(BroadcastTooLarge) is Verdict.PERMANENT
