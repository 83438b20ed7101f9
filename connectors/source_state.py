"""Operator state of a source plug-in: the offsets JSON's reserved keys, and
how state is split over a batch's tasks.

A Python streaming source's state is the offset JSON Spark stores verbatim
in its offset log (one line per source, a dict of primitives). eoskit-kafka
keeps Spark's Kafka shape, ``{"topic": {"0": 42}}``, and reserves keys that
start with ``@`` for state that is not a topic's offsets (``@broadcast``):
topic names are ``[a-zA-Z0-9._-]``, so none starts so. ``split_reserved``
separates the two before the offsets are read.

The offsets are list state held by the driver: the planner hands them to
tasks anew every batch, which is the even split (``even_split``); a value
every task needs (the broadcast pin) is union state (``union``). Two-phase
sinks redistribute their writers' state with the same functions
(``redistribute``; ``eoskit.twophase.operator_state``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eoskit.core.state_split import KINDS, LIST, UNION, even_split, redistribute, union

#: Keys of the offset JSON that start with this are not topics.
RESERVED_PREFIX = "@"


def split_reserved(offset_json_dict: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(plain, reserved)``: the offset JSON's topics, and its ``@`` entries,
    each in the order the JSON gave them (Spark compares offset JSON as
    text, so order is kept)."""
    if not isinstance(offset_json_dict, Mapping):
        raise TypeError(f"offset JSON must be an object, not {type(offset_json_dict).__name__}")
    plain: dict[str, Any] = {}
    reserved: dict[str, Any] = {}
    for key, value in offset_json_dict.items():
        (reserved if str(key).startswith(RESERVED_PREFIX) else plain)[key] = value
    return plain, reserved


__all__ = ["KINDS", "LIST", "RESERVED_PREFIX", "UNION", "even_split", "redistribute", "split_reserved",
           "union"]
