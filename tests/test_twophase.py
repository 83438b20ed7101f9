"""The commit protocol against an in-memory fake of eoskit's own sink contract."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

from eoskit.connectors.spark.datasource import TransactionalDataSource
from eoskit.twophase.contract import (
    CommitMode,
    Committer,
    DirectCommitting,
    MarkedCommitting,
    MarkedWriter,
    Outcome,
    PreparingWriter,
    ProvesOutcomes,
    SinkError,
    TwoPhaseCommitting,
)
from eoskit.twophase.coordinator import (
    Coordinator,
    CoordinatorError,
    LostPreparedTransactionError,
    OrphanedTransactionsError,
)
from eoskit.twophase.decision_log import DecisionLog, latest_planned_batch, settlements
from eoskit.twophase.messages import CommittedByTask, NothingToCommit
from eoskit.twophase.task import ReplayMismatchError, write_task

TWOPHASE, IDEMPOTENT, AT_LEAST_ONCE = CommitMode.TWOPHASE, CommitMode.IDEMPOTENT, CommitMode.AT_LEAST_ONCE
from eoskit.twophase.txn_id import InvalidSinkIdError, TxnId, sink_id_for_checkpoint, validate_sink_id


class FakeDatabase:
    def __init__(self) -> None:
        self.committed: list[tuple[str, list[int]]] = []  # (txn, values)
        self.prepared: dict[str, list[int]] = {}
        self.markers: dict[tuple[str, int, int], int] = {}  # -> rows
        self.applied: list[tuple[str, int, tuple[str, ...]]] = []  # decision_applied calls
        self.tasks_committed: list[tuple[str, int, int]] = []  # (sink id, batch, acks)
        self.forgotten: list[tuple[str, int]] = []  # forget_markers calls


class FakeTransaction(PreparingWriter, MarkedWriter):
    def __init__(self, db: FakeDatabase, txn_id: str, marker=None) -> None:
        self.db, self.txn_id, self.values = db, txn_id, []
        self.rows = self.bytes = 0
        self.wanted, self.marker = marker, None

    def claim(self) -> bool:
        key = (self.wanted.sink_id, self.wanted.batch, self.wanted.partition)
        if key in self.db.markers:
            self.committed_rows = self.db.markers[key]
            return False
        self.marker = key
        return True

    def write(self, batch: pa.RecordBatch) -> None:
        self.values += batch.column(0).to_pylist()
        self.rows += batch.num_rows

    def prepare(self) -> None:
        self.db.prepared[self.txn_id] = self.values

    def commit(self) -> None:
        self.db.committed.append((self.txn_id, self.values))
        if self.marker is not None:
            self.db.markers[self.marker] = self.rows

    def abort(self) -> None:
        self.values = []


class FakeSink(TwoPhaseCommitting, MarkedCommitting, DirectCommitting, Committer):
    """A sink that is its own committer: one fake database behind both roles."""
    kind = "fake"

    def __init__(self, db: FakeDatabase) -> None:
        self.db = db

    def check(self, schema, context) -> None:
        pass

    def begin_prepared(self, txn_id: str) -> FakeTransaction:
        return FakeTransaction(self.db, txn_id)

    def begin_marked(self, marker, attempt: int) -> FakeTransaction:
        return FakeTransaction(self.db, f"marked-{marker.partition}-{attempt}", marker)

    def begin_direct(self, marker, attempt: int) -> FakeTransaction:
        return FakeTransaction(self.db, f"direct-{marker.partition}-{attempt}")

    def committer(self) -> "FakeSink":
        return self

    def commit(self, txn_id: str) -> bool:
        values = self.db.prepared.pop(txn_id, None)
        if values is None:
            return False
        self.db.committed.append((txn_id, values))
        return True

    def roll_back(self, txn_id: str) -> bool:
        return self.db.prepared.pop(txn_id, None) is not None

    def in_doubt(self, prefix: str) -> list[str]:
        return sorted(t for t in self.db.prepared if t.startswith(prefix))

    # Every optional hook a real sink has, recorded so that tests see each call.
    def decision_applied(self, sink_id: str, batch: int, txn_ids) -> None:
        self.db.applied.append((sink_id, batch, tuple(txn_ids)))

    def tasks_committed(self, decisions, batch: int, acks) -> None:
        self.db.tasks_committed.append((decisions.sink_id, batch, len(acks)))

    def forget_markers(self, sink_id: str, below_batch: int) -> None:
        self.db.forgotten.append((sink_id, below_batch))
        self.db.markers = {k: v for k, v in self.db.markers.items()
                           if not (k[0] == sink_id and k[1] < below_batch)}


def batches(*values: int) -> list[pa.RecordBatch]:
    return [pa.record_batch([pa.array(list(values), pa.int64())], names=["v"])]


@pytest.fixture
def env(tmp_path):
    db = FakeDatabase()
    sink = FakeSink(db)
    decisions = DecisionLog(str(tmp_path / "checkpoint"), "s1")
    decisions.create()
    return db, sink, decisions, Coordinator(sink, decisions)


def committed_values(db: FakeDatabase) -> list[int]:
    return sorted(v for _, values in db.committed for v in values)


def task(sink, decisions, batch, partition, values, attempt=0, mode=TWOPHASE):
    return write_task(sink, decisions, mode, iter(batches(*values)), identity=(batch, partition, attempt))


def test_txn_ids_fit_64_bytes_and_round_trip():
    txn = TxnId.new("a" * 24, 2**40, 9999, 99)
    assert len(str(txn).encode()) <= 64
    assert TxnId.parse(str(txn)) == txn
    assert TxnId.parse("someone-else:1") is None


def test_sink_id_is_validated_and_derived_from_checkpoint_only():
    assert validate_sink_id("orders_pg-1") == "orders_pg-1"
    with pytest.raises(InvalidSinkIdError, match="sinkId"):
        validate_sink_id("has:colon")
    assert sink_id_for_checkpoint("/a/b") == sink_id_for_checkpoint("/a/b/")
    assert sink_id_for_checkpoint("/a/b") != sink_id_for_checkpoint("/a/c")


def test_batch_commits_every_acked_transaction_once(env):
    db, sink, decisions, coordinator = env
    messages = [task(sink, decisions, 0, p, [p * 10 + i for i in range(3)]) for p in range(3)]
    coordinator.commit(messages, 0)
    assert committed_values(db) == sorted(p * 10 + i for p in range(3) for i in range(3))
    assert db.prepared == {}
    assert decisions.get(0).done


def test_repeated_commit_call_changes_nothing(env):
    db, sink, decisions, coordinator = env
    messages = [task(sink, decisions, 0, 0, [1, 2])]
    coordinator.commit(messages, 0)
    coordinator.commit(messages, 0)
    assert committed_values(db) == [1, 2]


def test_replayed_batch_writes_nothing_and_commit_uses_the_logged_decision(env):
    db, sink, decisions, coordinator = env
    first = [task(sink, decisions, 4, 0, [1]), task(sink, decisions, 4, 1, [2])]
    coordinator.commit(first, 4)
    replay = [task(sink, decisions, 4, 0, [1]), task(sink, decisions, 4, 1, [2])]
    assert all(m.replay and not hasattr(m, "txn_id") for m in replay)
    coordinator.commit(replay, 4)
    assert committed_values(db) == [1, 2]


def test_losing_attempts_and_unacked_transactions_are_rolled_back(env):
    db, sink, decisions, coordinator = env
    task(sink, decisions, 2, 0, [99])  # an attempt whose ack never reached the driver
    winner = task(sink, decisions, 2, 0, [1], attempt=1)
    coordinator.commit([winner], 2)
    assert committed_values(db) == [1]
    assert db.prepared == {}


def test_retried_task_releases_its_failed_attempts_prepared_transaction(env):
    db, sink, decisions, _ = env
    task(sink, decisions, 3, 0, [5])
    task(sink, decisions, 3, 1, [6])
    task(sink, decisions, 3, 0, [5], attempt=1)
    attempts = sorted((TxnId.parse(t).partition, TxnId.parse(t).attempt) for t in db.prepared)
    assert attempts == [(0, 1), (1, 0)]


def test_crash_after_decision_is_rolled_forward_by_the_sweep(env):
    db, sink, decisions, coordinator = env
    messages = [task(sink, decisions, 7, p, [p]) for p in range(3)]
    decisions.decide(7, [m.txn_id for m in messages], 3)  # the driver died right after
    result = coordinator.sweep(planned_batch=7)
    assert sorted(result["committed"]) == sorted(m.txn_id for m in messages)
    assert committed_values(db) == [0, 1, 2]
    assert decisions.get(7).done


def test_settled_in_doubt_transactions_are_noted_for_the_runtime(env, tmp_path):
    db, sink, decisions, coordinator = env
    checkpoint = str(tmp_path / "checkpoint")
    assert settlements(checkpoint) == []
    decided = [task(sink, decisions, 7, p, [p]) for p in range(2)]
    decisions.decide(7, [m.txn_id for m in decided], 2)
    task(sink, decisions, 6, 0, [9])  # batch 6 was never decided
    result = coordinator.sweep(planned_batch=7)
    decisions.record_settled(result["committed"], result["rolled_back"])
    other = DecisionLog(checkpoint, "s2")
    other.record_settled([], ["eoskit:s2:3:0:0"])
    found = settlements(checkpoint)
    assert [(s.key.split("/")[0], s.committed, s.rolled_back) for s in found] == [("s1", 2, 1), ("s2", 0, 1)]
    assert settlements(checkpoint, since=found[1].at + 1) == []  # what a later run has not seen


def test_crash_after_some_commits_then_commit_call_completes(env):
    db, sink, decisions, coordinator = env
    messages = [task(sink, decisions, 8, p, [p]) for p in range(3)]
    decision = decisions.decide(8, [m.txn_id for m in messages], 3)
    sink.commit(decision.commit[0])  # one commit, then the driver died
    coordinator.commit([None, None, None], 8)  # Spark re-runs commit with replay acks
    assert committed_values(db) == [0, 1, 2]


def test_undecided_prepared_transactions_are_rolled_back_by_the_sweep(env):
    db, sink, decisions, coordinator = env
    task(sink, decisions, 5, 0, [1])
    coordinator.sweep(planned_batch=5)
    assert db.prepared == {} and db.committed == []


def test_sweep_leaves_batches_newer_than_the_planned_one(env):
    db, sink, decisions, coordinator = env
    task(sink, decisions, 9, 0, [1])
    coordinator.sweep(planned_batch=8)
    assert len(db.prepared) == 1


def test_abort_rolls_back_everything_of_an_undecided_batch(env):
    db, sink, decisions, coordinator = env
    task(sink, decisions, 1, 0, [1])
    task(sink, decisions, 1, 1, [2])
    coordinator.abort(1)
    assert db.prepared == {} and db.committed == []


def test_task_prepared_after_the_abort_rolls_itself_back(env):
    """Spark calls abort without waiting for cancelled tasks; one that
    prepares after the abort listed the batch must not stay prepared."""
    db, sink, decisions, coordinator = env
    coordinator.abort(1)
    message = task(sink, decisions, 1, 3, [7])
    assert db.prepared == {} and db.committed == []
    assert isinstance(message, NothingToCommit)


def test_task_prepared_while_the_batch_was_decided_rolls_itself_back(env, monkeypatch):
    db, sink, decisions, coordinator = env
    winner = task(sink, decisions, 2, 0, [1], attempt=1)  # a speculative copy finishes first
    prepare = FakeTransaction.prepare

    def prepare_as_the_decision_lands(self):
        prepare(self)
        if decisions.get(2) is None:
            coordinator.commit([winner], 2)  # lists prepared ids before this one exists

    monkeypatch.setattr(FakeTransaction, "prepare", prepare_as_the_decision_lands)
    loser = task(sink, decisions, 2, 0, [1], attempt=0)
    assert isinstance(loser, NothingToCommit) and loser.replay
    assert db.prepared == {} and committed_values(db) == [1]


def test_a_new_run_forgets_the_failed_runs_aborts(env):
    db, sink, decisions, coordinator = env
    coordinator.abort(4)
    coordinator.sweep(planned_batch=4)  # the restart plans batch 4 again
    message = task(sink, decisions, 4, 0, [5])
    coordinator.commit([message], 4)
    assert committed_values(db) == [5]


def test_abort_of_a_decided_batch_rolls_forward(env):
    db, sink, decisions, coordinator = env
    messages = [task(sink, decisions, 1, 0, [1])]
    decisions.decide(1, [messages[0].txn_id], 1)
    coordinator.abort(1)
    assert committed_values(db) == [1]


def test_acked_transaction_gone_before_the_decision_fails_the_batch(env):
    db, sink, decisions, coordinator = env
    message = task(sink, decisions, 6, 0, [1])
    sink.roll_back(message.txn_id)
    with pytest.raises(LostPreparedTransactionError, match="no longer prepared"):
        coordinator.commit([message], 6)
    assert decisions.get(6) is None


def test_decided_transaction_vanishing_before_its_first_commit_is_an_error(env):
    db, sink, decisions, coordinator = env
    message = task(sink, decisions, 6, 0, [1])
    original = sink.in_doubt

    def list_then_lose(prefix):
        ids = original(prefix)
        db.prepared.pop(message.txn_id, None)
        return ids

    sink.in_doubt = list_then_lose
    with pytest.raises(CoordinatorError, match="vanished"):
        coordinator.commit([message], 6)


def test_prepared_transactions_without_decision_log_stop_the_start(tmp_path):
    db = FakeDatabase()
    sink = FakeSink(db)
    old = DecisionLog(str(tmp_path / "old"), "s1")
    old.create()
    write_task(sink, old, TWOPHASE, iter(batches(1)), identity=(0, 0, 0))
    fresh = DecisionLog(str(tmp_path / "new"), "s1")  # checkpoint deleted, same sink id
    with pytest.raises(OrphanedTransactionsError) as err:
        Coordinator(sink, fresh).sweep(planned_batch=0)
    assert "eoskit txn resolve" in str(err.value)
    assert "eoskit:s1:0:0:" in str(err.value)
    assert len(db.prepared) == 1  # never silently committed nor rolled back


def test_at_least_once_commits_in_the_task(env):
    db, sink, decisions, _ = env
    message = task(sink, decisions, 0, 0, [1, 2], mode=AT_LEAST_ONCE)
    assert isinstance(message, CommittedByTask) and message.rows == 2
    assert committed_values(db) == [1, 2]


def test_empty_partition_prepares_nothing(env):
    db, sink, decisions, _ = env
    message = write_task(sink, decisions, TWOPHASE, iter([]), identity=(0, 0, 0))
    assert isinstance(message, NothingToCommit) and not message.replay and db.prepared == {}


def test_latest_planned_batch_reads_the_offset_log(tmp_path):
    assert latest_planned_batch(str(tmp_path)) is None
    (tmp_path / "offsets").mkdir()
    for name in ("0", "1", "12", ".12.crc"):
        (tmp_path / "offsets" / name).write_text("v1")
    assert latest_planned_batch(str(tmp_path)) == 12


def test_prune_keeps_decisions_as_long_as_spark_keeps_their_batch(tmp_path):
    """The checkpoint stays flat: a done decision goes when Spark's offset log
    has dropped its batch, an undone one never goes."""
    log = DecisionLog(str(tmp_path), "s1")
    log.create()
    for batch in range(30):
        decision = log.decide(batch, [f"t{batch}"], 1)
        if batch != 3:
            log.mark_done(decision)
    (tmp_path / "offsets").mkdir()
    for batch in range(20, 30):  # Spark retains batches 20..29
        (tmp_path / "offsets" / str(batch)).write_text("v1")
    assert log.prune(29) == 3  # the oldest decision kept
    assert log.batches() == [3, *range(20, 30)]


def test_decision_log_survives_in_memory_filesystem():
    log = DecisionLog("memory://ck-test", "s9")
    log.create()
    log.decide(3, ["b", "a"], 2)
    assert log.get(3).commit == ("a", "b")
    log.mark_done(log.get(3))
    assert log.get(3).done and log.batches() == [3]


def test_idempotent_mode_commits_rows_with_a_marker_and_replays_write_nothing(env):
    db, sink, decisions, _ = env
    first = task(sink, decisions, 3, 1, [1, 2], mode=IDEMPOTENT)
    assert isinstance(first, CommittedByTask)
    assert db.markers == {("s1", 3, 1): 2}
    again = task(sink, decisions, 3, 1, [1, 2], attempt=1, mode=IDEMPOTENT)
    assert again.replay
    other = task(sink, decisions, 3, 2, [5], mode=IDEMPOTENT)
    assert isinstance(other, CommittedByTask)
    assert committed_values(db) == [1, 2, 5]


def test_copy_csv_writes_utc_timestamps_nulls_and_bytea_as_copy_expects():
    import datetime

    from eoskit.connectors.postgres.csv import to_copy_csv

    batch = pa.record_batch([
        pa.array([datetime.datetime(2026, 11, 21, 12, 0, 0, 5), None], pa.timestamp("us", tz="UTC")),
        pa.array([b"\x00\x01", None], pa.binary()),
        pa.array(["", None], pa.string()),
        pa.array([float("inf"), 1.5], pa.float64()),
    ], names=["t", "b", "s", "f"])
    lines = to_copy_csv(batch).decode().splitlines()
    assert lines[0] == '"2026-11-21 12:00:00.000005Z","\\x0001","","Infinity"'
    assert lines[1] == ',,,"1.5"'


def test_replay_with_other_rows_than_the_committed_attempt_is_refused(env):
    """A restart with another parallelism hands a task other rows: writing
    nothing would lose rows, writing them would duplicate: refuse."""
    db, sink, decisions, _ = env
    task(sink, decisions, 3, 0, [1, 2, 3], mode=IDEMPOTENT)
    with pytest.raises(ReplayMismatchError, match="batch 3 .* task 0 now has 2 rows where the committed attempt wrote 3"):
        task(sink, decisions, 3, 0, [1, 2], attempt=1, mode=IDEMPOTENT)
    assert committed_values(db) == [1, 2, 3]


def test_commit_modes_come_from_the_capabilities():
    from eoskit.twophase.contract import commit_modes, resolve_commit_mode

    class MarkedOnly(MarkedCommitting):
        kind = "marked-only"

        def check(self, schema, context): ...

        def begin_marked(self, marker, attempt): ...

    assert commit_modes(FakeSink) == (TWOPHASE, IDEMPOTENT, AT_LEAST_ONCE)
    assert resolve_commit_mode(FakeSink, None) is TWOPHASE
    assert resolve_commit_mode(MarkedOnly, "exactly_once") is IDEMPOTENT
    assert resolve_commit_mode(MarkedOnly, "Idempotent") is IDEMPOTENT
    with pytest.raises(SinkError, match="'commitMode' = 'twophase': marked-only supports exactly_once, idempotent$"):
        resolve_commit_mode(MarkedOnly, "twophase")


def test_checkpoint_locations_are_qualified_and_the_default_sink_id_is_recorded(tmp_path, monkeypatch):
    from eoskit.twophase import identity

    monkeypatch.chdir(tmp_path)
    assert identity.qualified_location("ck") == str(tmp_path / "ck")
    assert identity.qualified_location("file:ck") == f"file:{tmp_path / 'ck'}"
    assert identity.qualified_location("s3a://b/ck") == "s3a://b/ck"
    first = identity.default_sink_id("ck")
    assert first == sink_id_for_checkpoint(str(tmp_path / "ck"))
    identity.record_identity("ck", first)
    identity._cache.clear()
    # The same checkpoint typed another way, or moved: the recorded id holds.
    (tmp_path / "ck").rename(tmp_path / "moved")
    assert identity.default_sink_id(str(tmp_path / "moved")) == first


def test_a_checkpoint_from_before_the_identity_record_keeps_its_derived_sink_id(tmp_path, monkeypatch):
    from eoskit.twophase import identity

    monkeypatch.chdir(tmp_path)
    legacy = sink_id_for_checkpoint("relative/ck")  # derived from the path as typed then
    DecisionLog("relative/ck", legacy).create()
    identity._cache.clear()
    assert identity.default_sink_id("relative/ck") == legacy


def test_no_two_capabilities_share_a_method_name():
    """A sink has several capabilities at once; a method name two of them
    declared would resolve to one definition for both callers (how the
    two-phase coordinator once called the marked hook with a string and
    failed at batch 1,100)."""
    from eoskit.twophase.contract import Sink

    capabilities = (TwoPhaseCommitting, MarkedCommitting, DirectCommitting)
    own = {c: {n for n in vars(c) if not n.startswith("_")} - set(dir(Sink)) for c in capabilities}
    for i, first in enumerate(capabilities):
        for second in capabilities[i + 1:]:
            assert not own[first] & own[second], (first.__name__, second.__name__)


def _writer(sink, decisions, mode):
    from eoskit.connectors.spark.datasource import TransactionalStreamWriter

    return TransactionalStreamWriter(sink, decisions, mode)


@pytest.mark.parametrize("mode", [TWOPHASE, IDEMPOTENT, AT_LEAST_ONCE])
def test_every_mode_commits_past_batch_1100_and_keeps_its_metadata_flat(env, tmp_path, mode):
    """Each mode's driver path (Spark's commit call, as the adapter makes
    it), batch after batch as Spark runs them, with Spark's offset log
    retaining its last 100 batches: the hooks get their own arguments, and
    what the protocol keeps (decisions, markers) stays bounded across many
    prune periods."""
    db, sink, decisions, _ = env
    offsets = tmp_path / "checkpoint" / "offsets"
    offsets.mkdir(parents=True)
    writer = _writer(sink, decisions, mode)
    for batch in range(1305):
        (offsets / str(batch)).write_text("v1")
        if batch >= 100:
            (offsets / str(batch - 100)).unlink()  # Spark's minBatchesToRetain
        acks = [task(sink, decisions, batch, p, [batch * 10 + p], mode=mode) for p in range(2)]
        writer.commit(acks, batch)
    assert committed_values(db) == sorted(b * 10 + p for b in range(1305) for p in range(2))
    assert not db.prepared
    if mode is TWOPHASE:
        assert [a[1] for a in db.applied] == list(range(1305))
        assert all(sink_id == "s1" and len(ids) == 2 for sink_id, _, ids in db.applied)
        # Pruned at batch 1300 below Spark's oldest batch then (1201).
        assert decisions.batches() == list(range(1201, 1305))
    else:
        assert not db.applied and decisions.batches() == []
    if mode is IDEMPOTENT:
        assert [t[1] for t in db.tasks_committed] == list(range(1305))
        assert db.forgotten[:2] == [("s1", 0), ("s1", 0)]  # batches 0 and 10
        assert db.forgotten[-1] == ("s1", 1201) and len(db.forgotten) == 131
        assert sorted({k[1] for k in db.markers}) == list(range(1201, 1305))
    else:
        assert not db.tasks_committed and not db.forgotten


def test_only_the_newest_settled_notes_are_kept(tmp_path):
    """One note per sweep that settled something, i.e. per restart after a
    crash: a job restarted a thousand times keeps SETTLED_KEPT of them."""
    from eoskit.twophase.decision_log import SETTLED_KEPT

    log = DecisionLog(str(tmp_path), "s1")
    log.create()
    for n in range(SETTLED_KEPT + 5):
        log.record_settled([f"c{n}"], [])
    notes = settlements(str(tmp_path))
    assert len(notes) == SETTLED_KEPT
    assert len(list((tmp_path / "eoskit" / "sinks" / "s1" / "settled").iterdir())) == SETTLED_KEPT



class FakeDataSource(TransactionalDataSource):
    """The adapter's data source over ``FakeSink``."""

    sink_type = FakeSink

    @classmethod
    def name(cls) -> str:
        return "eoskit-fake"

    def transactional_sink(self, schema):
        return FakeSink(FakeDatabase())


