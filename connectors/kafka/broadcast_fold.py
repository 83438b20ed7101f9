"""Broadcast state's folds: how the records of a rules topic become one state.

Pure: no Spark, no Kafka client. The driver's source process folds the
records of ``[pin_v, pin_v+1)`` into ``S(v)`` to make ``S(v+1)``
(docs/design/broadcast-and-operator-state.md, 1.5 and 1.6); the store
(``broadcast_store``) writes and loads what it returns.

- A ``Fold`` is ``initial() -> S`` and ``apply(state, record) -> S``.
  ``apply`` must be pure (it returns the new state, it does not change the
  one it is given) and ``S`` must be JSON (it is stored as canonical JSON).
- ``LATEST`` (``broadcastFold=latest``, the default) keeps the latest value
  per key; a tombstone (a null value) removes the key. Its state is a dict
  ``key bytes -> LatestEntry``, stored as an Arrow file, not as JSON.
- Records are folded in (partition, offset) order (``order``), so a fold
  sees the same sequence on every run; rules must therefore be keyed.
- ``resolve_fold`` turns the option's text into a ``Fold``.

Errors: a bad ``broadcastFold`` is an ``OptionError`` (``BAD_INPUT``), found
when the pipeline is built; a record ``latest`` cannot fold (a null key) and
a state over ``broadcastMaxBytes`` fail the batch as ``PERMANENT``: a
restart folds the same records again.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from eoskit.core.options import OptionError
from eoskit.twophase.verdicts import Verdict

S = TypeVar("S")

#: The ``broadcastFold`` value of the built-in fold.
LATEST_SPEC = "latest"


@dataclass(frozen=True)
class BroadcastRecord:
    """One record of the rules topic, as a fold sees it."""

    key: bytes | None
    #: None is a tombstone.
    value: bytes | None
    partition: int
    offset: int
    timestamp_ms: int | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    #: For error messages only; folds must not depend on it.
    topic: str = ""

    def where(self) -> str:
        """The record's position, for messages: ``topic rules partition 0 offset 12``."""
        topic = f"topic {self.topic} " if self.topic else ""
        return f"{topic}partition {self.partition} offset {self.offset}"


@runtime_checkable
class Fold(Protocol[S]):
    """A fold of the rules topic. Both methods run in the driver's source
    process, inside ``latestOffset``; raising fails the batch being planned
    (and, as a restart folds the same records, the query)."""

    def initial(self) -> S:
        """The state of version 0, before any record: JSON."""
        ...

    def apply(self, state: S, record: BroadcastRecord) -> S:
        """The state after ``record``; pure: ``state`` is left as it was."""
        ...


class BroadcastRecordError(RuntimeError):
    """A record of the rules topic the fold cannot take (``latest``: a null key)."""

    #: The same records are folded again after a restart.
    verdict: ClassVar[Verdict] = Verdict.PERMANENT


class BroadcastTooLarge(RuntimeError):
    """A snapshot is larger than ``broadcastMaxBytes``."""

    verdict: ClassVar[Verdict] = Verdict.PERMANENT


class BroadcastStateError(RuntimeError):
    """A user fold's state is not JSON."""

    verdict: ClassVar[Verdict] = Verdict.PERMANENT


@dataclass(frozen=True)
class LatestEntry:
    """A key's value under ``latest``, and where it was read."""

    value: bytes
    partition: int
    offset: int
    timestamp_ms: int | None


class LatestFold:
    """The latest value per key; a tombstone removes the key."""

    spec = LATEST_SPEC

    def initial(self) -> dict[bytes, LatestEntry]:
        return {}

    def apply(self, state: dict[bytes, LatestEntry], record: BroadcastRecord) -> dict[bytes, LatestEntry]:
        new = dict(state)
        self.apply_in_place(new, record)
        return new

    def apply_in_place(self, state: dict[bytes, LatestEntry], record: BroadcastRecord) -> None:
        """``apply`` on a state this module owns (``fold`` copies it once first)."""
        if record.key is None:
            raise BroadcastRecordError(
                f"broadcast {record.where()}: the record has no key, and broadcastFold=latest "
                "keeps the latest value per key: write the rules topic with keys")
        if record.value is None:
            state.pop(record.key, None)
        else:
            state[record.key] = LatestEntry(record.value, record.partition, record.offset,
                                            record.timestamp_ms)

    def __repr__(self) -> str:
        return "LATEST"


LATEST = LatestFold()


def is_latest(spec: str) -> bool:
    return spec.strip().lower() == LATEST_SPEC


