"""State TTL across several TTL periods, on the production path (issue 36,
design section 4): ``FirstSeenWithin`` of examples/keyed_state.py with a
3 s TTL and a 1 s trigger, run by ``eoskit run`` from Kafka into the
eoskit-json sink (two-phase, in update mode through ``foreachBatch``), on
RocksDB with incremental checkpoints and ``state_snapshot_interval=2``, in
``ProcessingTime`` mode; once with ``state_compact_on_commit`` off and once
on.

Input, in ticks of a second once the job's first batch is done: A every
tick, B for three ticks, quiet for two TTL periods, back for three; C once;
one-off keys D at the end, then nothing. The driver is SIGKILLed (a crash
point armed in the running job, ``crash.arm``) in a batch that evicts
state, after its sink decision; the restart replays that batch.

The oracle is the processor itself, run over what each batch read (its
offset range in ``offsets/n``) at its ``batchTimestampMs``: the time TTL
reads, not the wall clock, so the test does not depend on how fast the
machine is. Spark's rule (``StateTTL.isExpired``): a value written at ``w``
is expired in every batch whose timestamp is ``>= w + ttl``; it then reads
as absent, and at the end of that batch every expired entry is evicted.

Asserts: every committed batch's rows are the oracle's, each batch once
(the replayed one included); the killed batch is one that evicts; the keys
in the state variable ``seen`` (what ``eoskit state read --state-var seen``
prints: ``read_state``) after each TTL period and after the replay are the
oracle's live keys.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from eoskit.connectors.files import committed_batches
from eoskit.core import crash
from eoskit.runtime.state.checkpoints import Checkpoint
from eoskit.runtime.state.inspection import read_state
from eoskit.testing.conformance.harness import reap_group, wait_for_file

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "keyed_state.py"
TTL_MS = 3000
TICK_S = 1.0

JOB = '''
import os

from pyspark.sql import functions as F

from eoskit.connectors.format_sink import FormatSink
from eoskit.connectors.kafka import KafkaSource
from eoskit.runtime import Pipeline
from eoskit.runtime.job.jobfile import load_module

examples = load_module(os.environ["TEST_EXAMPLES"], "eoskit_examples_keyed_state")

pipeline = Pipeline(
    name="ttl",
    source=KafkaSource(os.environ["TEST_KAFKA"], {"subscribe": os.environ["TEST_TOPIC"],
                                                  "startingOffsets": "earliest"}),
    transform=lambda df: examples.first_seen_within(
        df.select(F.col("value").cast("string").alias("id")), "3 seconds"),
    sink=FormatSink("eoskit-json", {"path": os.environ["TEST_OUT"], "sinkId": "ttl"},
                    output_mode="update"),
    checkpoint_interval="1 second",
    restart_strategy="none",  # the test restarts it
    state_backend="rocksdb",
    incremental_checkpoints=True,
    state_snapshot_interval=2,
    state_compact_on_commit=os.environ["TEST_COMPACT"],
    spark_conf={
        "spark.master": "local[2,3]",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    },
)
'''


def schedule() -> list[list[str]]:
    """The keys produced at each tick (after the warm-up key W)."""
    ticks: list[list[str]] = [[] for _ in range(15)]
    for t in range(15):
        ticks[t].append("A")
    for t in (0, 1, 2, 9, 10, 11):  # quiet from 3 to 8: two TTL periods
        ticks[t].append("B")
    ticks[1].append("C")
    for t in (12, 13, 14):
        ticks[t].append(f"D{t}")
    return ticks


@dataclass
class Oracle:
    """``FirstSeenWithin`` replayed over the logged batches."""

    emitted: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    live: dict[int, set[str]] = field(default_factory=dict)
    evicted: dict[int, set[str]] = field(default_factory=dict)
    stamps: dict[int, int] = field(default_factory=dict)


def oracle(checkpoint: Path, topic: str, keys: list[str], upto: int | None = None) -> Oracle:
    """From ``offsets/0..upto`` (default: every planned batch): the record at
    offset i of the topic's one partition is ``keys[i]``."""
    ck = Checkpoint(str(checkpoint))
    out, written, start = Oracle(), {}, 0
    for n in ck.batch_ids():
        if upto is not None and n > upto:
            break
        info = ck.batch(n)
        assert info.timestamp_ms is not None, f"offsets/{n} has no batchTimestampMs"
        end = int(info.offsets[0][topic]["0"])
        assert end <= len(keys), f"offsets/{n} ends at {end}, past the {len(keys)} records produced"
        now, read = info.timestamp_ms, Counter(keys[start:end])
        start = end
        out.stamps[n], out.emitted[n] = now, []
        for key, count in sorted(read.items()):
            if key not in written or now >= written[key] + TTL_MS:
                written[key] = now
                out.emitted[n].append((key, count - 1))
        out.evicted[n] = {k for k, w in written.items() if now >= w + TTL_MS}
        written = {k: w for k, w in written.items() if k not in out.evicted[n]}
        out.live[n] = set(written)
    return out


