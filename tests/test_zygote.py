"""The zygote: Spark's Python helpers handed over to one warm process per JVM.

A small Python program stands in for the JVM: it starts PySpark's daemon as
Spark does in an eoskit session (``eoskit-spark-python -m pyspark.daemon
<worker module>``, pipes for stdin and stdout), reads the port, asks for a
worker and checks where it came from, then closes the daemon's stdin as
Spark does to stop it. The ``spark_python`` fixture (tests/conftest.py) is
the wrapper as pip installs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the zygote is Linux only")

FAKE_JVM = textwrap.dedent('''
    import json, os, socket, struct, subprocess, sys, time

    import psutil

    def cmdline(pid):
        return " ".join(psutil.Process(pid).cmdline())

    def parent(pid):
        return psutil.Process(pid).ppid()

    python = json.loads(os.environ["FAKE_JVM_PYTHON"])  # PYSPARK_PYTHON
    report = []
    for module in sys.argv[1:]:
        started = time.perf_counter()
        daemon = subprocess.Popen([*python, "-m", "pyspark.daemon", module],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        port = struct.unpack(">i", daemon.stdout.read(4))[0]
        conn = socket.create_connection(("127.0.0.1", port))
        worker = struct.unpack(">i", conn.makefile("rb").read(4))[0]
        ready_ms = (time.perf_counter() - started) * 1000
        forked_by = parent(worker)
        comm = psutil.Process(forked_by).name()
        report.append({"module": module, "ready_ms": ready_ms, "daemon": daemon.pid,
                       "forked_by": forked_by, "forked_by_cmdline": cmdline(forked_by),
                       "forked_by_comm": comm, "grandparent": parent(forked_by)})
        conn.close()
        daemon.stdin.close()  # Spark stops a daemon by closing its stdin
        report[-1]["exit"] = daemon.wait(30)
    print(json.dumps(report))
''')


def fake_jvm(tmp_path: Path, modules: list[str], prefork: str | None, python: list[str]) -> list[dict]:
    script = tmp_path / "fake_jvm.py"
    script.write_text(FAKE_JVM)
    env = {k: v for k, v in os.environ.items() if k != "EOSKIT_PREFORK"}
    env["FAKE_JVM_PYTHON"] = json.dumps(python)
    if prefork is not None:
        env["EOSKIT_PREFORK"] = prefork
    result = subprocess.run([sys.executable, str(script), *modules], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "RuntimeWarning" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def zygotes() -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if "eoskit.runtime.spark.zygote" in " ".join(p.info["cmdline"] or ())]


def test_daemons_are_forked_from_one_warm_zygote_and_stop_as_spark_stops_them(tmp_path, spark_python):
    before = set(zygotes())
    report = fake_jvm(tmp_path, ["pyspark.worker", "pyspark.sql.worker.write_into_data_source"], "1",
                      spark_python)
    for daemon in report:
        # The worker's daemon is a child of the zygote, not the process Spark started.
        assert daemon["forked_by"] != daemon["daemon"], daemon
        assert "eoskit.runtime.spark.zygote" in daemon["forked_by_cmdline"], daemon
        assert daemon["exit"] == 1, daemon  # PySpark's daemon exits 1 when its stdin closes
    # One zygote served both; named after the module Spark asked for.
    assert report[0]["grandparent"] == report[1]["grandparent"]
    assert report[0]["forked_by_comm"] == "pyspark.worker"
    # The second daemon came warm: no interpreter start, no imports.
    assert report[1]["ready_ms"] < report[0]["ready_ms"], report
    # The zygote ends with its JVM (this one: other jobs on the machine start their own).
    ours = report[0]["grandparent"]
    assert ours in set(zygotes()) - before or not psutil.pid_exists(ours)
    deadline = time.monotonic() + 10
    while ours in zygotes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ours not in zygotes()


def test_without_the_setting_nothing_is_taken_over(tmp_path, spark_python):
    for prefork in (None, "0"):
        (daemon,) = fake_jvm(tmp_path, ["pyspark.worker"], prefork, spark_python)
        assert daemon["forked_by"] == daemon["daemon"], daemon
        assert "pyspark.daemon" in daemon["forked_by_cmdline"]


def test_an_interpreter_spark_did_not_start_through_the_wrapper_is_never_taken_over(tmp_path):
    """The plain interpreter of the environment, even as a Spark helper with
    the setting on (a session whose user named PYSPARK_PYTHON, another
    Spark application), runs as it is: no eoskit code at its start."""
    (daemon,) = fake_jvm(tmp_path, ["pyspark.worker"], "1", [sys.executable])
    assert daemon["forked_by"] == daemon["daemon"], daemon
    assert "eoskit" not in daemon["forked_by_cmdline"], daemon


def test_the_zygote_key_follows_what_imports_depend_on(monkeypatch):
    from eoskit.runtime.spark import zygote

    base = zygote._address(123)
    assert base.startswith(f"eoskit-zygote-{os.getuid()}-123-") and "\0" not in base
    monkeypatch.setenv("EOSKIT_CRASH_AT", "task_after_prepare@1")
    assert zygote._address(123) != base  # a setting eoskit reads at import
    monkeypatch.delenv("EOSKIT_CRASH_AT")
    monkeypatch.setattr(sys, "path", [*sys.path, "/elsewhere"])
    assert zygote._address(123) != base  # other modules could be imported
    monkeypatch.setattr(sys, "path", [*sys.path[:-1], "/x/pyspark.zip", os.getcwd()])
    assert zygote._address(123) == base  # Spark's zip (dropped by the wrapper and the zygote), the cwd
    assert zygote._address(124) != base  # another JVM



def test_what_a_forking_process_imported_is_exempt_from_the_collector():
    """PySpark's daemon collects garbage in a worker after every task: a
    full collection over the preloaded libraries cost 70 ms a task."""
    result = subprocess.run([sys.executable, "-c", (
        "import gc; from eoskit.runtime.spark.daemon import preload, freeze_imports; "
        "preload('pyspark.worker'); tracked = len(gc.get_objects()); freeze_imports(); "
        "print(tracked, gc.get_freeze_count(), len(gc.get_objects()))")],
        capture_output=True, text=True, timeout=120, check=True)
    tracked, frozen, left = map(int, result.stdout.split())
    assert tracked > 50_000 and frozen >= tracked - 1_000, result.stdout
    assert left < 1_000, result.stdout



STOPPING_JVM = textwrap.dedent('''
    import json, os, signal, socket, struct, subprocess, sys, time

    import psutil

    def alive(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def ignored(pid):  # psutil does not read the signal masks
        with open(f"/proc/{pid}/status") as f:
            return next(line.split()[1] for line in f if line.startswith("SigIgn:"))

    def until(done, within=30):
        deadline = time.monotonic() + within
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)
        return done()

    module, worker_module = sys.argv[1:]
    python = json.loads(os.environ["FAKE_JVM_PYTHON"])  # PYSPARK_PYTHON
    report = {}
    for stop in ("sigterm", "stdin closed"):
        daemon = subprocess.Popen([*python, "-m", module, worker_module],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        port = struct.unpack(">i", daemon.stdout.read(4))[0]
        conn = socket.create_connection(("127.0.0.1", port))
        worker = struct.unpack(">i", conn.makefile("rb").read(4))[0]
        # Started as a task's worker: no longer ignoring SIGHUP (as the daemon does).
        until(lambda: not int(ignored(worker), 16) & 1)
        if stop == "sigterm":
            daemon.terminate()  # Process.destroy: how Spark stops and restarts a daemon
        else:
            daemon.stdin.close()  # the JVM is gone
        daemon.wait(30)
        time.sleep(0.5)
        report[stop] = {"worker_alive": alive(worker)}
        conn.close()  # the JVM lets go of the worker: it reads the end and exits
        report[stop]["worker_ended"] = until(lambda: not alive(worker))
    print(json.dumps(report))
''')


@pytest.mark.parametrize("module,worker_module,prefork", [
    ("eoskit.runtime.spark.worker_daemon", "pyspark.worker", None),
    ("eoskit.runtime.spark.worker_daemon", "pyspark.worker", "1"),
    ("pyspark.daemon", "pyspark.sql.worker.commit_data_source_write", "1"),
])
def test_a_daemon_stopped_by_sigterm_leaves_its_workers_and_one_whose_jvm_is_gone_takes_them(
        tmp_path, spark_python, module, worker_module, prefork):
    """Spark SIGTERMs a daemon to restart it, under tasks that still run in
    its workers (integration_tests/test_python_workers.py says when): they
    live on until the JVM lets go of them. A daemon whose standard input
    closes (its JVM is gone) still ends its workers at once."""
    script = tmp_path / "stopping_jvm.py"
    script.write_text(STOPPING_JVM)
    env = {k: v for k, v in os.environ.items() if k != "EOSKIT_PREFORK"}
    env["FAKE_JVM_PYTHON"] = json.dumps(spark_python)
    if prefork is not None:
        env["EOSKIT_PREFORK"] = prefork
    result = subprocess.run([sys.executable, str(script), module, worker_module], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["sigterm"] == {"worker_alive": True, "worker_ended": True}, report
    assert report["stdin closed"] == {"worker_alive": False, "worker_ended": True}, report


def test_a_sigterm_d_daemon_finds_its_unix_socket_by_its_descriptors(tmp_path):
    """spark.python.unix.domain.socket.enabled mode: the daemon's socket file
    is removed on SIGTERM, found through /proc/self/fd (no frame walking into
    PySpark's manager for its socket_path)."""
    import socket

    from eoskit.runtime.spark.daemon import remove_listening_unix_sockets

    listening, connected_path = tmp_path / "daemon.sock", tmp_path / "other.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(listening))
    server.listen()
    bound_only = socket.socket(socket.AF_UNIX)
    bound_only.bind(str(connected_path))  # bound, not listening: not the daemon's
    try:
        assert remove_listening_unix_sockets() == [str(listening)]
        assert not listening.exists() and connected_path.exists()
        assert server.fileno() >= 0  # its own descriptor left open
    finally:
        server.close()
        bound_only.close()
