"""eoskit chaos's executor, database and broker faults, and where a chaos
run's output first differed, without Spark or services: a service fault
draws its time down; only a job's servers that are running dev services of
the folder are stoppable; a run's executors are found by the driver port
they serve; the first difference is the earliest batch by which a copy was
extra or lacking."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

from eoskit.runtime.devtools.chaos import processes, services
from eoskit.runtime.devtools.chaos.plan import DOWN_S, Fault, FaultPlan
from eoskit.runtime.devtools.chaos.snapshots import Snapshots, first_difference
from eoskit.runtime.job.components import Served
from eoskit.runtime.devtools.services.processes import process_start_time
from eoskit.runtime.devtools.services.state import DevState, ServiceState, save_state


def test_service_faults_draw_their_time_down_and_say_it():
    plan = FaultPlan.draw(11, ["database", "broker", "worker"], 30)
    for fault in plan.faults:
        if fault.kind in ("database", "broker"):
            assert DOWN_S[0] <= fault.down_s <= DOWN_S[1]
            assert f"down {fault.down_s:.3f} s, " in fault.describe()
        else:
            assert fault.down_s == 0.0 and "down" not in fault.describe()
    assert {f.kind for f in plan.faults} == {"database", "broker", "worker"}
    assert FaultPlan.draw(11, ["database", "broker", "worker"], 30) == plan  # same seed, same plan
    assert Fault(3, "database", 5, 0.314, down_s=1.25).describe() == \
        "fault 3 (database): down 1.250 s, 0.314 s after batch 5 commits"


class Component:
    def __init__(self, *servers: tuple[str, str, int]) -> None:
        self._servers = servers

    def servers(self) -> tuple[tuple[str, str, int], ...]:
        return self._servers


def dev_folder(tmp_path: Path, ports: dict[str, int], dead: set[str] = frozenset()) -> Path:
    """A dev services folder whose services are this test's process (alive)
    or a pid that is not running (``dead``)."""
    me = ServiceState(pid=os.getpid(), start_time=process_start_time(os.getpid()))
    state = DevState({name: ServiceState(port=port, pid=2**22 + 7 if name in dead else me.pid,
                                         start_time=me.start_time) for name, port in ports.items()})
    save_state(tmp_path, state)
    return tmp_path


def test_only_the_job_s_servers_that_are_running_dev_services_can_be_stopped(tmp_path):
    assert isinstance(Component(), Served)
    folder = dev_folder(tmp_path, {"kafka": 19092, "postgres": 15432, "mariadb": 13306})
    sink = Component(("postgresql", "localhost", 15432))
    source = Component(("kafka", "127.0.0.1", 19092), ("kafka", "127.0.0.1", 29092))
    found = services.find(folder, source, sink)
    assert (found.database, found.brokers) == ("postgres", ["kafka"])
    assert found.available() == {"dev-database", "dev-broker"}
    assert found.service("database") == "postgres" and found.service("broker") == "kafka"

    # Another host, another port, or the service stopped: not the job's dev service.
    assert services.find(folder, Component(("postgresql", "db.example", 15432))).available() == set()
    assert services.find(folder, Component(("mysql", "127.0.0.1", 15432))).available() == set()
    assert services.find(folder, Component(("mysql", "::1", 13306))).database == "mariadb"
    stopped = dev_folder(tmp_path / "stopped", {"postgres": 15432}, dead={"postgres"})
    assert services.find(stopped, sink).available() == set()
    # No folder, a folder without services, a component that names no server.
    assert services.find(None, sink).available() == set()
    assert services.find(tmp_path / "nothing", sink).available() == set()
    assert services.find(folder, object()).available() == set()


def stand_in_jvm(tmp_path: Path, then: str = "time.sleep(60)") -> tuple[subprocess.Popen, int]:
    """A process named 'java' (this Python under that name) listening on a
    port, doing ``then`` after; with the port."""
    java = tmp_path / "java"
    os.symlink(sys.executable, java)
    script = ("import os, socket, sys, time\n"
              "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
              f"print(s.getsockname()[1], flush=True)\n{then}\n")
    jvm = subprocess.Popen([str(java), "-c", script, str(java)], stdout=subprocess.PIPE, text=True)
    return jvm, int(jvm.stdout.readline())


def stand_in_executor(driver_port: int) -> subprocess.Popen:
    """A process whose command line is an executor's serving ``driver_port``."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", processes.EXECUTOR_CLASS,
                             "--driver-url", f"spark://CoarseGrainedScheduler@127.0.0.1:{driver_port}"],
                            start_new_session=True)


