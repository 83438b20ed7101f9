"""The runner's timers across several of their periods, on a fake query
(the runner asks a StreamingQuery for isActive, status, lastProgress and
stop, and waits for Spark's listener to hear of its end; nothing else here
is faked): ``checkpoint_timeout`` is per batch,
a stop request that stays pending is counted once, and a stop waits for a
batch Spark logged before the runner saw the one in flight end, or, with a
source that holds a planning (core/stop_gate.py), for that planning."""

from __future__ import annotations

import threading
import time

import pytest

from eoskit.core.stop_gate import StopGate
from eoskit.runtime.job import runner as runner_module
from eoskit.runtime.job.control import ControlDir
from eoskit.runtime.job.failures import Failure
from eoskit.runtime.job.listeners import CheckpointStatus, Listeners
from eoskit.runtime.job.runner import Runner
from eoskit.runtime.job.settings import JobSettings
from eoskit.runtime.job.signals import STOP_DRAIN_BATCHES


class FakeQuery:
    """Batches of the given lengths back to back (the trigger always
    active), then idle; each completed batch shows in lastProgress."""

    runId = "run-1"  # noqa: N815 - PySpark's name; its end never reaches a listener here

    def __init__(self, lengths: list[float], caught_up: bool = False) -> None:
        self.lengths = lengths
        self.started = time.monotonic()
        self.stopped = False
        #: Ends by itself after its batches, as a run until caught up does.
        self.caught_up = caught_up

    def _done(self) -> int:
        elapsed, done = time.monotonic() - self.started, 0
        for length in self.lengths:
            if elapsed < length:
                break
            elapsed -= length
            done += 1
        return done

    @property
    def isActive(self) -> bool:  # noqa: N802 - PySpark's name
        # Ends by itself after 20 s: a runner that never stops it fails the test, not hangs it.
        if self.caught_up and self._done() == len(self.lengths):
            return False
        return not self.stopped and time.monotonic() - self.started < 20

    @property
    def status(self) -> dict:
        return {"isTriggerActive": self._done() < len(self.lengths)}

    @property
    def lastProgress(self) -> dict | None:  # noqa: N802 - PySpark's name
        done = self._done()
        return {"batchId": done - 1} if done else None

    @property
    def recentProgress(self) -> list:  # noqa: N802 - PySpark's name
        return []

    def stop(self) -> None:
        self.stopped = True

    def awaitTermination(self) -> None:  # noqa: N802 - PySpark's name
        pass

    def exception(self) -> None:
        return None


class GatedSource:
    """A source the runner gives its stop gate (``runtime.components.Gated``)."""

    def with_stop_gate(self, directory: str) -> "GatedSource":
        return self


def runner(tmp_path, gate: StopGate | None = None, **settings: str) -> Runner:
    r = Runner.__new__(Runner)  # only what _watch and _read_requests use
    r.pipeline = type("Pipeline", (), {"source": GatedSource() if gate is not None else None})()
    r.gate = gate
    r.settings = JobSettings.of(**settings)
    r.checkpoint = str(tmp_path)
    r.control = ControlDir(str(tmp_path))
    r.status = CheckpointStatus(r.control)
    r.stop = runner_module.StopRequest()
    r.stop_savepoint = None
    r._stops_seen = set()
    r._settled_seen = set()
    r.started_at = time.time()
    r.listeners = type("NoListeners", (), {"on_progress": lambda self, p: None})()
    r.spark_listener = Listeners().spark_listener("job")
    r._report_settled = lambda: None
    return r


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch):
    monkeypatch.setattr(runner_module, "POLL_S", 0.02)
    monkeypatch.setattr(runner_module, "LISTENER_DRAIN_S", 0.02)


