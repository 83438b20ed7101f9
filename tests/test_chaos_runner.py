"""eoskit chaos's checks and process finding, without Spark or services:
a job whose sink or source cannot be redirected is refused; the run's job
file hands the user's job back redirected; a run's Python workers are found
below its JVM; a Kafka source's pin becomes its start and its end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from eoskit.runtime.devtools.chaos import processes
from eoskit.runtime.devtools.chaos.redirect import ChaosRefusedError, check, redirect, write_spec


class Source:
    def read_stream(self, spark):  # pragma: no cover - never started here
        raise AssertionError

    def describe(self) -> str:
        return "a source"


class ReplayableSource(Source):
    def pin(self) -> dict:
        return {"end": 10}

    def bounded(self, pin: dict) -> "ReplayableSource":
        bounded = ReplayableSource()
        bounded.pinned = pin
        return bounded

    def describe_pin(self, pin: dict) -> str:
        return "ten"


class Sink:
    def write_stream(self, df):  # pragma: no cover
        raise AssertionError

    def describe(self) -> str:
        return "a sink"


class Scratch:
    def __init__(self, suffix: str) -> None:
        self.name = f"scratch {suffix}"
        self.suffix = suffix

    def sink(self) -> Sink:
        sink = Sink()
        sink.suffix = self.suffix
        return sink

    def create(self) -> None: ...
    def rows(self): return (), [], ()
    def drop(self) -> None: ...


class RedirectableSink(Sink):
    def scratch(self, suffix: str) -> Scratch:
        return Scratch(suffix)


def pipeline(source, sink):
    from eoskit.runtime.job.pipeline import Pipeline

    return Pipeline("job", source, sink)


def test_a_sink_without_a_scratch_copy_is_refused_naming_it():
    with pytest.raises(ChaosRefusedError, match="the sink a sink cannot be redirected"):
        check(pipeline(ReplayableSource(), Sink()))


def test_a_source_that_cannot_be_pinned_is_refused_naming_it():
    with pytest.raises(ChaosRefusedError, match="the source a source cannot be pinned"):
        check(pipeline(Source(), RedirectableSink()))


def test_the_redirected_job_keeps_everything_but_its_source_and_sink():
    original = pipeline(ReplayableSource(), RedirectableSink())
    moved = redirect(original, {"end": 7}, "chaosab12r")
    assert moved.source.pinned == {"end": 7} and moved.sink.suffix == "chaosab12r"
    assert moved.name == original.name and moved.settings == original.settings
    assert original.sink.__class__ is RedirectableSink  # the user's pipeline is untouched


def test_the_run_s_job_file_names_its_spec(tmp_path):
    job = tmp_path / "orders.py"
    job.write_text("")
    job_file = write_spec(tmp_path, job, {"start": {}, "end": {}}, "chaos1x")
    spec = json.loads((tmp_path / "chaos-run.json").read_text())
    assert spec == {"job": str(job.resolve()), "pin": {"start": {}, "end": {}}, "suffix": "chaos1x"}
    assert repr(str(tmp_path / "chaos-run.json")) in job_file.read_text()
    compile(job_file.read_text(), str(job_file), "exec")


#: A stand-in process: moves to a process group of its own when its spec
#: says so (as PySpark's daemons do), renames itself (``comm``) when it names it,
#: starts its children (each with its own executable and extra arguments,
#: which show in its command line), then sleeps.
NODE = """import ctypes, json, os, subprocess, sys, time
spec = json.loads(sys.argv[1])
if spec.get("own_group"):
    os.setpgid(0, 0)
if spec.get("name"):
    ctypes.CDLL(None).prctl(15, spec["name"].encode())
for child in spec.get("children", []):
    subprocess.Popen([child.get("exe", os.environ["NODE_PYTHON"]), sys.argv[0], json.dumps(child),
                      *child.get("argv", [])])
