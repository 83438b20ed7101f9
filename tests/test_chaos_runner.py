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

from eoskit.runtime.chaos import processes
from eoskit.runtime.chaos.redirect import ChaosRefusedError, check, redirect, write_spec


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
    from eoskit.runtime.pipeline import Pipeline

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


def test_workers_forked_by_a_daemon_spark_started_through_eoskit_spark_python_are_found(
        tmp_path, spark_python):
    """Spark's Python in local mode is a script, eoskit-spark-python: the
    daemon it runs, and the workers the daemon forks, are named after it."""
    java = tmp_path / "java"
    os.symlink(sys.executable, java)
    (tmp_path / "standin_daemon.py").write_text(
        "import os, time\nif os.fork() == 0:\n    time.sleep(60)\n    os._exit(0)\ntime.sleep(60)\n")
    tree = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.argv[1], '-m', 'standin_daemon'], cwd=sys.argv[2])\n"
            "time.sleep(60)\n")
    jvm = subprocess.Popen([str(java), "-c", tree, spark_python[-1], str(tmp_path)])
    try:
        deadline = time.monotonic() + 20
        while len(processes.descendants(jvm.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        below = {p.pid: p for p in processes.descendants(os.getpid())}
        workers = processes.python_workers(os.getpid())
        assert len(workers) == 1, below
        worker = below[workers[0]]
        assert worker.name == below[worker.ppid].name == "eoskit-spark-py", below
        assert below[worker.ppid].ppid == jvm.pid
    finally:
        for p in processes.descendants(jvm.pid):
            processes.kill(p.pid)
        jvm.kill()
        jvm.wait()


def test_python_workers_are_the_python_children_of_a_python_process_below_a_jvm(tmp_path):
    """A stand-in tree: driver (this test's python) -> 'java' -> daemon (python)
    -> worker (python); a python child of the driver itself is no worker."""
    java = tmp_path / "java"
    os.symlink(sys.executable, java)  # a process whose executable's name is java
    tree = ("import subprocess, sys, time\n"
            "daemon = subprocess.Popen([sys.argv[1], '-c', 'import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, \"-c\", \"import time; time.sleep(60)\"]); time.sleep(60)'])\n"
            "time.sleep(60)\n")
    jvm = subprocess.Popen([str(java), "-c", tree, sys.executable])
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 20
        while len([p for p in processes.descendants(os.getpid()) if p.ppid != os.getpid()]) < 2 \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        below = processes.descendants(os.getpid())
        names = {p.pid: p for p in below}
        workers = processes.python_workers(os.getpid())
        assert len(workers) == 1 and names[workers[0]].ppid != jvm.pid, below
        assert helper.pid not in workers
        assert processes.kill(workers[0]) and not processes.kill(2**22 + 12345)
    finally:
        for p in processes.descendants(jvm.pid):
            processes.kill(p.pid)
        jvm.kill()
        helper.kill()
        jvm.wait()
        helper.wait()


def test_a_kafka_pin_becomes_the_source_s_start_and_end():
    from eoskit.connectors.kafka.pin import bounded_options, describe, offsets

    pin = {"start": {"orders": {"0": 5, "1": 0}}, "end": {"orders": {"0": 105, "1": 50}}}
    given = {"subscribe": "orders", "startingTimestamp": "1000", "maxOffsetsPerTrigger": "10"}
    bounded = bounded_options(given, pin)
    assert "startingTimestamp" not in bounded and bounded["maxOffsetsPerTrigger"] == "10"
    assert json.loads(bounded["startingOffsets"]) == pin["start"]
    assert json.loads(bounded["stopAtOffsets"]) == pin["end"]
    assert offsets(pin) == 150 and describe(pin) == "orders: 2 partitions, 150 offsets"


def test_stop_at_offsets_is_streaming_only_and_checked():
    from eoskit.connectors.kafka.settings import KafkaSourceSettings
    from eoskit.twophase.options import OptionError

    base = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "orders"}
    settings = KafkaSourceSettings.parse({**base, "stopAtOffsets": '{"orders": {"0": 12}}'})
    assert settings.stop_at == {("orders", 0): 12}
    with pytest.raises(OptionError, match="stopAtOffsets"):
        KafkaSourceSettings.parse({**base, "stopAtOffsets": "latest"})
