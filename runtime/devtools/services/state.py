"""The state file of a dev-services folder, and the lock around it.

The state file remembers each service's port (so URLs survive restarts) and
the pid and start time of its process (so ``down`` and ``status`` work from a
different process than ``up``, e.g. a later CLI call).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
FORMAT_VERSION = 1


@dataclass
class ServiceState:
    """What is remembered about one service.

    ``extra`` holds service-specific paths (data dir, socket) that were chosen
    at first start and must stay the same afterwards. ``ports`` holds, by
    role, the ports a service listened on at its last start beyond what
    ``port`` says (Kafka: its broker and controller listeners), so that a
    restart can take the same ones again; a state file written before it
    existed reads as none.
    """

    port: int | None = None
    pid: int | None = None
    start_time: int | None = None
    extra: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    def all_ports(self) -> set[int]:
        """Every port this service holds: ``port`` and ``ports``."""
        return {p for p in (self.port, *self.ports.values()) if p}


@dataclass
class DevState:
    """All services of one folder, keyed by service name.

    ``only``: the services the folder's ``up`` calls chose
    (``eoskit dev up --only``), sorted; None when they started the whole
    set, or when nothing chose (a folder from before ``--only``).
    """

    services: dict[str, ServiceState] = field(default_factory=dict)
    only: list[str] | None = None

    def service(self, name: str) -> ServiceState:
        """The entry for ``name``, created empty if missing."""
        return self.services.setdefault(name, ServiceState())

    def to_json(self) -> str:
        """Serialised form (stable key order, for humans reading the file)."""
        data: dict[str, object] = {"version": FORMAT_VERSION,
                                   "services": {k: asdict(v) for k, v in sorted(self.services.items())}}
        if self.only is not None:
            data["only"] = list(self.only)
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> DevState:
        """Parse :meth:`to_json` output; unknown keys are ignored."""
        data = json.loads(text)
        services: dict[str, ServiceState] = {}
        for name, entry in (data.get("services") or {}).items():
            services[name] = ServiceState(
                port=entry.get("port"),
                pid=entry.get("pid"),
                start_time=entry.get("start_time"),
                extra=dict(entry.get("extra") or {}),
                ports={str(k): int(v) for k, v in (entry.get("ports") or {}).items()},
            )
        only = data.get("only")
        return cls(services=services, only=None if only is None else [str(name) for name in only])


def load_state(root: Path) -> DevState:
    """The folder's state, or an empty one if there is none yet."""
    path = root / STATE_FILE
    try:
        return DevState.from_json(path.read_text())
    except FileNotFoundError:
        return DevState()


def save_state(root: Path, state: DevState) -> None:
    """Write atomically, so a crash never leaves a half-written file."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (STATE_FILE + ".tmp")
    tmp.write_text(state.to_json())
    os.replace(tmp, root / STATE_FILE)


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold an exclusive lock on the folder (e.g. parallel pytest workers)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK_FILE, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