time.sleep(60)
"""


def start_tree(tmp_path, spec: dict) -> subprocess.Popen:
    """A process tree as ``spec`` says, in a process group of its own (a run's)."""
    node = tmp_path / "node.py"
    node.write_text(NODE)
    java = tmp_path / "java"
    if not java.exists():
        os.symlink(sys.executable, java)  # a process whose executable's name is java
    return subprocess.Popen([sys.executable, str(node), json.dumps(spec)], start_new_session=True,
                            env={**os.environ, "NODE_PYTHON": sys.executable})


def nodes(spec: dict) -> list[dict]:
    return [spec, *(n for child in spec.get("children", []) for n in nodes(child))]


def wait_for_group(root: subprocess.Popen, spec: dict) -> dict[int, processes.Process]:
    """The tree's processes once all have started and renamed themselves."""
    named = sum(1 for n in nodes(spec) if n.get("name"))
    deadline = time.monotonic() + 20
    while True:
        members = processes.run_processes(root.pid)
        renamed = sum(1 for p in members.values() if p.name in {n.get("name") for n in nodes(spec)})
        if len(members) >= len(nodes(spec)) and renamed >= named:
            return members
        assert time.monotonic() < deadline, members
        time.sleep(0.05)


def end_tree(root: subprocess.Popen) -> None:
    processes.kill_group(root.pid)
    root.wait()


def test_task_workers_under_the_zygote_are_the_forks_of_the_daemon_named_pyspark_worker(tmp_path):
    """driver -> java -> the launcher of the worker daemon (its command line)
    -> zygote -> task daemon (pyspark.worker, in a process group of its own)
    -> 2 workers (pyspark.worker); the zygote also forked a planner's daemon
    with a worker of its own. Only the two are task workers: not the zygote,
    whose parent's command line runs the worker daemon's module."""
    worker = {"name": "pyspark.worker"}
    spec = {"children": [{"exe": str(tmp_path / "java"), "children": [
        {"argv": ["-m", "eoskit.runtime.spark.worker_daemon", "pyspark.worker"], "children": [
            {"argv": ["-m", "eoskit.runtime.spark.zygote"], "children": [
                {"name": "pyspark.worker", "own_group": True, "children": [worker, worker]},
                {"name": "plan_data_sourc", "own_group": True, "children": [{"name": "plan_data_sourc"}]}]}]}]}]}
    root = start_tree(tmp_path, spec)
    try:
        members = wait_for_group(root, spec)
        workers = processes.python_workers(root.pid)
        assert len(workers) == 2, members
        assert all(members[w].name == "pyspark.worker" and members[members[w].ppid].name == "pyspark.worker"
                   for w in workers), members
        assert members[workers[0]].group != root.pid  # below the run's group, not in it
        assert processes.python_workers(os.getpid()) == []  # another group's workers are not ours
        assert processes.kill(workers[0]) and not processes.kill(2**22 + 12345)
    finally:
        for pid in processes.run_processes(root.pid):
            processes.kill(pid)
        end_tree(root)


def test_task_workers_without_the_zygote_are_the_children_of_the_worker_daemon(tmp_path):
    """driver -> java -> worker daemon (its command line runs eoskit's
    worker daemon module) -> a worker (forked: the same command line); a
    planner's daemon (pyspark.daemon) with a worker of its own is no task's."""
    daemon = ["-m", "eoskit.runtime.spark.worker_daemon", "pyspark.worker"]
    spec = {"children": [{"exe": str(tmp_path / "java"), "children": [
        {"argv": daemon, "children": [{"argv": daemon}]},
        {"argv": ["-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"],
         "children": [{"argv": ["-m", "pyspark.daemon"]}]}]}]}
    root = start_tree(tmp_path, spec)
    try:
        members = wait_for_group(root, spec)
        workers = processes.python_workers(root.pid)
        assert len(workers) == 1, members
        (worker,) = workers
        assert "eoskit.runtime.spark.worker_daemon" in processes._cmdline(worker)
        assert members[members[worker].ppid].ppid != root.pid  # the daemon's parent is the JVM
    finally:
        end_tree(root)


def test_a_kafka_pin_becomes_the_source_s_start_and_end():
    from eoskit.connectors.kafka.pin import bounded_options, describe, offsets

    pin = {"start": {"orders": {"0": 5, "1": 0}}, "end": {"orders": {"0": 105, "1": 50}}}
    given = {"subscribe": "orders", "startingTimestamp": "1000", "maxOffsetsPerTrigger": "10",
             "commitOffsetsToGroup": "orders-job"}
    bounded = bounded_options(given, pin)
    assert "startingTimestamp" not in bounded and bounded["maxOffsetsPerTrigger"] == "10"
    assert "commitOffsetsToGroup" not in bounded  # the job's consumer group is never moved
    assert json.loads(bounded["startingOffsets"]) == pin["start"]
    assert json.loads(bounded["stopAtOffsets"]) == pin["end"]
    assert offsets(pin) == 150 and describe(pin) == "orders: 2 partitions, 150 offsets"


def test_stop_at_offsets_is_streaming_only_and_checked():
    from eoskit.connectors.kafka.settings import KafkaSourceSettings
    from eoskit.core.options import OptionError

    base = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "orders"}
    settings = KafkaSourceSettings.parse({**base, "stopAtOffsets": '{"orders": {"0": 12}}'})
    assert settings.stop_at == {("orders", 0): 12}
    with pytest.raises(OptionError, match="stopAtOffsets"):
        KafkaSourceSettings.parse({**base, "stopAtOffsets": "latest"})
