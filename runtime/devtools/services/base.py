"""What every locally run service provides to the orchestrator.

:mod:`.local` drives services through this small interface (check installed,
prepare data once, command line, readiness probe, bootstrap) so that the
per-server modules hold only what is specific to their server.
"""

from __future__ import annotations

import os
import shutil
import signal
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .endpoints import HOST
from .state import ServiceState


@dataclass(frozen=True)
class LaunchSpec:
    """How to start a server process."""

    argv: list[str]
    env: Mapping[str, str] | None = None
    user: str | None = None  # run as this system user (only when we are root)
    cwd: Path | None = None


class LocalService(ABC):
    """One server run as a plain process under ``root/<name>``."""

    name: ClassVar[str]
    #: Signal that asks this server for a clean but quick shutdown.
    stop_signal: ClassVar[int] = signal.SIGTERM

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dir = root / self.name
        self.log_path = self.dir / f"{self.name}.log"
        #: Where it listens, and the network namespace it runs in (None: this
        #: host's): a host of its own in a network lab (``LocalServices(hosts=...)``).
        self.address: str = HOST
        self.netns: str | None = None

    @abstractmethod
    def check_installed(self) -> None:
        """Raise :class:`MissingBinaryError` naming what to install."""

    def prepare(self, state: ServiceState) -> None:
        """One-time setup before the first start (initialise a data dir)."""

    @abstractmethod
    def launch(self, state: ServiceState) -> LaunchSpec:
        """The command line for ``state.port``."""

    @abstractmethod
    def probe(self, state: ServiceState) -> None:
        """Return if the server accepts connections, raise otherwise."""

    def bootstrap(self, state: ServiceState) -> None:
        """Create databases/users after a fresh start (must be idempotent)."""

    def describe(self, state: ServiceState) -> str:
        """Human-readable address for status lines (never with a password)."""
        return f"{self.address}:{state.port}"


def is_root() -> bool:
    """True when running as uid 0, which changes how servers must be run."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def find_program(names: Iterable[str], extra_dirs: Iterable[str] = ("/usr/sbin", "/usr/local/sbin", "/sbin")) -> str | None:
    """First of ``names`` found on PATH or in the sbin dirs (not on a user's PATH)."""
    names = list(names)
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    for directory in extra_dirs:
        for name in names:
            candidate = Path(directory) / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None