def wait_until_found(executor: subprocess.Popen) -> None:
    deadline = time.monotonic() + 20
    while executor.pid not in processes.executors(os.getpid()) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_run_s_executors_are_those_serving_a_port_its_driver_jvm_listens_on(tmp_path):
    """A stand-in: driver (this test) -> 'java' listening on a port; one
    'executor' names that port as its driver URL, another a port nobody here
    listens on."""
    jvm, port = stand_in_jvm(tmp_path)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        other = free.getsockname()[1]
    ours, theirs = stand_in_executor(port), stand_in_executor(other)
    try:
        wait_until_found(ours)
        assert processes.executors(os.getpid()) == [ours.pid]
        assert processes.executors(ours.pid) == []  # no JVM below it
    finally:
        for p in (jvm, ours, theirs):
            p.kill()
            p.wait()


def test_a_driver_jvm_opening_and_closing_files_meanwhile_still_shows_its_executor(tmp_path):
    """A busy driver JVM opens and closes files while its sockets are read:
    a descriptor gone between the listing and its link is passed over, not
    taken for a JVM that listens on nothing (the executor fault of a chaos
    run on a cluster once found no executor this way)."""
    jvm, port = stand_in_jvm(tmp_path, then=(
        "while True:\n"
        "    files = [os.open(sys.argv[1], os.O_RDONLY) for _ in range(200)]\n"
        "    for f in files: os.close(f)"))
    ours = stand_in_executor(port)
    try:
        wait_until_found(ours)
        missed = sum(processes.executors(os.getpid()) != [ours.pid] for _ in range(300))
        assert missed == 0, f"the executor was not found {missed} times of 300"
    finally:
        for p in (jvm, ours):
            p.kill()
            p.wait()


T0 = datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc)


def at(batch: int) -> tuple[int, datetime]:
    return batch, T0 + timedelta(seconds=batch)


def test_the_first_difference_is_the_earliest_copy_extra_or_lacking():
    reference = ({("a",): [at(0)], ("b",): [at(1)], ("c",): [at(2)], ("d",): [at(3)]},
                 Counter({("a",): 1, ("b",): 1, ("c",): 1, ("d",): 1}))
    commits = {b: T0 + timedelta(seconds=b, milliseconds=500) for b in range(5)}
    assert first_difference(reference, reference, commits) is None
    # "c" written twice, the second copy seen by batch 3.
    doubled = ({**reference[0], ("c",): [at(2), at(3)]}, reference[1] + Counter({("c",): 1}))
    assert first_difference(reference, doubled, commits) == at(3)
    # "b" never written: the chaos run's batch 1 committed without it.
    lacking = ({k: v for k, v in reference[0].items() if k != ("b",)}, reference[1] - Counter({("b",): 1}))
    assert first_difference(reference, lacking, commits) == (1, commits[1])
    # A row seen in one run only, gone in the end (an upsert replaced it): no difference.
    passing = ({**reference[0], ("a-old",): [at(0)]}, reference[1])
    assert first_difference(reference, passing, commits) is None


class Scratch:
    """A scratch target whose rows the test sets."""

    name = "table t"

    def __init__(self) -> None:
        self.now: list[tuple] = []

    def rows(self):
        return ("id", "ts"), list(self.now), ("id",)


def test_snapshots_remember_by_which_batch_each_copy_was_there_and_cut_columns():
    scratch, committed = Scratch(), []
    snapshots = Snapshots(scratch, lambda: list(committed))
    snapshots._read()  # nothing committed: nothing read
    assert snapshots.seen == {}
    scratch.now = [(1, "x")]
    committed.append(0)
    snapshots._read()
    scratch.now = [(1, "x"), (1, "x"), (2, "y")]
    snapshots._read()  # no new commit: not read again
    committed.append(1)
    snapshots._read()
    seen, last = snapshots.rows()
    assert [b for b, _ in seen[(1, "x")]] == [0, 1] and [b for b, _ in seen[(2, "y")]] == [1]
    assert last == Counter({(1, "x"): 2, (2, "y"): 1})
    seen, last = snapshots.rows(keep=[0])  # without ts
    assert [b for b, _ in seen[(1,)]] == [0, 1] and last == Counter({(1,): 2, (2,): 1})
    scratch.now = [(i, "z") for i in range(300_000)]
    committed.append(2)
    snapshots._read()
    assert snapshots.gave_up and "200,000" in snapshots.gave_up