def _in_the_commit_process(pickled: bytes, monkeypatch):
    """The data source as Spark's commit process gets it: pickled on the
    driver, unpickled elsewhere, where resolving the options or reading the
    checkpoint's identity again fails the test."""
    from eoskit.connectors.spark import datasource as adapter

    def not_here(*args, **kwargs):
        raise AssertionError("resolved again in the commit process")

    monkeypatch.setattr(adapter, "default_sink_id", not_here)
    monkeypatch.setattr(adapter, "qualified_location", not_here)
    monkeypatch.setattr(adapter, "validate_sink_id", not_here)
    return pickle.loads(pickled)


def test_the_commit_process_gets_the_checkpoint_and_default_sink_id_resolved_on_the_driver(
        tmp_path, monkeypatch):
    from eoskit.twophase import identity

    monkeypatch.chdir(tmp_path)
    identity._cache.clear()
    pickled = pickle.dumps(FakeDataSource({"checkpointLocation": "ck"}))
    monkeypatch.chdir("/")  # the commit process's working directory does not matter
    copy = _in_the_commit_process(pickled, monkeypatch)
    assert copy.checkpoint_location() == str(tmp_path / "ck")
    assert copy.sink_id() == sink_id_for_checkpoint(str(tmp_path / "ck"))
    writer = copy.streamWriter(StructType([]), False)
    assert writer.decisions.sink_id == copy.sink_id() and not copy._planning


