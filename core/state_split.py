"""How operator state is handed to a new set of instances: pure functions.

Operator state (Flink's list and union state) belongs to an instance of a
source or sink, not to a key. When the next batch's instances start, each
gets a share of what the last instances left:

- **list**: the elements are redistributed. With the same parallelism,
  instance p gets what instance p left; otherwise the parts are
  concatenated in instance order and cut into k contiguous runs whose sizes
  differ by at most one (``even_split``).
- **union**: every instance gets the whole concatenation (``union``).

Sources use them through ``eoskit.connectors.source_state``, two-phase sinks
through ``eoskit.twophase.operator_state``; they live here, at the bottom of
the import graph, because the protocol (``twophase``) may not import the
connectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeVar

T = TypeVar("T")

#: The kinds of operator state.
LIST: Literal["list"] = "list"
UNION: Literal["union"] = "union"
KINDS = (LIST, UNION)


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"the number of instances must be a positive whole number, not {k!r}")


def even_split(elements: Sequence[T], k: int) -> list[list[T]]:
    """``elements`` in order, cut into ``k`` contiguous sublists whose sizes
    differ by at most one (the first ones take the extra elements)."""
    _check_k(k)
    size, extra = divmod(len(elements), k)
    out, start = [], 0
    for index in range(k):
        end = start + size + (1 if index < extra else 0)
        out.append(list(elements[start:end]))
        start = end
    return out


def union(elements: Sequence[T], k: int) -> list[list[T]]:
    """Every one of ``k`` instances gets all of ``elements`` (its own copy)."""
    _check_k(k)
    return [list(elements) for _ in range(k)]


def redistribute(parts: Sequence[Sequence[T]], k: int, kind: str) -> list[list[T]]:
    """The shares of ``k`` new instances, given the ``parts`` the previous
    instances left (one per instance, in instance order):

    - no parts (nothing checkpointed yet): every share is empty;
    - ``list`` with ``len(parts) == k``: instance p gets part p, unchanged;
    - ``list`` otherwise: the concatenation, split evenly (``even_split``);
    - ``union``: the whole concatenation, to every instance.
    """
    _check_k(k)
    if kind not in KINDS:
        raise ValueError(f"operator state kind {kind!r}: expected one of {', '.join(KINDS)}")
    if not parts:
        return [[] for _ in range(k)]
    if kind == LIST and len(parts) == k:
        return [list(part) for part in parts]
    whole = [element for part in parts for element in part]
    return union(whole, k) if kind == UNION else even_split(whole, k)
