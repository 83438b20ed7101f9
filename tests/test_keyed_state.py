"""Helpers for keyed state (``eoskit.runtime.state.keyed``), and job files
whose stateful processors reach Spark's workers (``jobfile.load_module``)."""

from __future__ import annotations

import pickle
import sys

import pytest
from pyspark import cloudpickle

from eoskit.runtime.job.jobfile import load_pipeline
from eoskit.runtime.state.keyed import StateTTLError, replace_timer, ttl


def test_a_ttl_reads_like_a_setting_and_must_be_positive():
    assert ttl("30 minutes") == 1_800_000 and ttl("500 ms") == 500 and ttl(2) == 2000
    for bad, message in (("0 s", "must be greater than zero"), ("-1 s", "cannot be negative"),
                         ("0.1 ms", "must be greater than zero"), ("later", "expected a duration")):
        with pytest.raises(StateTTLError, match=f"TTL of seen = '{bad}': .*{message}"):
            ttl(bad, state="seen")


class Handle:
    """The timer calls of Spark's StatefulProcessorHandle, for one key."""

    def __init__(self, *timers: int) -> None:
        self.timers = set(timers)

    def listTimers(self):
        return iter(sorted(self.timers))

    def deleteTimer(self, at: int) -> None:
        self.timers.remove(at)

    def registerTimer(self, at: int) -> None:
        self.timers.add(at)


def test_replace_timer_leaves_the_key_one_timer():
    handle = Handle(100, 200)
    replace_timer(handle, 300)
    assert handle.timers == {300}
    replace_timer(handle, 300)
    assert handle.timers == {300}


JOB = '''
from pyspark.sql.streaming import StatefulProcessor
from eoskit.runtime import Pipeline

class Counter(StatefulProcessor):
    def init(self, handle):
        pass
    def handleInputRows(self, key, rows, timerValues):
        return iter(())

pipeline = Pipeline("counts", source=None, sink=None, transform=lambda df: df)
'''


def test_a_job_files_classes_travel_by_value_to_workers_that_cannot_import_it(tmp_path):
    job = tmp_path / "stateful_job.py"
    job.write_text(JOB)
    load_pipeline(job)
    module = sys.modules["eoskit_job_stateful_job"]
    shipped = cloudpickle.dumps(module.Counter)
    del sys.modules["eoskit_job_stateful_job"]  # as in a Python worker
    assert pickle.loads(shipped).__name__ == "Counter"