def test_a_given_sink_id_travels_as_given(monkeypatch):
    pickled = pickle.dumps(FakeDataSource({"CheckpointLocation": "/ck", "sinkId": "orders-1"}))
    copy = _in_the_commit_process(pickled, monkeypatch)
    assert (copy.checkpoint_location(), copy.sink_id()) == ("/ck", "orders-1")


def test_without_a_checkpoint_location_nothing_is_resolved_and_first_use_refuses(monkeypatch):
    """A data source built only to check its options (a Pipeline component,
    foreach_batch) pickles as before; the option is required where it is used."""
    copy = pickle.loads(pickle.dumps(FakeDataSource({"commitMode": "twophase"})))
    with pytest.raises(SinkError, match="eoskit-fake needs the query's 'checkpointLocation'"):
        copy.sink_id()
    bad = pickle.loads(pickle.dumps(FakeDataSource({"checkpointLocation": "/ck",
                                                    "sinkId": "no spaces"})))
    with pytest.raises(InvalidSinkIdError, match="option 'sinkId' = 'no spaces'"):
        bad.sink_id()
    assert bad.checkpoint_location() == "/ck"


# -- outcomes proven by evidence: a commit whose reply was lost ---------------

class EvidenceTransaction(FakeTransaction):
    def prepare(self) -> None:
        super().prepare()
        self.evidence = f"xid-{self.txn_id}"