class Producer:
    """Produces the schedule, a tick a second, in a thread of its own; every
    key produced is in ``keys`` at its offset."""

    def __init__(self, produce_to, topic: str) -> None:
        self.produce_to, self.topic = produce_to, topic
        self.keys: list[str] = []
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def send(self, *keys: str) -> None:
        with self.lock:
            # Listed first: a batch may read a record before produce returns.
            self.keys.extend(keys)
            self.produce_to(self.topic, {0: [(k.encode(), k.encode()) for k in keys]})

    def start(self) -> None:
        def run() -> None:
            try:
                began = time.monotonic()
                for t, keys in enumerate(schedule()):
                    time.sleep(max(0.0, began + t * TICK_S - time.monotonic()))
                    self.send(*keys)
            except BaseException as exc:  # noqa: BLE001 - reported by done()
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def done(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.thread is not None and not self.thread.is_alive()

    def snapshot(self) -> list[str]:
        with self.lock:
            return list(self.keys)


def start_job(job: Path, checkpoint: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    command = [str(Path(sys.executable).with_name("eoskit")), "run", str(job), "--checkpoint-dir",
               str(checkpoint)]
    out = open(log, "a")
    # Its own process group: the driver crash point kills the whole group.
    return subprocess.Popen(command, env=env, stdout=out, stderr=out, start_new_session=True)


def kill_in_an_evicting_batch(process: subprocess.Popen, checkpoint: Path, topic: str,
                              producer: Producer, control: Path, timeout: float = 120) -> int:
    """Once the schedule is produced, arm ``driver_after_decision`` for the
    next batch the oracle says evicts, as soon as ``offsets/n`` shows it; if
    the batch commits before the arm is read (the test was slow), disarm and
    wait for the next one, producing a one-off key whenever nothing is left
    to expire. The batch the driver died in."""
    once = control / "fired"
    deadline, seen, extra = time.monotonic() + timeout, -1, 0
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if not producer.done():
            time.sleep(0.02)
            continue
        ck = Checkpoint(str(checkpoint))
        planned = ck.batch_ids()
        if planned and planned[-1] > seen:
            seen = planned[-1]
            keys = producer.snapshot()
            truth = oracle(checkpoint, topic, keys, seen)
            if truth.evicted[seen]:
                crash.arm(control, crash.DRIVER_AFTER_DECISION, seen, once, driver=True)
                while process.poll() is None and not (checkpoint / "commits" / str(seen)).exists():
                    time.sleep(0.01)
                crash.disarm(control)
            elif not truth.live[seen]:
                extra += 1
                producer.send(f"E{extra}")  # something to expire three seconds on
        time.sleep(0.02)
    else:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(f"no evicting batch was caught within {timeout:.0f} s")
    process.wait()
    reap_group(process.pid)
    assert once.exists(), f"the job ended (exit {process.returncode}) without the crash point firing"
    ck = Checkpoint(str(checkpoint))
    uncommitted = [b.batch for b in ck.batches() if not b.committed]
    assert len(uncommitted) == 1, f"after the kill, batches without a commit: {uncommitted}"
    return uncommitted[0]


def sink_rows(out: Path) -> dict[int, list[tuple[str, int]]]:
    """Every committed batch's rows, from the sink's manifests (each batch once)."""
    batches: dict[int, list[tuple[str, int]]] = {}
    for manifest in committed_batches(str(out), sink_id="ttl"):
        assert manifest.batch not in batches, f"batch {manifest.batch} committed twice"
        rows = []
        for name in manifest.files:
            for line in (out / name).read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    rows.append((row["id"], row["duplicates_dropped"]))
        batches[manifest.batch] = sorted(rows)
    return batches


def live_keys(spark, checkpoint: Path, batch: int) -> set[str]:
    rows = read_state(spark, str(checkpoint), 0, variable="seen", batch=batch, limit=None)
    return {row["key"]["id"] for row in rows}


@pytest.mark.crash
@pytest.mark.parametrize("compact", [
    "false",
    pytest.param("true", marks=pytest.mark.full),
])
def test_state_expires_across_several_ttl_periods_and_a_killed_evicting_batch_replays_it(
        spark, kafka, new_topic, produce_to, tmp_path, compact):
    topic = new_topic(1, "ttl")
    checkpoint, out, control, log = tmp_path / "ck", tmp_path / "out", tmp_path / "control", tmp_path / "job.log"
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {**{k: v for k, v in os.environ.items()
              if k not in (crash.ENV, crash.ONCE_ENV, crash.CONTROL_ENV, crash.DRIVER_GROUP_ENV,
                           crash.PAUSE_ENV, crash.PAUSE_DIR_ENV, "PYSPARK_PYTHON")},
           "TEST_KAFKA": kafka, "TEST_TOPIC": topic, "TEST_OUT": str(out),
           "TEST_EXAMPLES": str(EXAMPLES), "TEST_COMPACT": compact}
    producer = Producer(produce_to, topic)

    # Warm-up: the first batch (the JVM's and the state store's first) ends
    # before the schedule starts, so that its length shifts no tick.
    producer.send("W")
    process = start_job(job, checkpoint, {**env, crash.CONTROL_ENV: str(control)}, log)
    try:
        wait_for_file(checkpoint / "commits" / "0", process, _LogRun(log), timeout=240)
        producer.start()
        killed = kill_in_an_evicting_batch(process, checkpoint, topic, producer, control)
    finally:
        reap_group(process.pid)

    # The restart replays the killed batch from its logged offsets and
    # timestamp, then goes on until every key has expired.
    process = start_job(job, checkpoint, env, log)
    try:
        wait_for_file(checkpoint / "commits" / str(killed), process, _LogRun(log), timeout=240)
        deadline = time.monotonic() + 60
        while True:
            ck = Checkpoint(str(checkpoint))
            last = ck.latest_committed()
            truth = oracle(checkpoint, topic, producer.snapshot(), last)
            if last is not None and last >= killed + 2 and not truth.live[last]:
                break
            assert time.monotonic() < deadline, f"state still live at batch {last}: {truth.live.get(last)}"
            assert process.poll() is None, f"the job ended (exit {process.returncode}):\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)  # stops at a batch boundary
        assert process.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        reap_group(process.pid)

    keys = producer.snapshot()
    ck = Checkpoint(str(checkpoint))
    committed = [b.batch for b in ck.batches() if b.committed]
    assert all(b.committed for b in ck.batches()), "a batch left uncommitted after the stop"
    assert int(ck.batch(committed[-1]).offsets[0][topic]["0"]) == len(keys), "records left unread"
    truth = oracle(checkpoint, topic, keys)

    # The run crossed several TTL periods of batch time, with evictions in
    # several batches (C once, B in its quiet spell, the D keys at the end).
    span = truth.stamps[committed[-1]] - truth.stamps[0]
    assert span >= 5 * TTL_MS, f"batches spanned {span} ms only"
    evicting = [n for n in committed if truth.evicted[n]]
    assert len(evicting) >= 3, f"evictions in batches {evicting} only"
    assert killed in evicting, f"the driver died in batch {killed}, which evicts nothing"
    assert any("C" in truth.evicted[n] for n in committed), "C never expired"
    assert sum(1 for n in committed for key, _ in truth.emitted[n] if key == "B") >= 2, \
        "B did not pass again after its quiet spell"

    # Each batch's rows, exactly once, the replayed batch's included.
    got = sink_rows(out)
    expected = {n: truth.emitted[n] for n in committed if truth.emitted[n]}
    assert {n: rows for n, rows in got.items() if rows} == expected
    assert set(got) <= set(committed)

    # The live keys after each TTL period, and around the replayed batch.
    probes, next_stamp = set(), truth.stamps[0]
    for n in committed:
        if truth.stamps[n] >= next_stamp:
            probes.add(n)
            next_stamp = truth.stamps[n] + TTL_MS
    probes |= {killed - 1, killed, committed[-1]} & set(committed)
    for n in sorted(probes):
        assert live_keys(spark, checkpoint, n) == truth.live[n], f"state after batch {n}"


@dataclass
class _LogRun:
    """What ``wait_for_file`` reads from a ``Run``: the job's log."""

    log: Path

    def last_log(self) -> str:
        return self.log.read_text() if self.log.exists() else ""
