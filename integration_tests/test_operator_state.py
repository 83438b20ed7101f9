"""List and union operator state through real rescales (issue 36, "Done
when" 4; docs/design/broadcast-and-operator-state.md, section 4).

One checkpoint, three ``eoskit run`` jobs over one Kafka topic, with
``operatorStateParallelism`` (and the source's ``minPartitions``) 2, then 4,
then 2, the 4-run's driver SIGKILLed right after a batch's decision
(``crash.DRIVER_AFTER_DECISION``) and restarted. The sink is
``eoskit.testing.conformance.operator_state_sink``: each writer instance
appends ``(batch, p)`` to a list state ``ledger`` and to a union state
``seen``, and writes what it restored into its output.

Asserts: every record once (the source side); ``ledger``'s multiset is
everything appended, and the shares a batch restored differ by at most one;
every instance's ``seen`` is the whole concatenation; ``eoskit state
inspect`` shows the parallelism; a task count other than k is refused with
the design's message. Checked with ``json`` and pyarrow, not eoskit's code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from eoskit.core import crash
from eoskit.testing.conformance import Workload
from eoskit.testing.conformance.harness import reap_group
from eoskit.testing.conformance.operator_state_sink import committed

SINK_ID = "opstate1"

JOB = '''
import os

from pyspark.sql import functions as F

from eoskit.connectors.kafka import KafkaSource
from eoskit.runtime import Pipeline
from eoskit.testing.conformance.operator_state_sink import OperatorStateSink

K = os.environ["EOSKIT_TEST_K"]
FAULTS = ("EOSKIT_CRASH_AT", "EOSKIT_CRASH_ONCE")

pipeline = Pipeline(
    name="operator_state",
    source=KafkaSource(os.environ["EOSKIT_TEST_KAFKA"], {
        "subscribe": os.environ["EOSKIT_TEST_TOPIC"],
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": os.environ["EOSKIT_TEST_MAX_OFFSETS"],
        "minPartitions": os.environ.get("EOSKIT_TEST_MIN_PARTITIONS", K),
    }),
    transform=lambda df: df.select(
        F.from_json(F.col("value").cast("string"), "id BIGINT, amount BIGINT, customer STRING").alias("r")
    ).select("r.id"),
    sink=OperatorStateSink(os.environ["EOSKIT_TEST_OUTPUT"],
                           {"sinkId": os.environ["EOSKIT_TEST_SINK_ID"], "commitMode": "twophase",
                            "operatorStateParallelism": K},
                           repartition=os.environ.get("EOSKIT_TEST_REPARTITION", "1") == "1"),
    checkpoint_interval="500 milliseconds",
    restart_strategy="none",
    spark_conf={
        "spark.master": "local[2,3]",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        **{f"spark.executorEnv.{name}": os.environ[name] for name in FAULTS if os.environ.get(name)},
    },
)
'''


class Job:
    """The job above on one checkpoint and output directory."""

    def __init__(self, workdir: Path, workload: Workload) -> None:
        self.workdir, self.workload = workdir, workload
        self.checkpoint, self.output = workdir / "checkpoint", workdir / "out"
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "job.py").write_text(JOB)

    def run(self, k: int, timeout: float = 600, **extra: str) -> tuple[int, str]:
        env = {name: value for name, value in os.environ.items()
               if name not in (crash.ENV, crash.ONCE_ENV, crash.PAUSE_ENV, crash.PAUSE_DIR_ENV, "PYSPARK_PYTHON")}
        env.update({
            "EOSKIT_TEST_KAFKA": self.workload.bootstrap, "EOSKIT_TEST_TOPIC": self.workload.topic,
            "EOSKIT_TEST_MAX_OFFSETS": str(self.workload.batch_offsets), "EOSKIT_TEST_K": str(k),
            "EOSKIT_TEST_OUTPUT": str(self.output), "EOSKIT_TEST_SINK_ID": SINK_ID, **extra})
        log = self.workdir / f"run-{time.monotonic_ns()}.log"
        command = [str(Path(sys.executable).with_name("eoskit")), "run", str(self.workdir / "job.py"),
                   "--checkpoint-dir", str(self.checkpoint), "--until-caught-up"]
        with open(log, "w") as out:
            # Its own process group: the driver crash point kills the whole job.
            process = subprocess.Popen(command, env=env, stdout=out, stderr=out, start_new_session=True,
                                       cwd=self.workdir)
            try:
                code = process.wait(timeout=timeout)
            finally:
                reap_group(process.pid)
        return code, log.read_text()

    def ok(self, k: int, **extra: str) -> None:
        code, log = self.run(k, **extra)
        assert code == 0, f"the run with parallelism {k} failed (exit {code}):\n{log[-4000:]}"

    def sink_folder(self) -> Path:
        return self.checkpoint / "eoskit" / "sinks" / SINK_ID

    def decision(self, batch: int) -> dict:
        return json.loads((self.sink_folder() / "decisions" / f"{batch}.json").read_text())

    def newest_state(self) -> tuple[int, dict]:
        """(batch, operatorState) of the newest decision that has operator state."""
        for path in sorted((self.sink_folder() / "decisions").glob("*.json"), key=lambda p: -int(p.stem)):
            data = json.loads(path.read_text())
            if "operatorState" in data:
                return data["batch"], data["operatorState"]
        raise AssertionError("no decision holds operator state")

    def decided_ledger(self) -> list[tuple[int, int]]:
        """The newest decided ``ledger``, read with pyarrow."""
        _, state = self.newest_state()
        out = []
        for p in range(state["parallelism"]):
            table = pa.ipc.open_stream((self.sink_folder() / state["files"][str(p)]).read_bytes()).read_all()
            out += [tuple(json.loads(e)) for s, e in zip(table.column("state").to_pylist(),
                                                         table.column("element").to_pylist()) if s == "ledger"]
        return out


def tags(outputs: list[dict]) -> dict[int, list[tuple[int, int]]]:
    """Per batch, the (batch, p) every instance appended: one per p in 0..k-1,
    empty partitions included (their tasks snapshot too)."""
    k_of = {o["batch"]: o["parallelism"] for o in outputs}
    return {n: [(n, p) for p in range(k)] for n, k in sorted(k_of.items())}


@pytest.mark.crash
def test_operator_state_follows_parallelism_2_then_4_then_2(kafka, tmp_path):
    workload = Workload.produce(kafka, records=600, partitions=2, batches=6)
    job = Job(tmp_path / "job", workload)

    job.ok(2)
    first_run = sorted({o["batch"] for o in committed(job.output)})
    crashed_batch = first_run[-1] + 2

    workload = job.workload = workload.extend(600)
    once = tmp_path / "crashed-once"
    code, log = job.run(4, EOSKIT_CRASH_AT=f"{crash.DRIVER_AFTER_DECISION}@{crashed_batch}",
                        EOSKIT_CRASH_ONCE=str(once))
    assert code != 0 and once.exists(), f"the driver was not killed (exit {code}):\n{log[-3000:]}"
    assert job.decision(crashed_batch)["status"] == "decided"  # decided, not applied: the restart replays it
    job.ok(4)
    assert job.decision(crashed_batch)["status"] == "done"

    job.workload = workload.extend(600)
    job.ok(2)

    outputs = committed(job.output)
    # The source side: minPartitions 2, 4, 2 on one checkpoint reads every record once.
    ids = Counter(i for o in outputs for i in o["ids"])
    assert sorted(ids) == list(range(1800)) and set(ids.values()) == {1}
    # One output per (batch, p), the crashed batch's included (its replay wrote nothing).
    assert len({(o["batch"], o["partition"]) for o in outputs}) == len(outputs)
    ks = [k for _, k in sorted({o["batch"]: o["parallelism"] for o in outputs}.items())]
    assert ks[0] == 2 and 4 in ks and ks[-1] == 2
    appended = tags(outputs)
    batches = sorted(appended)
    for n in batches:
        before = sorted(t for m in batches if m < n for t in appended[m])
        mine = [o for o in outputs if o["batch"] == n]
        # Union: every instance restored the whole concatenation of what the batch before left.
        for o in mine:
            assert sorted(map(tuple, o["seen"])) == before, f"batch {n} task {o['partition']}'s seen"
        # List: the shares add up to everything appended before, sizes within one.
        if len(mine) == mine[0]["parallelism"]:
            assert sorted(tuple(t) for o in mine for t in o["ledger"]) == before, f"batch {n}'s ledger"
            sizes = [len(o["ledger"]) for o in mine]
            assert max(sizes) - min(sizes) <= 1, f"batch {n}'s ledger shares: {sizes}"
    # The state decided last holds every append exactly once.
    assert sorted(job.decided_ledger()) == sorted(t for n in batches for t in appended[n])

    # `eoskit state inspect` shows the parallelism the last batch ran with.
    shown = subprocess.run([str(Path(sys.executable).with_name("eoskit")), "state", "inspect",
                            "--checkpoint-dir", str(job.checkpoint), "--json"],
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    state = {row["name"]: row for row in json.loads(shown.stdout)["operatorState"]}
    assert state["ledger"]["parallelism"] == 2 and state["ledger"]["kind"] == "list"
    assert state["ledger"]["elements"] == sum(len(t) for t in appended.values())
    assert state["seen"]["kind"] == "union" and state["ledger"]["batch"] == batches[-1]
    assert not list((job.output / "_staging").glob("*.prepared.json")), "left prepared"


def test_a_task_count_other_than_k_is_refused_with_the_message(kafka, tmp_path):
    workload = Workload.produce(kafka, records=200, partitions=2, batches=2)
    job = Job(tmp_path / "job", workload)
    # Two Kafka partitions read as two tasks, no repartition(4): the coordinator refuses batch 0.
    code, log = job.run(4, EOSKIT_TEST_REPARTITION="0", EOSKIT_TEST_MIN_PARTITIONS="2")
    assert code == 1, f"the job did not fail (exit {code}):\n{log[-3000:]}"
    assert (f"sink {SINK_ID} keeps operator state with parallelism 4, batch 0 ran 2 tasks: "
            "repartition(4) before the sink") in log
    assert not (job.sink_folder() / "decisions" / "0.json").exists()
