"""The chaos run's fault schedule, drawn from a seed.

A fault fires ``delay_s`` seconds after the commit of micro-batch
``after_batch``: a batch commit is the one moment every run of the job has
in common, so a schedule in batches (not wall-clock time) lands each fault
at the same place of the protocol again when the run is repeated with the
same seed, on a slower or a faster machine. The delay spreads the faults
over the next batch's steps (planning, the tasks' writes, the commit).

What can be injected is declared once, in :data:`KINDS`: each kind's name
(what ``--faults`` accepts), a line of help, and what it needs of the run.
A plan is drawn for the kinds asked for, then :meth:`FaultPlan.applicable`
drops the faults the run cannot inject (an executor kill in local mode, a
database that is not eoskit's dev service) and says why, keeping the other
faults where the seed put them.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eoskit.core import crash

@dataclass(frozen=True)
class FaultKind:
    """A kind of fault: its ``--faults`` name, one line of help, and what
    the run must have for it to be injected (``None``: any run)."""

    name: str
    help: str
    needs: str | None = None


#: What a fault may need, and what the skip line says when the run lacks it.
NEEDS: dict[str, str] = {
    "cluster": "the job runs in local mode: its executors are not processes of their own",
    "dev-database": "the sink's database is not eoskit's dev service",
    "dev-broker": "the job's Kafka broker is not eoskit's dev service",
    "dev-network": "the job's database and broker are not eoskit's dev services on hosts of their own "
                   "(eoskit dev up --network)",
}

#: Every kind of fault, in the order the help and the plans list them.
KINDS: dict[str, FaultKind] = {k.name: k for k in (
    FaultKind("driver", "SIGKILL the driver's process group, then start the job again from its checkpoint"),
    FaultKind("worker", "SIGKILL one of Spark's Python worker processes; Spark retries its tasks"),
    FaultKind("executor", "SIGKILL an executor's JVM; Spark runs its tasks on another executor",
              needs="cluster"),
    FaultKind("database", "stop the sink's database server, then start it again", needs="dev-database"),
    FaultKind("broker", "stop the Kafka broker, then start it again", needs="dev-broker"),
    FaultKind("network", "cut the job's host from the sink's database or the broker for a while: a "
              "partition both ways, its replies lost, or its connections reset", needs="dev-network"),
)}

#: The names ``--faults`` accepts.
FAULT_KINDS: tuple[str, ...] = tuple(KINDS)

#: Where a driver fault lands, drawn with it: one of the protocol's driver
#: crash points (the decision logged, some or all of a two-phase batch's
#: commits done, a task committed by itself in the marked and at-least-once
#: modes), or None, a moment ``delay_s`` after a commit.
DRIVER_STEPS: tuple[str | None, ...] = (
    crash.DRIVER_AFTER_DECISION, crash.DRIVER_AFTER_SOME_COMMITS, crash.DRIVER_AFTER_ALL_COMMITS,
    crash.DRIVER_AFTER_TASK_COMMIT, None)
#: The driver steps aimed at the windows each commit mode leaves open, so
#: that a job that can lose or duplicate does not pass by the luck of the
#: draw: a two-phase batch decided and partly committed; a batch some of
#: whose tasks committed by themselves (marked and at-least-once modes)
#: before Spark recorded it.
MODE_STEPS: dict[str, tuple[str | None, ...]] = {
    "twophase": (crash.DRIVER_AFTER_DECISION, crash.DRIVER_AFTER_SOME_COMMITS, crash.DRIVER_AFTER_ALL_COMMITS),
    "idempotent": (crash.DRIVER_AFTER_TASK_COMMIT,),
    "at_least_once": (crash.DRIVER_AFTER_TASK_COMMIT,),
}
#: What each step's window is, for the report.
WINDOWS: dict[str | None, str] = {
    crash.DRIVER_AFTER_DECISION: "a batch decided, nothing of it committed",
    crash.DRIVER_AFTER_SOME_COMMITS: "a decided batch partly committed",
    crash.DRIVER_AFTER_ALL_COMMITS: "a batch committed in the sink, not yet in Spark's commit log",
    crash.DRIVER_AFTER_TASK_COMMIT: "a task committed by itself, its batch not yet recorded",
    None: "a moment after a batch's commit",
}
#: A network fault: how it cuts (``netlab``), and how long it lasts.
CUTS: tuple[str, ...] = ("partition", "lost replies", "reset")
CUT_S: tuple[float, float] = (1.0, 8.0)

#: The defaults of ``FaultPlan.draw``: a fault every 1 to 3 batches, 0 to 0.6 s after a commit.
EVERY_BATCHES: tuple[int, int] = (1, 3)
DELAY_S: tuple[float, float] = (0.0, 0.6)
#: How long a stopped server stays down before it is started again, drawn
#: per database or broker fault: long enough for the job's clients to see
#: their connections refused, short enough for its restart strategy.
DOWN_S: tuple[float, float] = (0.5, 3.0)
#: The kinds that stop a server (and draw a ``down_s``).
SERVICE_KINDS: frozenset[str] = frozenset({"database", "broker"})


def _known() -> str:
    return ", ".join(FAULT_KINDS)


def parse_faults(text: str) -> tuple[str, ...]:
    """The kinds a ``--faults driver,worker`` option names: comma-separated,
    blanks and case ignored, each kind once, in :data:`FAULT_KINDS` order
    (so that the order they were typed in does not change the plan a seed
    draws). An unknown name, or none at all, is refused with a
    ``ValueError`` that names the option and the known kinds."""
    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in KINDS]
    if unknown:
        raise ValueError(f"--faults: unknown fault {unknown[0]!r} (known: {_known()})")
    if not names:
        raise ValueError(f"--faults: name at least one fault (known: {_known()})")
    return tuple(kind for kind in FAULT_KINDS if kind in names)


@dataclass(frozen=True)
class Fault:
    """One fault of a plan: its number in the plan as drawn (1, 2, ...; kept
    when other faults are dropped), its kind, and when it fires:
    ``delay_s`` seconds after the commit of batch ``after_batch``."""

    index: int
    kind: str
    after_batch: int
    delay_s: float
    #: A driver fault's protocol step (a crash point of ``eoskit.core.crash``)
    #: in the next batch, where the driver kills itself; None: at ``delay_s``.
    #: A step the sink's commit mode never passes falls back to the delay.
    step: str | None = None
    #: A database or broker fault: how long the server stays stopped; a
    #: network fault: how long the cut lasts.
    down_s: float = 0.0
    #: A network fault: how it cuts (one of :data:`CUTS`).
    cut: str | None = None

    def describe(self) -> str:
        """``fault 2 (worker): 0.314 s after batch 5 commits``, ``fault 1
        (driver): at driver_after_decision in batch 3``, ``fault 3
        (database): down 1.250 s, 0.314 s after batch 5 commits``, or
        ``fault 4 (network): partition for 2.500 s, 0.314 s after batch 5 commits``."""
        if self.step is not None:
            return f"fault {self.index} ({self.kind}): at {self.step} in batch {self.after_batch + 1}"
        down = f"down {self.down_s:.3f} s, " if self.kind in SERVICE_KINDS else ""
        if self.kind == "network":
            down = f"{self.cut} for {self.down_s:.3f} s, "
        return (f"fault {self.index} ({self.kind}): {down}{self.delay_s:.3f} s after batch "
                f"{self.after_batch} commits")

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind, "after_batch": self.after_batch,
                "delay_s": self.delay_s, "step": self.step, "down_s": self.down_s, "cut": self.cut}


def _range(option: str, bounds: tuple[Any, Any], lowest: float) -> None:
    """Refuse a ``(low, high)`` range that is not ``lowest <= low <= high``, finite."""
    try:
        low, high = bounds
    except (TypeError, ValueError):
        raise ValueError(f"{option}: expected two bounds (low, high), got {bounds!r}") from None
    for bound in (low, high):
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
            raise ValueError(f"{option}: {bound!r} is not a finite number")
    if low < lowest:
        raise ValueError(f"{option}: the low bound must be at least {lowest}, got {low}")
    if high < low:
        raise ValueError(f"{option}: the high bound {high} is below the low bound {low}")


@dataclass(frozen=True)
class FaultPlan:
    """The faults of one chaos run, in firing order, and the seed they were
    drawn from (the same seed, kinds and bounds draw the same plan)."""

    seed: int
    faults: tuple[Fault, ...]

    @classmethod
    def draw(cls, seed: int, kinds: Sequence[str], kills: int,
             every_batches: tuple[int, int] = EVERY_BATCHES,
             delay_s: tuple[float, float] = DELAY_S,
             steps: Sequence[str | None] = DRIVER_STEPS) -> FaultPlan:
        """``kills`` faults drawn with ``random.Random(seed)``: the gap in
        batches before each is uniform in ``every_batches`` (both bounds
        included; the first fault counts from the start of the run, so
        with ``(1, 3)`` it fires after batch 0, 1 or 2), its kind uniform
        among ``kinds``, its delay uniform in ``delay_s`` rounded to the
        millisecond (and a database or broker fault's time down uniform in
        :data:`DOWN_S`, a network fault's cut among :data:`CUTS` and its
        length in :data:`CUT_S`); a driver fault's step among ``steps``
        (:data:`MODE_STEPS` aims them at the sink's mode's windows). Bad
        values are refused with a ``ValueError`` that names the option:
        ``--kills``, ``--faults-every``, ``--fault-delay``, ``--faults``."""
        if isinstance(kills, bool) or not isinstance(kills, int) or kills < 1:
            raise ValueError(f"--kills: must be a whole number of at least 1, got {kills!r}")
        _range("--faults-every", every_batches, 1)
        if not all(isinstance(bound, int) for bound in every_batches):
            raise ValueError(f"--faults-every: batches are whole numbers, got {every_batches!r}")
        _range("--fault-delay", delay_s, 0.0)
        if isinstance(kinds, str):
            raise TypeError("kinds is a sequence of names; parse a --faults value with parse_faults")
        chosen = parse_faults(",".join(kinds))
        rng = random.Random(seed)
        faults = []
        batch = -1
        for index in range(1, kills + 1):
            batch += rng.randint(*every_batches)
            kind = rng.choice(chosen)
            delay = round(rng.uniform(*delay_s), 3)
            step = rng.choice(tuple(steps)) if kind == "driver" else None
            down = round(rng.uniform(*DOWN_S), 3) if kind in SERVICE_KINDS else 0.0
            cut = None
            if kind == "network":  # drawn only for this kind: the other kinds' plans stay as they were
                cut, down = rng.choice(CUTS), round(rng.uniform(*CUT_S), 3)
            faults.append(Fault(index, kind, batch, delay, step, down, cut))
        return cls(seed, tuple(faults))

    @property
    def last_batch(self) -> int | None:
        """The batch after whose commit the last fault fires (None: no
        fault): the input must last beyond it for the run to recover."""
        return self.faults[-1].after_batch if self.faults else None

    def applicable(self, available: set[str]) -> tuple[FaultPlan, list[str]]:
        """This plan without the faults whose kind needs something the run
        lacks (``available`` holds the :data:`NEEDS` the run has), and one
        line per kind dropped, saying why: ``database faults skipped: the
        sink's database is not eoskit's dev service``. The remaining faults
        keep their batches and numbers; a plan left empty is the caller's
        to refuse."""
        unknown = sorted(set(available) - set(NEEDS))
        if unknown:
            raise ValueError(f"unknown needs {unknown} (known: {', '.join(NEEDS)})")
        kept: list[Fault] = []
        dropped: Counter[str] = Counter()
        for fault in self.faults:
            needs = KINDS[fault.kind].needs
            if needs is None or needs in available:
                kept.append(fault)
            else:
                dropped[fault.kind] += 1
        lines = [f"{kind} faults skipped: {NEEDS[KINDS[kind].needs or '']}"
                 for kind in FAULT_KINDS if dropped[kind]]
        return FaultPlan(self.seed, tuple(kept)), lines

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "faults": [fault.to_dict() for fault in self.faults]}
