"""SIGINT/SIGTERM during a run: the first asks for a stop at the next batch
boundary, a second stops at once (the batch in flight is then replayed from
the offset log on the next start)."""

from __future__ import annotations

import signal
import threading


class StopRequest:
    """How many stop requests arrived (signals, or ``eoskit stop``)."""

    def __init__(self) -> None:
        self.count = 0

    @property
    def requested(self) -> bool:
        return self.count > 0

    @property
    def forced(self) -> bool:
        return self.count > 1

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1

    def installed(self) -> "_Installed":
        return _Installed(self)


class _Installed:
    def __init__(self, request: StopRequest) -> None:
        self.request = request
        self.previous: dict[int, object] = {}

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self.request._handle)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
