"""Two outputs of one job compared as multisets of rows.

A chaos run is exactly-once when its output holds the reference run's rows,
each as many times: order does not matter (Spark's tasks and a database's
scan order are not stable), multiplicity does (a replayed batch written
twice is the failure this looks for). So both outputs are counted with a
``collections.Counter`` over rows, and what does not cancel out is sorted
into:

- ``duplicated``: a row the chaos output holds more times than the
  reference (counted per extra copy);
- ``missing``: a row it holds fewer times, or not at all (per lacking copy);
- ``different``: with a ``key`` (the table's primary key, Kafka's key), a
  chaos row that is not in the reference at all, paired by its key with a
  lacking reference row: one row changed, rather than one missing plus one
  unexpected. Its example names the columns that differ;
- ``unexpected``: a chaos row that is not in the reference at all and pairs
  with nothing (every such row, when no key is given).

Rows are compared through :func:`canonical`, a hashable stand-in for each
value that keeps Python's equality (``1 == 1.0``, ``Decimal("1.0") ==
Decimal("1.00")``, an aware and a naive datetime differ) with three
changes: dicts, lists, sets (and numpy arrays, through ``tolist()``) become
:class:`Frozen` values, compared by content, a dict's items in any order;
every NaN (float or Decimal) equals every other, so that a NaN written twice
is a duplicate and not two different rows; and a value that is neither
hashable nor one of those is compared by its type and ``repr``. Examples
show the rows as they were given, not their canonical form.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

#: At most this many examples are kept of each kind of difference.
EXAMPLES = 10

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Frozen:
    """The hashable canonical form of a value that has none (a dict, a list,
    a set), or of one whose equality does not suit counting (NaN): ``kind``
    says which, ``items`` holds the canonical content (a dict's
    ``(key, value)`` pairs and a set's members sorted by their ``repr``)."""

    kind: str
    items: tuple[Any, ...]


_NAN = Frozen("nan", ())


def canonical(value: Any) -> Hashable:
    """A hashable stand-in for ``value``, equal for values that should count
    as the same row value (see the module's docstring)."""
    if value is None or isinstance(value, (str, bytes, bool, int)):
        return value
    if isinstance(value, float):
        return _NAN if math.isnan(value) else value
    if isinstance(value, Decimal):
        return _NAN if value.is_nan() else value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, tuple):
        return tuple(canonical(v) for v in value)
    if isinstance(value, Mapping):
        items = ((canonical(k), canonical(v)) for k, v in value.items())
        return Frozen("dict", tuple(sorted(items, key=lambda kv: repr(kv[0]))))
    if isinstance(value, (set, frozenset)):
        return Frozen("set", tuple(sorted((canonical(v) for v in value), key=repr)))
    if isinstance(value, list):
        return Frozen("list", tuple(canonical(v) for v in value))
    try:
        hash(value)
    except TypeError:
        tolist = getattr(value, "tolist", None)  # numpy arrays
        if callable(tolist):
            return canonical(tolist())
        return Frozen("repr", (type(value).__qualname__, repr(value)))
    try:
        if bool(value != value):  # numpy's float32 NaN and its kind
            return _NAN
    except Exception:  # noqa: BLE001 - a value whose != misbehaves is compared as it is
        pass
    return value


def canonical_row(row: Sequence[Any]) -> Row:
    return tuple(canonical(v) for v in row)


@dataclass(frozen=True)
class RowCount:
    """An example of a row counted differently: the row (as given) and how
    many times each output holds it."""

    row: Row
    reference: int
    chaos: int


@dataclass(frozen=True)
class Difference:
    """An example of a changed row: its key's values, the reference's row,
    the chaos run's row, and the names of the columns that differ."""

    key: Row
    reference: Row
    chaos: Row
    columns: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    """What a chaos run's output holds against the reference's: counts of
    rows (copies) per kind of difference, and up to :data:`EXAMPLES` examples
    of each. For the determinism check the second reference run stands on
    the ``chaos`` side."""

    columns: tuple[str, ...]
    key: tuple[str, ...]  # () when rows were not paired by a key
    reference_rows: int
    chaos_rows: int
    duplicated: int = 0
    missing: int = 0
    different: int = 0
    unexpected: int = 0
    duplicated_examples: tuple[RowCount, ...] = ()
    missing_examples: tuple[RowCount, ...] = ()
    different_examples: tuple[Difference, ...] = ()
    unexpected_examples: tuple[RowCount, ...] = ()

    @property
    def verdict(self) -> Literal["exact", "different"]:
        differences = self.duplicated + self.missing + self.different + self.unexpected
        return "exact" if differences == 0 else "different"

    @property
    def exact(self) -> bool:
        return self.verdict == "exact"

    def summary(self) -> str:
        """One line: ``exact: 20,000 rows`` or ``different: 120 duplicated,
        3 missing, 0 different of 20,000 reference rows`` (``, N
        unexpected`` is added when there are any)."""
        if self.exact:
            return f"exact: {self.reference_rows:,} rows"
        unexpected = f", {self.unexpected:,} unexpected" if self.unexpected else ""
        return (f"different: {self.duplicated:,} duplicated, {self.missing:,} missing, "
                f"{self.different:,} different{unexpected} of {self.reference_rows:,} reference rows")


def _positions(columns: tuple[str, ...], key: Sequence[str] | None) -> tuple[int, ...]:
    if isinstance(key, str):
        raise TypeError("key is a sequence of column names, not one string")
    positions = []
    for name in key or ():
        if name not in columns:
            raise ValueError(f"key column {name!r} is not a column of the output "
                             f"(columns: {', '.join(columns)})")
        positions.append(columns.index(name))
    return tuple(positions)


