"""Two small helpers for keyed state on Spark's ``transformWithState``.

Spark's own API is the API (``StatefulProcessor``, ``ValueState``,
``ListState``, ``MapState``, timers; see docs/state.md); these cover the two
places where it is awkward for a common pattern:

- ``ttl("30 minutes")``: a state TTL in the words the runtime's settings
  use, as the milliseconds ``getValueState(..., ttlDurationMs=)`` wants. A
  TTL of zero or less is refused here, naming the state, rather than by
  Spark in the first task that creates it.
- ``replace_timer(handle, at_ms)``: the one-timer-per-key pattern (Flink's
  "fire when the key has been idle for N"): every timer of the current key
  is deleted and one is registered at ``at_ms``. Spark keeps every timer
  registered for a key, so re-registering on each event alone would fire
  once per event.
"""

from __future__ import annotations

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from eoskit.runtime.job.settings import parse_duration


class StateTTLError(ValueError):
    """A state TTL that is not a duration greater than zero."""


def ttl(duration: str | float | int, state: str = "state") -> int:
    """Milliseconds of ``"30 minutes"``, ``"500 ms"``, ``"2m"`` or a number of
    seconds, for ``ttlDurationMs``; zero or less is refused, naming ``state``."""
    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        raise StateTTLError(f"TTL of {state} = {duration!r}: {exc}") from None
    millis = round(seconds * 1000)
    if millis <= 0:
        raise StateTTLError(f"TTL of {state} = {duration!r}: a state TTL must be greater than "
                            "zero (leave ttlDurationMs out for state that never expires)")
    return millis


def replace_timer(handle: StatefulProcessorHandle, at_ms: int) -> None:
    """Make ``at_ms`` the current key's only timer."""
    for registered in list(handle.listTimers()):
        if registered != at_ms:
            handle.deleteTimer(registered)
    handle.registerTimer(at_ms)


__all__ = ["StateTTLError", "replace_timer", "ttl"]
