"""The SQLite sink's roles against a real SQLite file, driven by eoskit's
own task and coordinator code (no Spark): what the conformance scenarios
prove end to end, here step by step, with the crashes between steps made
by hand."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pyarrow as pa
import pytest

from eoskit.connectors.plugins import by_format, in_doubt_sink
from eoskit.twophase.contract import Outcome, SinkContext, CommitMode
from eoskit.twophase.coordinator import Coordinator
from eoskit.twophase.decision_log import DecisionLog
from eoskit.twophase.messages import NothingToCommit, PreparedTransaction
from eoskit.twophase.task import write_task

from eoskit_sqlite.sink import SqliteSink


def rows(path, table="t") -> list[tuple]:
    with closing(sqlite3.connect(path)) as conn:
        return sorted(conn.execute(f"SELECT id, amount FROM {table}").fetchall())


def batch(*ids: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(ids, pa.int64()), pa.array([i * 10 for i in ids], pa.int64())],
                           names=["id", "amount"])


@pytest.fixture
def setup(tmp_path):
    path = tmp_path / "app.db"
    sink = SqliteSink(str(path), "t", ["id", "amount"])
    decisions = DecisionLog(str(tmp_path / "checkpoint"), "s1")
    decisions.create()
    sink.check(None, SinkContext("s1", str(tmp_path / "checkpoint"), CommitMode.TWOPHASE))
    return path, sink, decisions


def prepare(sink, decisions, batch_id, partition, *ids) -> PreparedTransaction:
    ack = write_task(sink, decisions, CommitMode.TWOPHASE, iter([batch(*ids)]), (batch_id, partition, 0))
    assert isinstance(ack, PreparedTransaction) and ack.rows == len(ids)
    return ack


def test_prepared_rows_are_invisible_until_the_coordinator_commits_them(setup):
    path, sink, decisions = setup
    acks = [prepare(sink, decisions, 0, p, 2 * p, 2 * p + 1) for p in range(2)]
    assert rows(path) == [] and sink.committer().in_doubt("eoskit:s1:") == sorted(a.txn_id for a in acks)
    Coordinator(sink.committer(), decisions).commit(acks, 0)
    assert rows(path) == [(i, i * 10) for i in range(4)]
    assert sink.committer().in_doubt("eoskit:") == []


def test_a_commit_that_died_before_deleting_its_file_is_not_applied_twice(setup, monkeypatch):
    path, sink, decisions = setup
    ack = prepare(sink, decisions, 0, 0, 1, 2)
    committer = sink.committer()
    staged = committer._file(ack.txn_id)
    kept = staged.read_bytes()
    assert committer.commit(ack.txn_id)
    staged.write_bytes(kept)  # as if the process died between COMMIT and the delete
    decisions.decide(0, [ack.txn_id], 2, {ack.txn_id: ack.evidence})
    Coordinator(sink.committer(), decisions).commit([ack], 0)  # settled from the evidence
    assert rows(path) == [(1, 10), (2, 20)] and not staged.exists()
    assert committer.outcome(ack.txn_id, ack.evidence) is Outcome.COMMITTED


def test_a_rolled_back_id_is_proven_rolled_back(setup):
    path, sink, decisions = setup
    ack = prepare(sink, decisions, 0, 0, 1)
    assert sink.committer().roll_back(ack.txn_id)
    assert sink.committer().outcome(ack.txn_id, ack.evidence) is Outcome.ROLLED_BACK
    assert rows(path) == []


def test_an_empty_task_prepares_nothing(setup):
    path, sink, decisions = setup
    ack = write_task(sink, decisions, CommitMode.TWOPHASE, iter([batch()]), (0, 0, 0))
    assert isinstance(ack, NothingToCommit) and sink.committer().in_doubt("eoskit:") == []


def test_a_replayed_idempotent_task_writes_nothing(setup):
    path, sink, decisions = setup
    for attempt in range(2):
        write_task(sink, decisions, CommitMode.IDEMPOTENT, iter([batch(1, 2)]), (0, 0, attempt))
    assert rows(path) == [(1, 10), (2, 20)]


def test_eoskit_finds_the_plug_in_by_its_entry_point(setup):
    path, sink, decisions = setup
    plugin = by_format("eoskit-sqlite")
    assert plugin is not None and plugin.data_source_class().name() == "eoskit-sqlite"
    owner = in_doubt_sink("path", str(path), {})
    assert isinstance(owner, SqliteSink) and owner.path == str(path)
    with pytest.raises(Exception, match="no eoskit sink handles"):
        in_doubt_sink("path", str(path.parent / "missing.db"), {})


def test_a_task_killed_while_writing_leaves_nothing_once_its_batch_is_applied(setup):
    path, sink, decisions = setup
    killed = sink.begin_prepared("eoskit:s1:0:0:0x0001")
    killed.write(batch(9))  # and the worker dies: its file stays, unprepared
    assert killed.writing.exists()
    ack = prepare(sink, decisions, 0, 0, 1)  # Spark's retry, another attempt id
    Coordinator(sink.committer(), decisions).commit([ack], 0)
    assert not killed.writing.exists() and rows(path) == [(1, 10)]


def count(path, table: str) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@pytest.mark.parametrize("mode", [CommitMode.TWOPHASE, CommitMode.IDEMPOTENT])
def test_what_the_sink_keeps_beside_the_rows_stays_flat_across_many_pruning_periods(setup, mode, monkeypatch):
    """A job runs for weeks: the committed ids (two-phase evidence) and the
    markers (idempotent) are forgotten every PRUNE_EVERY batches, once Spark
    can no longer replay their batches, through eoskit's own commit paths.
    Without an offset log, what Spark may replay is the newest
    RETAIN_BATCHES (1,000); 30 here keeps six pruning periods past it to
    90 batches instead of 1,060 (the same code; the bound is read per call)."""
    from eoskit.twophase import decision_log, marked
    from eoskit.twophase.decision_log import PRUNE_EVERY

    monkeypatch.setattr(decision_log, "RETAIN_BATCHES", 3 * PRUNE_EVERY)
    RETAIN_BATCHES = decision_log.RETAIN_BATCHES
    path, sink, decisions = setup
    batches = 6 * PRUNE_EVERY + RETAIN_BATCHES
    kept = "eoskit_committed" if mode is CommitMode.TWOPHASE else "eoskit_markers"
    for batch_id in range(batches):
        acks = [write_task(sink, decisions, mode, iter([batch(2 * batch_id + p)]), (batch_id, p, 0))
                for p in range(2)]
        if mode is CommitMode.TWOPHASE:
            Coordinator(sink.committer(), decisions).commit(acks, batch_id)
        else:
            marked.commit(sink, decisions, batch_id, acks)
    assert rows(path) == [(i, i * 10) for i in range(2 * batches)]
    # Two rows a batch, for at most the batches Spark may replay and one pruning period.
    assert 0 < count(path, kept) <= 2 * (RETAIN_BATCHES + PRUNE_EVERY)
