"""Where the machine's CPU went while one run ran: the whole machine's busy
time, and the dev services' (the broker, PostgreSQL, ...), read with psutil.

Why: on the 2-core machine the benchmarks share the cores with the broker
and the database they talk to; a run that is slower than another may be
waiting on them, or be starved by them. ``Cpu.start()`` before a run and
``.stop()`` after it give the CPU-seconds each took over the run, against
the cores x wall seconds there were.

The machine's busy time is user, nice, system, irq and softirq (guest time
is already in user). Steal time, where the hypervisor ran another guest on
a core this one was given, is neither busy nor idle: nothing here ran then,
and nothing here could have. It is counted apart (``steal_s``), in neither
the busy time nor the cores x wall seconds the run had (``describe``
prints busy of what was left). Before issue 33 it counted as busy, and a
virtual machine whose host was busy looked busier itself than it was.

A service's CPU is its process's and every process's below it (the
database's backends, one per connection), their reaped children's
included (psutil's ``children_user``/``children_system``), so a backend
that exited during the run still counts once its parent reaped it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import psutil


def machine_s(times: Any = None) -> tuple[float, float]:
    """CPU-seconds every core spent busy since boot, and stolen from it by
    the hypervisor, from ``times`` (``psutil.cpu_times()`` unless given)."""
    times = times or psutil.cpu_times()
    busy = times.user + times.nice + times.system + getattr(times, "irq", 0.0) + getattr(times, "softirq", 0.0)
    return busy, getattr(times, "steal", 0.0)


def process_cpu_s(pid: int) -> float:
    """CPU-seconds of ``pid`` with its reaped children's; 0 when it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system + times.children_user + times.children_system


def tree_cpu_s(root: int) -> float:
    """CPU-seconds of ``root`` and every live process below it, with their
    reaped children's."""
    try:
        below = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return 0.0
    return sum(process_cpu_s(pid) for pid in (root, *(p.pid for p in below)))


@dataclass
class Cpu:
    """CPU-seconds over one span: the machine's, and each named process tree's."""

    services: dict[str, int]  # name -> pid of the tree's root
    _start: dict[str, float] = field(default_factory=dict)
    _started: float = 0.0

    def _read(self) -> dict[str, float]:
        busy, steal = machine_s()
        return {"machine": busy, "steal": steal,
                **{name: tree_cpu_s(pid) for name, pid in self.services.items()}}

    def start(self) -> "Cpu":
        self._start, self._started = self._read(), time.perf_counter()
        return self

    def stop(self) -> dict[str, float]:
        """``wall_s``, ``available_s`` (cores x wall), ``machine_busy_s``,
        ``steal_s`` (see the module's docstring) and ``<service>_s`` for
        each service, over the span."""
        now, wall = self._read(), time.perf_counter() - self._started
        out = {"wall_s": wall, "available_s": wall * (os.cpu_count() or 1),
               "machine_busy_s": now["machine"] - self._start["machine"],
               "steal_s": now["steal"] - self._start["steal"]}
        out.update({f"{name}_s": now[name] - self._start.get(name, now[name]) for name in self.services})
        return out


def services_cpu(services_dir: str) -> Cpu:
    """A Cpu over the dev services running in ``services_dir`` (``eoskit dev up``)."""
    from eoskit.runtime.devtools.services import LocalServices

    return Cpu(LocalServices(services_dir).pids())


def describe(figures: dict[str, float]) -> str:
    """One line: busy of what was available less what was stolen, then
    each service's share."""
    steal = figures.get("steal_s", 0.0)
    parts = [f"machine busy {figures['machine_busy_s']:.1f} of {figures['available_s'] - steal:.1f} CPU-s"
             + (f" (of {figures['available_s']:.1f}, {steal:.1f} stolen by the hypervisor)"
                if steal >= 0.05 else "")]
    parts += [f"{name.removesuffix('_s')} {value:.1f} CPU-s" for name, value in figures.items()
              if name not in ("wall_s", "available_s", "machine_busy_s", "steal_s")]
    return ", ".join(parts)