def test_checkpoint_timeout_is_per_batch_across_many_of_its_periods(tmp_path):
    """Twelve batches of 0.6 x the timeout run for 7 timeouts in all: none
    is cut; the thirteenth, 2 x the timeout, is, and named."""
    r = runner(tmp_path, checkpoint_timeout="0.25s")
    query = FakeQuery([0.15] * 12 + [0.5, 0.1])
    started = time.monotonic()
    outcome = r._watch(query, r.control.claim("job"))
    assert isinstance(outcome, Failure) and not outcome.permanent
    assert outcome.message == "batch 12 ran longer than checkpoint_timeout (0.25 s)"
    assert time.monotonic() - started > 12 * 0.15 and query.stopped


def test_a_pending_stop_request_counts_once_however_many_polls_see_it(tmp_path):
    """A stop with a savepoint stays pending until the savepoint is taken;
    seen at every poll of a long batch, it once counted as a second stop
    (which forces the stop, mid-batch)."""
    r = runner(tmp_path)
    r._savepoint = lambda request: r.control.answer(request, status="done")
    query = FakeQuery([1.0, 0.1])
    threading.Timer(0.1, lambda: r.control.send("stop", str(tmp_path / "sp"))).start()
    assert r._watch(query, r.control.claim("job")) is runner_module.FINISHED
    assert r.stop.count == 1 and not r.stop.forced
    assert query._done() >= 1, "the batch in flight was cut"


class LoggedQuery(FakeQuery):
    """A FakeQuery that keeps Spark's offset and commit logs in ``checkpoint``
    as it goes: each batch logged when it starts (the moment the one before
    ends), committed when it ends. ``forever``: batches never stop coming."""

    def __init__(self, checkpoint, lengths: list[float], forever: bool = False) -> None:
        super().__init__(lengths)
        self.checkpoint = checkpoint
        self.forever = forever
        for log in ("offsets", "commits"):
            (checkpoint / log).mkdir()

    def _done(self) -> int:
        done = super()._done()
        for n in range(min(done + 1, len(self.lengths)) if not self.stopped else 0):
            (self.checkpoint / "offsets" / str(n)).touch()
        for n in range(done if not self.stopped else 0):
            (self.checkpoint / "commits" / str(n)).touch()
        return done

    @property
    def status(self) -> dict:
        return {"isTriggerActive": self.forever or self._done() < len(self.lengths)}

    def cut(self) -> list[int]:
        """Batches logged and not committed."""
        logged = {int(p.name) for p in (self.checkpoint / "offsets").iterdir()}
        return sorted(logged - {int(p.name) for p in (self.checkpoint / "commits").iterdir()})


def test_a_stop_waits_for_a_batch_planned_before_the_one_in_flight_was_seen_ending(tmp_path):
    """Batches back to back: the next one is in the offset log by the time
    the runner sees the end of the batch that was in flight when the stop
    came. Stopping then cut it short (replayed at the next start, but not the boundary promised):
    the stop now waits for it too, and ends with every logged batch committed."""
    r = runner(tmp_path)
    query = LoggedQuery(tmp_path, [0.3, 0.3])
    threading.Timer(0.1, lambda: r.stop._handle(0, None)).start()
    assert r._watch(query, r.control.claim("job")) is runner_module.FINISHED
    assert query.stopped and query._done() == 2
    assert query.cut() == [], "a logged batch was cut short"


def test_a_stop_among_endless_back_to_back_batches_waits_a_bounded_number(tmp_path, caplog):
    """Batches that never leave a gap: the stop waits for the batch in flight
    and STOP_DRAIN_BATCHES more, then stops in the next one, saying so."""
    r = runner(tmp_path)
    query = LoggedQuery(tmp_path, [0.15] * 30, forever=True)
    threading.Timer(0.05, lambda: r.stop._handle(0, None)).start()
    with caplog.at_level("WARNING", logger=runner_module.__name__):
        assert r._watch(query, r.control.claim("job")) is runner_module.FINISHED
    assert query.stopped
    cut = query.cut()
    assert cut == [STOP_DRAIN_BATCHES + 1], cut
    assert f"stopped in batch {cut[0]}, which the next start replays" in caplog.text


