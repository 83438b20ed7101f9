"""Where the machine's CPU went while one run ran: the whole machine's busy
time, and the dev services' (the broker, PostgreSQL, ...), from /proc.

Why: on the 2-core machine the benchmarks share the cores with the broker
and the database they talk to; a run that is slower than another may be
waiting on them, or be starved by them. ``Cpu.start()`` before a run and
``.stop()`` after it give the CPU-seconds each took over the run, against
the cores x wall seconds there were.

A service's CPU is its process's and every process's below it (the
database's backends, one per connection), their reaped children's
included (``cutime``/``cstime``), so a backend that exited during the run
still counts once its parent reaped it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def machine_busy_s(proc: Path = Path("/proc")) -> float:
    """CPU-seconds every core spent on anything but idle and iowait since boot."""
    fields = [int(v) for v in (proc / "stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / TICK


def process_cpu_s(pid: int, proc: Path = Path("/proc")) -> float:
    """CPU-seconds of ``pid`` with its reaped children's; 0 when it is gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    # utime, stime, cutime, cstime: fields 14-17 of stat, 12-15 after the name
    return sum(int(v) for v in stat[stat.rindex(")") + 2:].split()[11:15]) / TICK


def tree_cpu_s(root: int) -> float:
    """CPU-seconds of ``root`` and every live process below it (the tree as
    ``eoskit chaos`` walks it), with their reaped children's."""
    from eoskit.runtime.devtools.chaos.processes import descendants

    return sum(process_cpu_s(pid) for pid in (root, *(p.pid for p in descendants(root))))


@dataclass
class Cpu:
    """CPU-seconds over one span: the machine's, and each named process tree's."""

    services: dict[str, int]  # name -> pid of the tree's root
    _start: dict[str, float] = field(default_factory=dict)
    _started: float = 0.0

    def _read(self) -> dict[str, float]:
        return {"machine": machine_busy_s(),
                **{name: tree_cpu_s(pid) for name, pid in self.services.items()}}

    def start(self) -> "Cpu":
        self._start, self._started = self._read(), time.perf_counter()
        return self

    def stop(self) -> dict[str, float]:
        """``wall_s``, ``available_s`` (cores x wall), ``machine_busy_s`` and
        ``<service>_s`` for each service, over the span."""
        now, wall = self._read(), time.perf_counter() - self._started
        out = {"wall_s": wall, "available_s": wall * (os.cpu_count() or 1),
               "machine_busy_s": now["machine"] - self._start["machine"]}
        out.update({f"{name}_s": now[name] - self._start.get(name, now[name]) for name in self.services})
        return out


def services_cpu(services_dir: str) -> Cpu:
    """A Cpu over the dev services running in ``services_dir`` (``eoskit dev up``)."""
    from eoskit.runtime.devtools.services import LocalServices

    return Cpu(LocalServices(services_dir).pids())


def describe(figures: dict[str, float]) -> str:
    """One line: busy of available, then each service's share."""
    parts = [f"machine busy {figures['machine_busy_s']:.1f} of {figures['available_s']:.1f} CPU-s"]
    parts += [f"{name.removesuffix('_s')} {value:.1f} CPU-s" for name, value in figures.items()
              if name not in ("wall_s", "available_s", "machine_busy_s")]
    return ", ".join(parts)
