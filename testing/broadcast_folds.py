"""Folds for the broadcast state's tests, importable by name
(``broadcastFold=eoskit.testing.broadcast_folds:count_by_key``)."""

from __future__ import annotations

from typing import Any

from eoskit.connectors.kafka.broadcast_fold import BroadcastRecord


class CountByKey:
    """How many records each key had, tombstones included: a fold whose
    state ``latest`` could not give."""

    def initial(self) -> dict[str, int]:
        return {}

    def apply(self, state: dict[str, int], record: BroadcastRecord) -> dict[str, int]:
        key = (record.key or b"").decode("utf-8")
        return {**state, key: state.get(key, 0) + 1}


#: A Fold object.
count_by_key = CountByKey()


def make_count_by_key() -> CountByKey:
    """A function that returns a Fold."""
    return CountByKey()


class Sum:
    """The sum of the values read as integers: a state that is not a dict."""

    def initial(self) -> int:
        return 0

    def apply(self, state: int, record: BroadcastRecord) -> int:
        return state + int(record.value or b"0")


total = Sum()

#: Refused: a lambda.
as_lambda = lambda: CountByKey()  # noqa: E731

#: Refused: neither a Fold nor callable.
not_a_fold = 42


def returns_nothing() -> Any:
    return None


class NotJson:
    def initial(self) -> Any:
        return set()

    def apply(self, state: Any, record: BroadcastRecord) -> Any:
        return state | {record.offset}


not_json = NotJson()