def normalise_spec(spec: str) -> str:
    """The form written to broadcast.json and snapshots: ``latest`` or ``module:name``."""
    return LATEST_SPEC if is_latest(spec) else spec.strip()


def resolve_fold(spec: str, option: str = "broadcastFold") -> Fold[Any]:
    """The fold ``spec`` names: ``latest``, or ``package.module:name`` where
    ``name`` is a ``Fold`` object (anything with ``initial`` and ``apply``)
    or a class or function that, called with no argument, returns one.

    Runs where the pipeline is built and in the driver's source process, so
    the module must be importable there: a fold defined in the job file
    (``__main__``) or a lambda is refused. Raises ``OptionError`` naming
    ``option`` and ``spec``."""
    text = str(spec).strip()
    if is_latest(text):
        return LATEST
    where, colon, name = text.partition(":")
    bad = f"{option}={spec!r}"
    if not colon or not where or not name or not name.isidentifier():
        raise OptionError(f"{bad}: give latest or package.module:name, a Fold importable "
                          "on the driver")
    if where == "__main__":
        raise OptionError(f"{bad}: a fold defined in the job file cannot be imported by the "
                          "source; move it to a module the driver can import")
    try:
        module = importlib.import_module(where)
    except ModuleNotFoundError as exc:
        missing = exc.name and (where == exc.name or where.startswith(exc.name + "."))
        reason = f"there is no module {where}" if missing else f"{where} failed to import: {exc}"
        raise OptionError(f"{bad}: {reason}") from None
    except Exception as exc:  # noqa: BLE001 - whatever the module raises is its failure
        raise OptionError(f"{bad}: {where} failed to import: {type(exc).__name__}: {exc}") from None
    if not hasattr(module, name):
        raise OptionError(f"{bad}: {where} has no attribute {name!r}")
    target = getattr(module, name)
    if getattr(target, "__name__", None) == "<lambda>":
        raise OptionError(f"{bad}: is a lambda; define the fold with def or as a Fold object")
    if not isinstance(target, type) and _is_fold(target):
        return target
    if not callable(target):
        raise OptionError(f"{bad}: {type(target).__name__} is neither a Fold (initial and apply) "
                          "nor a function returning one")
    try:
        made = target()
    except Exception as exc:  # noqa: BLE001 - the user's factory
        raise OptionError(f"{bad}: calling {name}() raised {type(exc).__name__}: {exc}") from None
    if not _is_fold(made):
        raise OptionError(f"{bad}: {name}() returned {type(made).__name__}, not a Fold "
                          "(an object with initial() and apply(state, record))")
    return made


def _is_fold(obj: Any) -> bool:
    return callable(getattr(obj, "initial", None)) and callable(getattr(obj, "apply", None))


def order(records: Iterable[BroadcastRecord]) -> list[BroadcastRecord]:
    """Records in the order every fold sees them: by partition, then offset."""
    return sorted(records, key=lambda r: (r.partition, r.offset))


def fold(state: S, records: Iterable[BroadcastRecord], fold: Fold[S], spec: str = "") -> S:
    """``state`` with ``records`` folded in, in (partition, offset) order.

    ``LATEST`` copies ``state`` once and updates the copy. A user fold's
    error goes up unchanged, with a note naming the record and ``spec``."""
    ordered = order(records)
    if isinstance(fold, LatestFold):
        new = dict(state)  # type: ignore[call-overload]
        for record in ordered:
            fold.apply_in_place(new, record)
        return new  # type: ignore[return-value]
    for record in ordered:
        try:
            state = fold.apply(state, record)
        except Exception as exc:
            exc.add_note(f"while folding broadcast {record.where()} with broadcastFold={spec or fold!r}")
            raise
    return state


def canonical_json(state: Any, spec: str = "") -> bytes:
    """A user fold's state as canonical JSON (sorted keys, no spaces), the
    bytes stored; ``BroadcastStateError`` if it is not JSON."""
    try:
        return json.dumps(state, sort_keys=True, separators=(",", ":"), allow_nan=False,
                          ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise BroadcastStateError(f"broadcastFold={spec}: the folded state is not JSON ({exc}); "
                                  "a fold's state must be dicts, lists, strings, numbers, "
                                  "booleans and None") from None


def check_size(nbytes: int, max_bytes: int, option: str = "broadcastMaxBytes") -> None:
    """Refuse a snapshot of ``nbytes`` over ``max_bytes`` (``BroadcastTooLarge``)."""
    if nbytes > max_bytes:
        raise BroadcastTooLarge(f"the broadcast state is {nbytes} bytes, over {option}={max_bytes}: "
                                f"raise {option}, or fold the rules topic into less")
