"""The order peers run in, round after round: shared by ``peers.py`` (the
scripts of a round) and ``harness.run_benchmark`` (the peers inside one
script, ``--rotate``), so that nothing always runs first, nor always right
after the same thing. Pure: imports nothing."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def rotated(items: list[T], shift: int) -> list[T]:
    """``items`` rotated left by ``shift`` places (round ``shift``, from 0)."""
    shift = shift % len(items) if items else 0
    return items[shift:] + items[:shift]
