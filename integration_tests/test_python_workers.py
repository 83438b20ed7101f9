"""Spark's Python worker daemon, restarted under running tasks.

Spark restarts a Python daemon (SIGTERM, then a new one) when asking it for
a worker seems to time out, and a task killed while it asks looks just like
that: a stopped or failed query's tasks are interrupted, and the interrupted
wait returns at once as "Timed out while waiting for the Python worker to
connect back after 60000 ms". PySpark's own daemon takes every worker it
forked down with it, and the session's other running tasks fail ("Broken
pipe", EOFException): a query restarted after a failure could fail again
for its predecessor's cancelled tasks. eoskit's daemon exits alone.

The test does what Spark's restart does, at a moment it chooses: while a
job's tasks run in their Python workers, it SIGTERMs the process Spark
started as the daemon (``Process.destroy``)."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pyarrow as pa
import pytest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="compares the daemons' stderr in /proc")


def _parent(pid: int) -> int:
    return psutil.Process(pid).ppid()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _started_by_spark(jvm: int, daemon: int) -> int | None:
    """The process the JVM started as ``daemon``, the process that forked the
    task workers: the daemon itself, or under the zygote the launcher that
    handed it its pipes (they share stderr). Other daemons of the JVM (one per
    Python environment of its tasks) share neither. (Their stderr is a pipe,
    which psutil does not show: read from /proc.)"""
    stderr = os.readlink(f"/proc/{daemon}/fd/2")
    for process in psutil.process_iter(["cmdline", "ppid"]):
        try:
            if ("eoskit.runtime.spark.worker_daemon" in " ".join(process.info["cmdline"] or ())
                    and process.info["ppid"] == jvm
                    and (process.pid == daemon or os.readlink(f"/proc/{process.pid}/fd/2") == stderr)):
                return process.pid
        except OSError:
            pass
    return None


def test_a_restarted_daemon_leaves_the_running_tasks_to_finish(spark, tmp_path):
    started, go = tmp_path / "started", tmp_path / "go"
    started.mkdir()

    def hold(batches):
        from pyspark import TaskContext

        context = TaskContext.get()
        (started / f"{os.getpid()}-{context.partitionId()}").touch()
        while not go.exists():
            time.sleep(0.05)
        for batch in batches:
            yield pa.RecordBatch.from_pydict({
                "id": batch.column("id"),
                "pid": pa.array([os.getpid()] * batch.num_rows, pa.int64()),
                "attempt": pa.array([context.attemptNumber()] * batch.num_rows, pa.int32())})

    result: dict[str, object] = {}

    def job() -> None:
        try:
            result["rows"] = spark.range(0, 100, 1, 2).mapInArrow(
                hold, "id BIGINT, pid BIGINT, attempt INT").collect()
        except Exception as exc:  # noqa: BLE001 - reported below
            result["error"] = exc

    runner = threading.Thread(target=job)
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while len(list(started.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = {int(name.split("-")[0]) for name in os.listdir(started)}
        assert len(workers) == 2, f"two tasks did not start their Python workers: {sorted(os.listdir(started))}"
        jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        forked_by = {_parent(w) for w in workers}
        assert len(forked_by) == 1, f"the two workers came from {forked_by}"
        (daemon,) = forked_by
        started = _started_by_spark(jvm, daemon)
        assert started is not None, f"no process the JVM ({jvm}) started is the daemon {daemon}"
        os.kill(started, signal.SIGTERM)  # what Spark's restart of it does
        deadline = time.monotonic() + 30
        while (_alive(daemon) or _alive(started)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not (_alive(daemon) or _alive(started)), "the daemon did not stop"
        time.sleep(0.5)
        assert all(_alive(w) for w in workers), "the daemon took its running workers with it"
    finally:
        go.touch()
        runner.join(120)
    assert "error" not in result, f"the job failed: {result.get('error')}"
    rows = result["rows"]
    assert sorted(r.id for r in rows) == list(range(100))
    # Each task finished in its first attempt, in the worker that started it.
    assert {r.pid for r in rows} == workers and {r.attempt for r in rows} == {0}
    # The next job gets a new daemon (Spark finds the old one gone) and runs.
    assert spark.range(0, 10, 1, 2).mapInArrow(lambda bs: bs, "id BIGINT").count() == 10