def _count(rows: Iterable[Sequence[Any]], width: int, side: str) -> tuple[Counter[Row], dict[Row, Row]]:
    """The canonical rows counted, and the first row as given for each."""
    counts: Counter[Row] = Counter()
    given: dict[Row, Row] = {}
    for number, row in enumerate(rows):
        row = tuple(row)
        if len(row) != width:
            raise ValueError(f"{side} row {number} has {len(row)} values for {width} columns")
        canon = canonical_row(row)
        counts[canon] += 1
        given.setdefault(canon, row)
    return counts, given


def _pair(lacking: Counter[Row], extra: Counter[Row], key: tuple[int, ...]) -> list[tuple[Row, Row]]:
    """Lacking reference rows paired with extra chaos rows of the same key,
    one copy with one copy; within a key both sides are taken in order of
    their ``repr``, so that the pairing does not depend on the outputs'
    order. No key, no pairs."""
    if not key:
        return []
    by_key: dict[Row, tuple[list[Row], list[Row]]] = defaultdict(lambda: ([], []))
    for side, counts in enumerate((lacking, extra)):
        for row, n in counts.items():
            by_key[tuple(row[i] for i in key)][side].extend([row] * n)
    pairs = []
    for reference, chaos in by_key.values():
        pairs += zip(sorted(reference, key=repr), sorted(chaos, key=repr))
    return pairs


def _differing(columns: tuple[str, ...], a: Row, b: Row) -> tuple[str, ...]:
    return tuple(name for name, x, y in zip(columns, a, b) if x != y)


def compare(reference: Iterable[Sequence[Any]], chaos: Iterable[Sequence[Any]],
            columns: Sequence[str], key: Sequence[str] | None = None) -> Comparison:
    """Compare two outputs of the same columns as multisets of rows (see the
    module's docstring); ``key`` names the columns that pair a changed row
    with its reference. Raises ``ValueError`` for a row of the wrong width or
    a key column that is not a column."""
    columns = tuple(columns)
    key_at = _positions(columns, key)
    ref_counts, ref_given = _count(reference, len(columns), "reference")
    chaos_counts, chaos_given = _count(chaos, len(columns), "chaos")

    lacking = ref_counts - chaos_counts  # Counter subtraction keeps positive counts only
    surplus = chaos_counts - ref_counts
    duplicated = Counter({row: n for row, n in surplus.items() if row in ref_counts})
    extra = Counter({row: n for row, n in surplus.items() if row not in ref_counts})
    pairs = _pair(lacking, extra, key_at)
    missing = lacking - Counter(reference for reference, _ in pairs)
    unexpected = extra - Counter(chaos for _, chaos in pairs)

    def counted(rows: Counter[Row], given: dict[Row, Row]) -> tuple[RowCount, ...]:
        shown = heapq.nsmallest(EXAMPLES, rows, key=repr)
        return tuple(RowCount(given[r], ref_counts[r], chaos_counts[r]) for r in shown)

    shown_pairs = heapq.nsmallest(EXAMPLES, set(pairs), key=repr)
    return Comparison(
        columns=columns, key=tuple(key or ()),
        reference_rows=sum(ref_counts.values()), chaos_rows=sum(chaos_counts.values()),
        duplicated=sum(duplicated.values()), missing=sum(missing.values()),
        different=len(pairs), unexpected=sum(unexpected.values()),
        duplicated_examples=counted(duplicated, ref_given),
        missing_examples=counted(missing, ref_given),
        different_examples=tuple(
            Difference(tuple(ref_given[r][i] for i in key_at), ref_given[r], chaos_given[c],
                       _differing(columns, r, c))
            for r, c in shown_pairs),
        unexpected_examples=counted(unexpected, chaos_given),
    )


def _project(rows: Counter[Row], keep: Sequence[int]) -> Counter[Row]:
    projected: Counter[Row] = Counter()
    for row, n in rows.items():
        projected[tuple(row[i] for i in keep)] += n
    return projected


def nondeterministic_columns(reference_a: Iterable[Sequence[Any]], reference_b: Iterable[Sequence[Any]],
                             columns: Sequence[str], key: Sequence[str] | None = None) -> list[str]:
    """The smallest set of columns whose removal makes two runs' outputs
    (both without faults) equal as multisets: ``[]`` when they are equal
    already. Single columns are tried first, then pairs, each in column
    order, the first that works is the answer. Beyond pairs it gives up:
    with a ``key``, every column that differs between rows paired by their
    key is returned (in column order); without one, ``[]``.

    Only the rows that do not cancel out are projected: removing columns
    from both outputs makes them equal exactly when it makes their
    leftovers equal, so the search costs the differences, not the output.
    """
    columns = tuple(columns)
    key_at = _positions(columns, key)
    a, _ = _count(reference_a, len(columns), "first reference")
    b, _ = _count(reference_b, len(columns), "second reference")
    only_a, only_b = a - b, b - a
    if not only_a and not only_b:
        return []
    everything = range(len(columns))
    for size in (1, 2):
        for dropped in itertools.combinations(everything, size):
            keep = [i for i in everything if i not in dropped]
            if _project(only_a, keep) == _project(only_b, keep):
                return [columns[i] for i in dropped]
    differing = {name for x, y in _pair(only_a, only_b, key_at) for name in _differing(columns, x, y)}
    return [name for name in columns if name in differing]