class GatedLoop(FakeQuery):
    """Spark's micro-batch loop with a gated source, on a thread: batches
    back to back for ever, each planned by the source (the real
    ``StopGate.hold``) and logged only if the planning returns, then run,
    then committed. ``stop()`` ends the loop, as Spark's interrupt ends a
    held planning."""

    def __init__(self, checkpoint, gate: StopGate, length: float) -> None:
        super().__init__([])
        self.checkpoint, self.gate, self.length = checkpoint, gate, length
        self.done, self.planning = 0, False
        self.held_returned = threading.Event()
        for log in ("offsets", "commits"):
            (checkpoint / log).mkdir()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        n = 0
        while not self.stopped:
            self.planning = True
            if self.gate.hold(hold_s=10):
                self.held_returned.set()
                return  # interrupted (stopped) or released: nothing more is logged
            if self.stopped:
                return
            (self.checkpoint / "offsets" / str(n)).touch()
            time.sleep(self.length)
            (self.checkpoint / "commits" / str(n)).touch()
            n += 1
            self.done = n

    def _done(self) -> int:
        return self.done

    @property
    def status(self) -> dict:
        return {"isTriggerActive": True}

    def cut(self) -> list[int]:
        logged = {int(p.name) for p in (self.checkpoint / "offsets").iterdir()}
        return sorted(logged - {int(p.name) for p in (self.checkpoint / "commits").iterdir()})


def test_with_a_gated_source_a_stop_among_endless_back_to_back_batches_cuts_none(tmp_path):
    """The case the bound above gives up on: with the source holding the
    next planning, the stop ends at a boundary however long batches keep
    coming, and releases the held planning afterwards."""
    (tmp_path / "gate").mkdir()
    gate = StopGate(str(tmp_path / "gate"))
    r = runner(tmp_path / "ck", gate)
    (tmp_path / "ck").mkdir()
    query = GatedLoop(tmp_path / "ck", gate, 0.1)
    threading.Timer(0.25, lambda: r.stop._handle(0, None)).start()
    assert r._watch(query, r.control.claim("job")) is runner_module.FINISHED
    assert query.stopped and query.done >= 2
    assert query.cut() == [], "a logged batch was cut short"
    assert query.held_returned.wait(5), "the held planning was never released"
    assert not gate.held() and not (tmp_path / "gate" / "stop").exists()


def test_a_stop_gate_whose_folder_a_temp_cleaner_removed_is_made_again(tmp_path):
    """A job runs for weeks; its gate's empty temp folder may be cleaned
    away meanwhile. Closing the gate makes it again, and a gate that cannot
    be closed says so (the runner then watches the offset log)."""
    gate = StopGate(str(tmp_path / "gone"))
    assert gate.close() and gate.hold(hold_s=0.05)
    (tmp_path / "file").touch()
    assert StopGate(str(tmp_path / "file" / "gate")).close() is False


def test_a_stop_gate_holds_only_while_closed_and_only_for_its_bound(tmp_path):
    gate = StopGate(str(tmp_path))
    assert gate.hold() is False and not gate.held()  # open: planning goes on at once
    gate.close()
    released = threading.Timer(0.2, gate.release)
    released.start()
    started = time.monotonic()
    assert gate.hold(hold_s=10) is True
    assert 0.15 < time.monotonic() - started < 5  # held until released
    assert not gate.held()
    gate.close()
    started = time.monotonic()
    assert gate.hold(hold_s=0.1) is True and gate.held()  # never released: the bound ends it
    assert time.monotonic() - started < 5


# -- a restart whose start fails --------------------------------------------------


class FailedQuery(FakeQuery):
    """A query that has failed with ``error``."""

    def __init__(self, error: BaseException) -> None:
        super().__init__([])
        self.error = error
        self.stopped = True

    def exception(self) -> BaseException:
        return self.error