class EvidenceSink(FakeSink, ProvesOutcomes):
    """Commits whose reply is lost: the server commits (``lose_reply``) or
    someone rolls the transaction back, and the call says "no such id"."""

    def __init__(self, db: FakeDatabase) -> None:
        super().__init__(db)
        self.fates: dict[str, Outcome] = {}  # evidence -> what the server knows
        self.lose_reply: set[str] = set()
        self.forgotten_evidence: list[tuple[str, int]] = []

    def begin_prepared(self, txn_id: str) -> EvidenceTransaction:
        return EvidenceTransaction(self.db, txn_id)

    def commit(self, txn_id: str) -> bool:
        if txn_id in self.lose_reply:  # committed, the reply lost, the retry finds nothing
            self.lose_reply.discard(txn_id)
            super().commit(txn_id)
            self.fates[f"xid-{txn_id}"] = Outcome.COMMITTED
            return False
        return super().commit(txn_id)

    def outcome(self, txn_id: str, evidence: str) -> Outcome:
        return self.fates.get(evidence, Outcome.UNKNOWN)

    def forget_evidence(self, sink_id: str, below_batch: int) -> None:
        self.forgotten_evidence.append((sink_id, below_batch))


@pytest.fixture
def evidence_env(tmp_path):
    db = FakeDatabase()
    sink = EvidenceSink(db)
    decisions = DecisionLog(str(tmp_path / "checkpoint"), "s1")
    decisions.create()
    return db, sink, decisions, Coordinator(sink, decisions)


