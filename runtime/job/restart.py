"""Restart strategies: when a failed query is restarted from its checkpoint,
and when the job gives up. Flink's four, with Flink's names and defaults.

A strategy is a frozen description (what the job file or ``--restart-strategy``
says); ``tracker()`` makes the state one run keeps: each failure is reported
with ``on_failure(now)``, which answers the delay before the restart, or
``None`` to give up. Pure: the runtime supplies the clock.

Only a failure whose verdict is restartable (``eoskit.twophase.verdicts``:
``LOST`` or ``RECOVERABLE``, read by ``runtime/job/failures.py``) reaches a
strategy; any other ends the job at once, whatever the strategy.
"""

from __future__ import annotations

import random
import re
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field

from eoskit.core.options import parse_duration


class RestartTracker(ABC):
    """One run's memory of its failures under a strategy."""

    @abstractmethod
    def on_failure(self, now: float) -> float | None:
        """Seconds to wait before restarting after a failure at ``now``, or None: give up."""


class RestartStrategy(ABC):
    name: str

    @abstractmethod
    def tracker(self) -> RestartTracker: ...

    @abstractmethod
    def describe(self) -> str: ...


@dataclass(frozen=True)
class NoRestart(RestartStrategy):
    """The first failure ends the job (Flink: ``none``)."""

    name = "none"

    def tracker(self) -> RestartTracker:
        return _Never()

    def describe(self) -> str:
        return "none"


class _Never(RestartTracker):
    def on_failure(self, now: float) -> float | None:
        return None


@dataclass(frozen=True)
class FixedDelay(RestartStrategy):
    """Up to ``attempts`` restarts in the job's life, ``delay`` seconds apart."""

    attempts: int
    delay: float
    name = "fixed_delay"

    def __post_init__(self) -> None:
        _at_least("fixed_delay attempts", self.attempts, 1)
        _at_least("fixed_delay delay", self.delay, 0)

    def tracker(self) -> RestartTracker:
        return _FixedDelayTracker(self)

    def describe(self) -> str:
        return f"fixed_delay(attempts={self.attempts}, delay={_secs(self.delay)})"


@dataclass
class _FixedDelayTracker(RestartTracker):
    strategy: FixedDelay
    failures: int = 0

    def on_failure(self, now: float) -> float | None:
        self.failures += 1
        return self.strategy.delay if self.failures <= self.strategy.attempts else None


@dataclass(frozen=True)
class FailureRate(RestartStrategy):
    """Restart after ``delay`` unless more than ``max_failures`` failures fell
    within the last ``interval`` seconds."""

    max_failures: int
    interval: float
    delay: float
    name = "failure_rate"

    def __post_init__(self) -> None:
        _at_least("failure_rate max_failures", self.max_failures, 1)
        _at_least("failure_rate interval", self.interval, 0.001)
        _at_least("failure_rate delay", self.delay, 0)

    def tracker(self) -> RestartTracker:
        return _FailureRateTracker(self)

    def describe(self) -> str:
        return (f"failure_rate(max_failures={self.max_failures}, interval={_secs(self.interval)}, "
                f"delay={_secs(self.delay)})")


@dataclass
class _FailureRateTracker(RestartTracker):
    strategy: FailureRate
    times: deque = field(default_factory=deque)

    def on_failure(self, now: float) -> float | None:
        self.times.append(now)
        while self.times and self.times[0] <= now - self.strategy.interval:
            self.times.popleft()
        return self.strategy.delay if len(self.times) <= self.strategy.max_failures else None


@dataclass(frozen=True)
class ExponentialDelay(RestartStrategy):
    """Restart forever, waiting ``initial`` seconds, then ``multiplier`` times
    longer each time up to ``max``; after ``reset_after`` seconds without a
    failure the wait starts from ``initial`` again. ``jitter`` spreads each
    wait by up to that fraction. Flink's default strategy since 1.19, with
    its defaults."""

    initial: float = 1.0
    max: float = 60.0
    multiplier: float = 1.5
    reset_after: float = 3600.0
    jitter: float = 0.1
    name = "exponential_delay"

    def __post_init__(self) -> None:
        _at_least("exponential_delay initial", self.initial, 0.001)
        _at_least("exponential_delay max", self.max, self.initial)
        _at_least("exponential_delay multiplier", self.multiplier, 1)
        _at_least("exponential_delay reset_after", self.reset_after, 0.001)
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"exponential_delay jitter = {self.jitter}: expected 0 to 1")

    def tracker(self) -> RestartTracker:
        return _ExponentialTracker(self)

    def describe(self) -> str:
        return (f"exponential_delay(initial={_secs(self.initial)}, max={_secs(self.max)}, "
                f"multiplier={self.multiplier}, reset_after={_secs(self.reset_after)}, "
                f"jitter={self.jitter})")


@dataclass
class _ExponentialTracker(RestartTracker):
    strategy: ExponentialDelay
    backoff: float | None = None
    last_failure: float | None = None
    rng: random.Random = field(default_factory=random.Random)

    def on_failure(self, now: float) -> float | None:
        s = self.strategy
        quiet = self.last_failure is not None and now - self.last_failure >= s.reset_after
        if self.backoff is None or quiet:
            self.backoff = s.initial
        else:
            self.backoff = min(self.backoff * s.multiplier, s.max)
        self.last_failure = now
        spread = self.backoff * s.jitter
        return max(0.0, self.backoff + self.rng.uniform(-spread, spread))


def _at_least(what: str, value: float, low: float) -> None:
    if value < low:
        raise ValueError(f"{what} = {value}: must be at least {low}")


def _secs(seconds: float) -> str:
    return f"{seconds:g}s"


_CALL = re.compile(r"^\s*(?P<name>[a-z_]+)\s*(?:\((?P<args>.*)\))?\s*$")
_TYPES = {"none": NoRestart, "fixed_delay": FixedDelay, "failure_rate": FailureRate,
          "exponential_delay": ExponentialDelay}
_DURATIONS = {"delay", "interval", "initial", "max", "reset_after"}


def parse_strategy(text: str) -> RestartStrategy:
    """``none``, ``fixed_delay(attempts=3, delay=10s)`` (or positional
    arguments in the declared order), ``failure_rate(...)``,
    ``exponential_delay`` / ``exponential_delay(initial=1s, max=1m, ...)``."""
    match = _CALL.match(text)
    if match is None or match["name"] not in _TYPES:
        raise ValueError(f"unknown restart strategy {text!r}; expected one of "
                         f"{', '.join(_TYPES)}, e.g. fixed_delay(attempts=3, delay=10s)")
    kind = _TYPES[match["name"]]
    names = [f for f in kind.__dataclass_fields__]
    args = [a.strip() for a in (match["args"] or "").split(",") if a.strip()]
    values: dict[str, float | int] = {}
    for index, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        key, value = (key.strip(), value.strip()) if eq else (names[index] if index < len(names) else "?", arg)
        if key not in names:
            raise ValueError(f"{match['name']} takes {', '.join(names) or 'no arguments'}; got {key!r}")
        values[key] = (parse_duration(value) if key in _DURATIONS
                       else int(value) if key in ("attempts", "max_failures") else float(value))
    try:
        return kind(**values)
    except TypeError:
        raise ValueError(f"{match['name']} needs {', '.join(names)}") from None