class Pipeline:
    """Each start returns the next query, or raises the next error."""

    name = "flaky"
    chained = False
    source = None

    def __init__(self, *starts) -> None:
        self.starts = list(starts)

    def start(self, spark, checkpoint, until_caught_up, settings, stop_gate=None):
        what = self.starts.pop(0)
        if isinstance(what, BaseException):
            raise what
        return what


def run_loop(tmp_path, pipeline: Pipeline, strategy: str) -> str:
    import io

    out = io.StringIO()
    r = Runner(pipeline, str(tmp_path), None, JobSettings.of(restart_strategy=strategy), out)
    r._loop(r.control.claim("job"))
    return out.getvalue()


def _broker_down() -> BaseException:
    from pyspark.errors import PySparkException

    return PySparkException(message="cannot reach Kafka at kafka.bootstrap.servers='b:9092' within 15 s")


def test_a_restart_that_cannot_start_yet_is_retried_by_the_restart_strategy(tmp_path):
    """The broker was killed: the query fails, and the restart's start finds
    it still down; the restart strategy tries again, and the job goes on."""
    from eoskit.connectors.kafka.client import BrokerUnreachableError

    pipeline = Pipeline(FailedQuery(BrokerUnreachableError("the broker went away")), _broker_down(),
                        _broker_down(), FakeQuery([0.05], caught_up=True))
    out = run_loop(tmp_path, pipeline, "fixed_delay(attempts=5, delay=0s)")
    assert pipeline.starts == []
    assert "restart 3 in 0.0s after: cannot reach Kafka" in out, out


def test_the_first_start_fails_at_once_and_the_strategy_still_bounds_restarts(tmp_path):
    from eoskit.connectors.kafka.client import BrokerUnreachableError
    from eoskit.runtime.job.runner import PipelineError

    with pytest.raises(PipelineError, match="could not start: cannot reach Kafka"):
        run_loop(tmp_path, Pipeline(_broker_down()), "fixed_delay(attempts=5, delay=0s)")
    pipeline = Pipeline(FailedQuery(BrokerUnreachableError("the broker went away")),
                        *[_broker_down() for _ in range(3)])
    with pytest.raises(PipelineError, match="gave up after 2 restart"):
        run_loop(tmp_path / "b", pipeline, "fixed_delay(attempts=2, delay=0s)")


# -- where a stop's boundary is (signals.BoundaryStop) ------------------------------

def test_a_boundary_stop_is_ready_between_triggers_and_after_the_batch_in_flight():
    from eoskit.runtime.job.signals import BoundaryStop

    def never():
        raise AssertionError("the offset log read before a batch completed")

    assert BoundaryStop(4).ready(4, trigger_active=False, newest_planned=never)
    assert not BoundaryStop(4).ready(4, trigger_active=True, newest_planned=never)
    assert not BoundaryStop(-1).ready(None, trigger_active=True, newest_planned=never)
    assert BoundaryStop(4).ready(5, trigger_active=True, newest_planned=lambda: 5)
    assert BoundaryStop(-1).ready(0, trigger_active=True, newest_planned=lambda: None)


def test_a_boundary_stop_follows_batches_logged_back_to_back_up_to_its_bound():
    from eoskit.runtime.job.signals import STOP_DRAIN_BATCHES, BoundaryStop

    stop = BoundaryStop(4)
    done = 5
    for _ in range(STOP_DRAIN_BATCHES):
        assert not stop.ready(done, trigger_active=True, newest_planned=lambda: done + 1)
        assert stop.after == done
        assert not stop.ready(done, trigger_active=True, newest_planned=lambda: done + 1)
        done += 1
    assert stop.ready(done, trigger_active=True, newest_planned=lambda: done + 1)
    assert stop.gave_up and stop.drained == STOP_DRAIN_BATCHES + 1