def test_the_decision_records_each_prepared_ids_evidence(evidence_env):
    db, sink, decisions, coordinator = evidence_env
    messages = [task(sink, decisions, 0, p, [p]) for p in range(2)]
    assert all(m.evidence == f"xid-{m.txn_id}" for m in messages)
    coordinator.commit(messages, 0)
    assert dict(decisions.get(0).evidence) == {m.txn_id: m.evidence for m in messages}


def test_a_commit_whose_reply_was_lost_is_settled_as_committed_by_its_evidence(evidence_env):
    db, sink, decisions, coordinator = evidence_env
    messages = [task(sink, decisions, 0, p, [p]) for p in range(2)]
    sink.lose_reply.add(messages[0].txn_id)
    coordinator.commit(messages, 0)  # the call that wrote the decision: no "vanished" error
    assert committed_values(db) == [0, 1] and decisions.get(0).done


def test_a_decided_id_rolled_back_by_someone_else_stops_the_commit_even_on_a_repeat(evidence_env):
    db, sink, decisions, coordinator = evidence_env
    messages = [task(sink, decisions, 0, p, [p]) for p in range(2)]
    decision = decisions.decide(0, [m.txn_id for m in messages], 2,
                                {m.txn_id: m.evidence for m in messages})
    sink.roll_back(messages[0].txn_id)  # by hand, after the decision
    sink.fates[messages[0].evidence] = Outcome.ROLLED_BACK
    with pytest.raises(CoordinatorError, match="was rolled back: its rows are missing"):
        coordinator.commit(messages, 0)  # a repeat: the decision was written before
    assert not decisions.get(0).done
    assert decision.commit == decisions.get(0).commit


def test_evidence_that_cannot_tell_stops_the_commit_instead_of_a_guess(evidence_env):
    db, sink, decisions, coordinator = evidence_env
    message = task(sink, decisions, 0, 0, [1])
    decisions.decide(0, [message.txn_id], 1, {message.txn_id: message.evidence})
    sink.db.prepared.pop(message.txn_id)
    with pytest.raises(CoordinatorError, match="cannot say whether it committed"):
        coordinator.commit([message], 0)


def test_pruning_forgets_the_evidence_of_forgotten_decisions(evidence_env):
    db, sink, decisions, coordinator = evidence_env
    for batch in range(11):
        coordinator.commit([task(sink, decisions, batch, 0, [batch])], batch)
    assert sink.forgotten_evidence and sink.forgotten_evidence[-1][0] == "s1"
    assert sink.forgotten_evidence[-1][1] <= min(decisions.batches())
