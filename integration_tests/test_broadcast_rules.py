"""Broadcast state end to end (issue 36): the dynamic-rules job
(examples/dynamic_rules.py) judges payments from one topic by rules from a
compacted topic that change while it runs, a tombstone included, and writes
to PostgreSQL through driver and worker SIGKILLs at the broadcast's steps.

A killed run (the submission tier) and, in the full tier, a reference run
without kills beside it, over one payments topic, each with its own rules
topic (the same rules, changed at the same batches), table and checkpoint.
The rules change at chosen batches (a pause point before the pin of batches
3, 6 and 9), so every run pins the same rules for the same batch. Each run
is judged on its own against the rules its batches' logged pins name
(``check_run``: that fixes every row), the reference run also row for row
against the killed one. Read back with psql and the offset log's files, not
through eoskit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from eoskit.core import crash

pytestmark = [pytest.mark.crash]

JOB = Path(__file__).resolve().parents[1] / "examples" / "dynamic_rules.py"
PAYMENTS = 1_200
BATCH = 100  # maxOffsetsPerTrigger: 12 batches over 2 partitions
CATEGORIES = ("travel", "food", "tech")
RULES = {"r1": {"category": "travel", "max_amount": 500},
         "r2": {"category": "food", "max_amount": 50},
         "r3": {"category": "tech", "max_amount": 1000}}
#: batch -> (rule id, new rule or None: a tombstone), written while the job
#: waits before pinning that batch's rules
CHANGES = {3: ("r1", {"category": "travel", "max_amount": 300}),
           6: ("r4", {"category": "food", "max_amount": 20}),
           9: ("r2", None)}


def payment(i: int) -> dict:
    return {"id": i, "account": f"a{i % 7}", "amount": (i * 37) % 1300, "category": CATEGORIES[i % 3]}


def rules_at(version: int) -> dict[str, dict]:
    """The oracle: version 1 is RULES, and each change makes the next version."""
    rules = dict(RULES)
    for _, (rule_id, rule) in sorted(CHANGES.items())[:version - 1]:
        if rule is None:
            rules.pop(rule_id)
        else:
            rules[rule_id] = rule
    return rules


def expected_rule(row: dict, rules: dict[str, dict]) -> str | None:
    broken = [r for r, rule in sorted(rules.items())
              if rule["category"] == row["category"] and row["amount"] > rule["max_amount"]]
    return broken[0] if broken else None


def logged_batches(checkpoint: Path) -> dict[int, dict]:
    """batch -> the source's offset JSON, read from Spark's offset log files."""
    out = {}
    for entry in (checkpoint / "offsets").iterdir():
        if entry.name.isdigit():
            out[int(entry.name)] = json.loads(entry.read_text().splitlines()[2])
    return out


class RulesRun:
    """One run of the job: its rules topic, table, checkpoint and pause folder."""

    def __init__(self, tmp: Path, name: str, kafka: str, postgres, events: str, new_topic, produce_to):
        self.dir = tmp / name
        self.dir.mkdir()
        self.checkpoint = self.dir / "checkpoint"
        self.pause = self.dir / "pause"
        self.kafka, self.postgres, self.events, self.produce_to = kafka, postgres, events, produce_to
        self.rules = new_topic(1, "rules", {"cleanup.policy": "compact", "segment.ms": "500",
                                            "min.cleanable.dirty.ratio": "0.01"})
        produce_to(self.rules, {0: [(k.encode(), json.dumps(v).encode()) for k, v in RULES.items()]})
        self.table = f"alerts_{uuid.uuid4().hex[:8]}"
        postgres.psql(f"CREATE TABLE {self.table} (id bigint NOT NULL, account text, amount bigint, "
                      "rule text, rules_version bigint)")
        self.changed: set[int] = set()
        self.logs: list[str] = []

    def start(self, **extra: str) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items()
               if k not in (crash.ENV, crash.ONCE_ENV, crash.CONTROL_ENV, crash.PAUSE_ENV, crash.PAUSE_DIR_ENV)}
        env.update({"RULES_KAFKA": self.kafka, "RULES_EVENTS": self.events, "RULES_TOPIC": self.rules,
                    "RULES_PG_URL": self.postgres.url, "RULES_TABLE": self.table, "RULES_BATCH": str(BATCH),
                    crash.PAUSE_ENV: f"{crash.BROADCAST_BEFORE_PIN}@{','.join(map(str, CHANGES))}",
                    crash.PAUSE_DIR_ENV: str(self.pause), **extra})
        log = self.dir / f"run-{len(self.logs)}.log"
        self.logs.append(str(log))
        return subprocess.Popen(
            [str(Path(sys.executable).with_name("eoskit")), "run", str(JOB),
             "--checkpoint-dir", str(self.checkpoint), "--until-caught-up"],
            env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True, cwd=self.dir)

    def drive(self, process: subprocess.Popen, timeout: float = 400) -> int:
        """Answer the job's pauses (the rules change before batches 3, 6, 9) until it ends."""
        deadline = time.monotonic() + timeout
        try:
            while process.poll() is None:
                assert time.monotonic() < deadline, f"the job did not end:\n{self.tail()}"
                for batch, (rule_id, rule) in CHANGES.items():
                    if (self.pause / f"{crash.REACHED_FILE}-{batch}").exists() and batch not in self.changed:
                        value = None if rule is None else json.dumps(rule).encode()
                        self.produce_to(self.rules, {0: [(rule_id.encode(), value)]})
                        self.changed.add(batch)
                        (self.pause / f"{crash.GO_FILE}-{batch}").touch()
                time.sleep(0.1)
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # a JVM outliving its driver
            except ProcessLookupError:
                pass
        return process.returncode

    def tail(self) -> str:
        return Path(self.logs[-1]).read_text()[-4000:]

    def rows(self) -> list[dict]:
        out = self.postgres.psql(f"SELECT id, rule, rules_version FROM {self.table} ORDER BY id")
        return [{"id": int(i), "rule": r or None, "rules_version": int(v)}
                for i, r, v in (line.split("|") for line in out.splitlines() if line)]


