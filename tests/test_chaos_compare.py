"""The chaos command's comparison (issue 24): two outputs as multisets of
rows, duplicates and losses counted per copy, changed rows paired by a key,
and the columns that make a job non-deterministic found."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from eoskit.runtime.devtools.chaos.compare import (EXAMPLES, Difference, RowCount, canonical, compare,
                                          nondeterministic_columns)

COLUMNS = ("id", "name", "amount")
ROWS = [(i, f"n{i}", Decimal(i) / 4) for i in range(100)]


def test_same_rows_in_another_order_are_exact():
    result = compare(ROWS, list(reversed(ROWS)), COLUMNS)
    assert result.verdict == "exact" and result.exact
    assert (result.duplicated, result.missing, result.different, result.unexpected) == (0, 0, 0, 0)
    assert result.summary() == "exact: 100 rows"


def test_duplicates_are_counted_per_extra_copy():
    """Counter semantics: a row twice in the reference and four times in the
    chaos output is 2 duplicated copies, not 1 row nor 4."""
    reference = ROWS + [ROWS[0]]
    chaos = ROWS + [ROWS[0]] * 3 + [ROWS[5]]
    result = compare(reference, chaos, COLUMNS)
    assert result.verdict == "different"
    assert result.duplicated == 3 and result.missing == 0 and result.unexpected == 0
    assert set(result.duplicated_examples) == {RowCount(ROWS[0], 2, 4), RowCount(ROWS[5], 1, 2)}
    assert result.reference_rows == 101 and result.chaos_rows == 104


def test_missing_counts_lacking_copies_and_absent_rows():
    reference = ROWS + [ROWS[1]] * 2
    chaos = ROWS[2:] + [ROWS[1]]
    result = compare(reference, chaos, COLUMNS)
    assert result.missing == 3  # ROWS[0] once, ROWS[1] two of three copies
    assert set(result.missing_examples) == {RowCount(ROWS[0], 1, 0), RowCount(ROWS[1], 3, 1)}
    assert result.summary() == "different: 0 duplicated, 3 missing, 0 different of 102 reference rows"


def test_without_a_key_a_changed_row_is_missing_and_unexpected():
    chaos = ROWS[1:] + [(0, "n0", Decimal("9"))]
    result = compare(ROWS, chaos, COLUMNS)
    assert (result.missing, result.unexpected, result.different) == (1, 1, 0)
    assert result.unexpected_examples == (RowCount((0, "n0", Decimal("9")), 0, 1),)
    assert result.summary().endswith("0 different, 1 unexpected of 100 reference rows")


def test_a_key_pairs_a_changed_row_and_names_the_differing_column():
    chaos = ROWS[1:] + [(0, "n0", Decimal("9"))]
    result = compare(ROWS, chaos, COLUMNS, key=["id"])
    assert (result.missing, result.unexpected, result.different, result.duplicated) == (0, 0, 1, 0)
    assert result.different_examples == (
        Difference(key=(0,), reference=ROWS[0], chaos=(0, "n0", Decimal("9")), columns=("amount",)),)
    assert result.key == ("id",)


def test_a_key_leaves_unpaired_rows_missing_or_unexpected():
    chaos = ROWS[1:] + [(1000, "new", Decimal(1))]
    result = compare(ROWS, chaos, COLUMNS, key=["id"])
    assert (result.missing, result.unexpected, result.different) == (1, 1, 0)


def test_a_duplicate_is_not_taken_for_a_changed_row():
    """An extra copy of a row the reference has is a duplicate even when a
    row of its key is lacking: it changed nothing, it was written twice."""
    reference = [(1, "a", 1), (1, "b", 2)]
    chaos = [(1, "a", 1), (1, "a", 1)]
    result = compare(reference, chaos, ("k", "v", "n"), key=["k"])
    assert (result.duplicated, result.missing, result.different) == (1, 1, 0)


def test_examples_are_capped_and_do_not_depend_on_row_order():
    chaos = ROWS + ROWS[:30]
    first = compare(ROWS, chaos, COLUMNS)
    second = compare(list(reversed(ROWS)), list(reversed(chaos)), COLUMNS)
    assert first.duplicated == 30
    assert len(first.duplicated_examples) == EXAMPLES
    assert first.duplicated_examples == second.duplicated_examples


def test_unhashable_and_awkward_values():
    """dicts (in any key order), lists, bytes, NaN, datetimes and None count
    like any value; a NaN equals a NaN, so a NaN row written twice is a
    duplicate, not an unexpected row."""
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    columns = ("payload", "tags", "raw", "score", "at", "note")
    reference = [({"a": 1, "b": [1, 2]}, [1, 2], b"\x00", float("nan"), at, None)]
    chaos = [({"b": [1, 2], "a": 1}, [1, 2], bytearray(b"\x00"), float("nan"), at, None)] * 2
    result = compare(reference, chaos, columns)
    assert (result.duplicated, result.missing, result.unexpected) == (1, 0, 0)
    assert result.duplicated_examples[0].row == reference[0]  # the row as given, not its canonical form
    changed = compare(reference, [({"a": 1, "b": [2, 1]}, [1, 2], b"\x00", float("nan"), at, None)],
                      columns)
    assert (changed.missing, changed.unexpected) == (1, 1)


def test_canonical_forms():
    assert canonical({"x": [1, {2}]}) == canonical({"x": [1, {2}]})
    assert canonical([1, 2]) != canonical((1, 2))
    assert canonical(Decimal("NaN")) == canonical(float("nan"))
    hash(canonical({"x": [1, {2}]}))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="key column 'nope'"):
        compare(ROWS, ROWS, COLUMNS, key=["nope"])
    with pytest.raises(ValueError, match="chaos row 1 has 2 values for 3 columns"):
        compare(ROWS, [ROWS[0], (1, "x")], COLUMNS)


def test_nondeterministic_column_found():
    first = [(i, f"n{i}", f"2026-01-01T00:00:{i % 60:02d}") for i in range(50)]
    second = [(i, f"n{i}", f"2026-01-01T01:00:{i % 60:02d}") for i in range(50)]
    assert nondeterministic_columns(first, second, ("id", "name", "ts")) == ["ts"]
    assert nondeterministic_columns(first, list(reversed(first)), ("id", "name", "ts")) == []


def test_nondeterministic_pair_found():
    first = [(i, i * 2, i * 3) for i in range(20)]
    second = [(i, i * 2 + 1, i * 3 + 1) for i in range(20)]
    assert nondeterministic_columns(first, second, ("id", "rnd", "ts")) == ["rnd", "ts"]


def test_nondeterministic_gives_up_after_pairs():
    columns = ("id", "a", "b", "c")
    first = [(i, i, i, i) for i in range(10)]
    second = [(i, -i - 1, -i - 1, -i - 1) for i in range(10)]
    assert nondeterministic_columns(first, second, columns) == []
    assert nondeterministic_columns(first, second, columns, key=["id"]) == ["a", "b", "c"]