def check_run(run: RulesRun) -> list[dict]:
    """Each payment once, judged by the rules its batch's logged pin names."""
    rows = run.rows()
    ids = [r["id"] for r in rows]
    assert len(ids) == PAYMENTS and set(ids) == set(range(PAYMENTS)), (
        f"{run.table}: {len(ids)} rows, {len(set(ids))} distinct, for {PAYMENTS} payments")
    batches = logged_batches(run.checkpoint)
    assert sorted(batches) == list(range(PAYMENTS // BATCH)), sorted(batches)
    # Payment i is offset i // 2 of partition i % 2 (produced in order, no transactions).
    version_of: dict[int, int] = {}
    previous = {"0": 0, "1": 0}
    for n in sorted(batches):
        ends = batches[n][run.events]
        pin = batches[n]["@broadcast"]
        assert pin["name"] == "rules" and pin["offsets"].keys() == {run.rules}
        for partition, end in ends.items():
            for offset in range(previous.get(partition, 0), end):
                version_of[offset * 2 + int(partition)] = pin["version"]
        previous = ends
    assert [batches[n]["@broadcast"]["version"] for n in sorted(batches)] == [
        1 + sum(1 for b in CHANGES if b <= n) for n in sorted(batches)]
    for row in rows:
        assert row["rules_version"] == version_of[row["id"]], row
        assert row["rule"] == expected_rule(payment(row["id"]), rules_at(row["rules_version"])), row
    late = [r for r in rows if r["rules_version"] >= 4 and r["rule"] == "r2"]
    assert not late, f"the deleted rule r2 judged {len(late)} payments after its tombstone"
    prepared = run.postgres.psql("SELECT count(*) FROM pg_prepared_xacts").strip()
    assert prepared == "0", f"{prepared} prepared transactions left behind"
    return rows


@pytest.mark.parametrize("reference", [pytest.param(False, id="killed"),
                                       pytest.param(True, id="and-a-run-without-kills", marks=pytest.mark.full)])
def test_dynamic_rules_are_exact_through_kills(tmp_path, kafka, postgres_target, new_topic, produce_to, reference):
    postgres = postgres_target()
    events = new_topic(2, "payments")
    produce_to(events, {p: [(str(i).encode(), json.dumps(payment(i)).encode())
                            for i in range(p, PAYMENTS, 2)] for p in (0, 1)})

    expected = None
    if reference:
        without = RulesRun(tmp_path, "reference", kafka, postgres, events, new_topic, produce_to)
        code = without.drive(without.start())
        assert code == 0, without.tail()
        expected = check_run(without)

    killed = RulesRun(tmp_path, "killed", kafka, postgres, events, new_topic, produce_to)
    control = tmp_path / "control"
    crash.arm(control, crash.TASK_DURING_WRITE, 5, tmp_path / "once-task")
    kills = [(crash.DRIVER_AFTER_BROADCAST_SNAPSHOT, 4), (crash.DRIVER_AFTER_BROADCAST_PUBLISH, 7),
             (crash.DRIVER_AFTER_DECISION, 10)]
    for point, batch in kills:
        once = tmp_path / f"once-{point}"
        code = killed.drive(killed.start(**{crash.ENV: f"{point}@{batch}", crash.ONCE_ENV: str(once),
                                            crash.CONTROL_ENV: str(control)}))
        assert once.exists(), f"{point}@{batch} was never reached:\n{killed.tail()}"
        assert code != 0, f"the job was not killed at {point}@{batch}:\n{killed.tail()}"
    code = killed.drive(killed.start())
    assert code == 0, killed.tail()
    assert (tmp_path / "once-task").exists(), "the worker was never killed during a write"
    rows = check_run(killed)
    if expected is not None:
        assert rows == expected, "the killed run's rows differ from the reference run's"


def test_a_plain_readstream_job_uses_its_broadcast_and_a_stale_pin_is_rebuilt_or_refused(
        spark, kafka, postgres_target, new_topic, produce_to, tmp_path):
    """Without a Pipeline: the job binds the checkpoint itself. A rules
    change after a pin older than broadcastStaleAfter rebuilds `latest`
    from the topic's earliest offsets, and fails a custom fold by name; the
    second run splits its batch over three tasks, where the first had one."""
    import pyarrow as pa

    from eoskit.connectors.kafka import KafkaBroadcast

    postgres = postgres_target()
    events = new_topic(1, "payments")
    rules_topic = new_topic(1, "rules", {"cleanup.policy": "compact"})
    produce_to(rules_topic, {0: [(k.encode(), json.dumps(v).encode()) for k, v in RULES.items()]})
    table = f"alerts_{uuid.uuid4().hex[:8]}"
    postgres.psql(f"CREATE TABLE {table} (id bigint NOT NULL, rule text, rules_version bigint)")
    schema = pa.schema([("id", pa.int64()), ("rule", pa.string()), ("rules_version", pa.int64())])

    def judge(batch: pa.RecordBatch, state) -> pa.RecordBatch:
        rows = [payment(int(key)) for key in batch.column("key").to_pylist()]
        in_force = {k: v for k, v in state.items() if isinstance(v, dict)}  # a count fold has none
        return pa.RecordBatch.from_pylist(
            [{"id": r["id"], "rule": expected_rule(r, in_force), "rules_version": state.version}
             for r in rows], schema=schema)

    def run(ck: Path, rules: KafkaBroadcast, **options: str) -> None:
        df = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
              .option("subscribe", events).option("startingOffsets", "earliest")
              .options(**rules.options()).options(**options).load())
        assert "broadcastVersion" in df.columns
        query = (df.mapInArrow(rules.map(judge), "id long, rule string, rules_version long")
                 .writeStream.format("eoskit-postgres").option("url", postgres.url).option("dbtable", table)
                 .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        query.awaitTermination()

    def produce_payments(ids: range) -> None:
        produce_to(events, {0: [(str(i).encode(), json.dumps(payment(i)).encode()) for i in ids]})

    ck = tmp_path / "ck"
    rules = KafkaBroadcast("rules", topic=rules_topic, decode=json.loads, checkpoint=str(ck))
    produce_payments(range(0, 30))
    run(ck, rules)
    produce_to(rules_topic, {0: [(b"r2", None)]})  # a tombstone
    produce_payments(range(30, 60))
    time.sleep(1.5)
    # Three tasks where the first run had one: every task reads the same version (rescale-safe).
    run(ck, rules, broadcastStaleAfter="1s", minPartitions="3")
    out = postgres.psql(f"SELECT id, rule, rules_version FROM {table} ORDER BY id")
    rows = [(int(i), r or None, int(v)) for i, r, v in (line.split("|") for line in out.splitlines() if line)]
    assert [r[0] for r in rows] == list(range(60)), "each payment once"
    after = {k: v for k, v in RULES.items() if k != "r2"}
    assert rows == [(i, expected_rule(payment(i), RULES if i < 30 else after), 1 if i < 30 else 2)
                    for i in range(60)]
    # The rebuilt version is the topic read whole: r2 is gone, the others kept.
    assert [r["key"] for r in _entries(ck)] == ["r1", "r3"]

    # A custom fold cannot be rebuilt from a compacted topic: refused by name.
    counted = KafkaBroadcast("counts", topic=rules_topic, fold="eoskit.testing.broadcast_folds:count_by_key",
                             checkpoint=str(tmp_path / "ck2"))
    produce_payments(range(60, 61))
    run(tmp_path / "ck2", counted)
    produce_to(rules_topic, {0: [(b"r5", json.dumps({"category": "tech", "max_amount": 1}).encode())]})
    produce_payments(range(61, 62))
    time.sleep(1.5)
    with pytest.raises(Exception, match="broadcastStaleAfter"):
        run(tmp_path / "ck2", counted, broadcastStaleAfter="1s")


def _entries(ck: Path) -> list[dict]:
    out = subprocess.run([str(Path(sys.executable).with_name("eoskit")), "state", "read", "--checkpoint-dir",
                          str(ck), "--broadcast", "rules", "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]
