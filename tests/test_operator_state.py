"""List and union operator state of two-phase sinks (issue 36, design 2.3):
the split rules, the task's restore and snapshot, the decision that carries
the state, the coordinator's parallelism check, pruning, replays and the
savepoint copy rule, against in-memory fakes of eoskit's own sink contract."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow as pa
import pytest

from eoskit.connectors.source_state import (
    RESERVED_PREFIX,
    even_split,
    redistribute,
    split_reserved,
    union,
)
from eoskit.connectors.spark.datasource import TransactionalDataSource
from eoskit.runtime.state.checkpoints import Checkpoint
from eoskit.runtime.state.inspection import operator_states
from eoskit.runtime.state.savepoints import savepoint_files
from eoskit.twophase.contract import (
    CommitMode,
    Committer,
    KeepsOperatorState,
    MarkedCommitting,
    MarkedWriter,
    PreparingWriter,
    SinkError,
    StateSpec,
    TwoPhaseCommitting,
)
from eoskit.twophase.coordinator import Coordinator, CoordinatorError
from eoskit.twophase.decision_log import DecidedState, DecisionLog
from eoskit.twophase.messages import NothingToCommit, PreparedTransaction
from eoskit.twophase.operator_state import OperatorStateError, decode, write_snapshot
from eoskit.twophase.task import write_task
from eoskit.twophase.txn_id import TxnId
from eoskit.twophase.verdicts import Verdict

TWOPHASE = CommitMode.TWOPHASE
SPECS = (StateSpec("ledger", "list"), StateSpec("seen", "union"))


def tag(batch: int, partition: int) -> bytes:
    return f"{batch}:{partition}".encode()


# -- the fakes: a two-phase sink whose writer keeps a ledger (list) and what it saw (union) --

class Recorder:
    def __init__(self) -> None:
        self.prepared: dict[str, list[int]] = {}
        self.committed: list[str] = []
        #: (batch, partition, attempt) -> the share restore() was given
        self.restored: dict[tuple[int, int, int], dict[str, list[bytes]]] = {}


class StateWriter(PreparingWriter, KeepsOperatorState):
    """Appends (batch, p) to its ledger share; leaves only (batch, p) as its
    part of the union, so that the next batch sees every instance's tag."""

    operator_state = SPECS

    def __init__(self, recorder: Recorder, txn_id: str) -> None:
        self.recorder, self.txn_id = recorder, txn_id
        parsed = TxnId.parse(txn_id)
        self.task = (parsed.batch, parsed.partition, parsed.attempt)
        self.values: list[int] = []
        self.ledger: list[bytes] = []

    def restore(self, state):
        self.recorder.restored[self.task] = {k: list(v) for k, v in state.items()}
        self.ledger = list(state["ledger"])

    def write(self, batch: pa.RecordBatch) -> None:
        self.values += batch.column(0).to_pylist()

    def snapshot(self):
        return {"ledger": [*self.ledger, tag(*self.task[:2])], "seen": [tag(*self.task[:2])]}

    def prepare(self) -> None:
        self.recorder.prepared[self.txn_id] = self.values

    def abort(self) -> None:
        self.values = []


class PlainWriter(PreparingWriter):
    """A writer that keeps no operator state."""

    def __init__(self, recorder: Recorder, txn_id: str) -> None:
        self.recorder, self.txn_id = recorder, txn_id

    def write(self, batch: pa.RecordBatch) -> None:
        pass

    def prepare(self) -> None:
        self.recorder.prepared[self.txn_id] = []

    def abort(self) -> None:
        pass


class MarkedStateWriter(MarkedWriter, KeepsOperatorState):
    operator_state = SPECS

    def claim(self) -> bool:
        return True

    def write(self, batch) -> None:
        pass

    def commit(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def restore(self, state) -> None:
        pass

    def snapshot(self):
        return {}


class StateSink(TwoPhaseCommitting, MarkedCommitting, Committer):
    kind = "statefake"

    def __init__(self, recorder: Recorder, writer: type = StateWriter) -> None:
        self.recorder, self.writer = recorder, writer

    def check(self, schema, context) -> None:
        pass

    def begin_prepared(self, txn_id: str):
        return self.writer(self.recorder, txn_id)

    def begin_marked(self, marker, attempt: int):
        return MarkedStateWriter()

    def committer(self):
        return self

    def commit(self, txn_id: str) -> bool:
        if self.recorder.prepared.pop(txn_id, None) is None:
            return False
        self.recorder.committed.append(txn_id)
        return True

    def roll_back(self, txn_id: str) -> bool:
        return self.recorder.prepared.pop(txn_id, None) is not None

    def in_doubt(self, prefix: str) -> list[str]:
        return sorted(t for t in self.recorder.prepared if t.startswith(prefix))


def rows(*values: int) -> list[pa.RecordBatch]:
    return [pa.record_batch([pa.array(list(values), pa.int64())], names=["v"])]


@pytest.fixture
def env(tmp_path):
    recorder = Recorder()
    sink = StateSink(recorder)
    decisions = DecisionLog(str(tmp_path / "checkpoint"), "ops1")
    decisions.create()
    return recorder, sink, decisions


def run_batch(sink, decisions, batch: int, k: int, empty: tuple[int, ...] = ()):
    """Every task of ``batch`` with parallelism ``k``, then the coordinator's commit."""
    acks = [write_task(sink, decisions, TWOPHASE, iter([] if p in empty else rows(batch * 10 + p)),
                       identity=(batch, p, 0), parallelism=k) for p in range(k)]
    return acks, Coordinator(sink.committer(), decisions, k).commit(acks, batch)


def decided_parts(decisions: DecisionLog, batch: int) -> list[dict[str, list[bytes]]]:
    """The decided snapshot files of ``batch``, read back with pyarrow alone."""
    data = json.loads(Path(decisions.root, f"decisions/{batch}.json").read_bytes())["operatorState"]
    parts = []
    for p in range(data["parallelism"]):
        table = pa.ipc.open_stream(Path(decisions.root, data["files"][str(p)]).read_bytes()).read_all()
        part: dict[str, list[bytes]] = {"ledger": [], "seen": []}
        for name, element in zip(table.column("state").to_pylist(), table.column("element").to_pylist()):
            part[name].append(element)
        parts.append(part)
    return parts


# -- the split rules, pure ----------------------------------------------------------------

def test_even_split_keeps_order_and_sizes_within_one():
    for n in range(0, 13):
        for k in range(1, 6):
            elements = list(range(n))
            parts = even_split(elements, k)
            assert len(parts) == k
            assert [e for part in parts for e in part] == elements
            sizes = [len(p) for p in parts]
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_list_state_2_to_4_to_2():
    two = [["a", "b", "c"], ["d", "e"]]
    four = redistribute(two, 4, "list")
    assert four == [["a", "b"], ["c"], ["d"], ["e"]]
    four[0].append("f")  # the instances go on from their shares
    assert redistribute(four, 2, "list") == [["a", "b", "f"], ["c", "d", "e"]]


def test_list_state_3_to_1_and_same_k_keeps_each_part():
    parts = [["a"], [], ["b", "c", "d"]]
    assert redistribute(parts, 1, "list") == [["a", "b", "c", "d"]]
    # Same parallelism: instance p gets part p, even when the parts are uneven.
    assert redistribute(parts, 3, "list") == parts


def test_union_gives_every_instance_the_whole_concatenation_in_copies():
    shares = redistribute([["a"], ["b", "c"]], 3, "union")
    assert shares == [["a", "b", "c"]] * 3
    shares[0].append("x")
    assert shares[1] == ["a", "b", "c"]
    assert union(["a"], 2) == [["a"], ["a"]]


def test_no_decision_yet_gives_empty_shares_and_bad_arguments_are_refused():
    assert redistribute([], 4, "list") == [[], [], [], []]
    assert redistribute([], 2, "union") == [[], []]
    with pytest.raises(ValueError, match="kind 'broadcast'"):
        redistribute([["a"]], 2, "broadcast")
    with pytest.raises(ValueError, match="positive whole number"):
        even_split(["a"], 0)
    with pytest.raises(ValueError, match="kind 'map'"):
        StateSpec("x", "map")  # type: ignore[arg-type]


def test_split_reserved_separates_the_at_keys_in_order():
    offsets = {"payments": {"0": 12}, "@broadcast": {"version": 7}, "audit": {"1": 3}}
    plain, reserved = split_reserved(offsets)
    assert list(plain) == ["payments", "audit"] and plain["audit"] == {"1": 3}
    assert reserved == {"@broadcast": {"version": 7}} and RESERVED_PREFIX == "@"
    assert split_reserved({}) == ({}, {})


# -- the protocol through the fakes ---------------------------------------------------------

def test_the_first_batch_restores_empty_shares(env):
    recorder, sink, decisions = env
    run_batch(sink, decisions, 0, 2)
    assert recorder.restored[(0, 0, 0)] == {"ledger": [], "seen": []}
    assert recorder.restored[(0, 1, 0)] == {"ledger": [], "seen": []}


def test_the_decision_carries_the_acked_attempts_snapshots(env):
    recorder, sink, decisions = env
    # Batch 1 (no pruning in its commit): partition 0's attempt 0 snapshots, then loses (Spark acks attempt 1 only).
    write_task(sink, decisions, TWOPHASE, iter(rows(1)), identity=(1, 0, 0), parallelism=2)
    acks = [write_task(sink, decisions, TWOPHASE, iter(rows(1)), identity=(1, 0, 1), parallelism=2),
            write_task(sink, decisions, TWOPHASE, iter(rows(2)), identity=(1, 1, 0), parallelism=2)]
    assert [a.state_file for a in acks] == ["opstate/1/0-1.arrow", "opstate/1/1-0.arrow"]
    decision = Coordinator(sink, decisions, 2).commit(acks, 1)
    on_disk = json.loads(Path(decisions.root, "decisions/1.json").read_bytes())
    assert on_disk["operatorState"] == {"parallelism": 2,
                                        "files": {"0": "opstate/1/0-1.arrow", "1": "opstate/1/1-0.arrow"}}
    assert decision.operator_state == DecidedState(1, 2, {0: "opstate/1/0-1.arrow", 1: "opstate/1/1-0.arrow"})
    assert decisions.get(1).operator_state == decision.operator_state  # read back, after mark_done
    assert decided_parts(decisions, 1) == [{"ledger": [tag(1, 0)], "seen": [tag(1, 0)]},
                                           {"ledger": [tag(1, 1)], "seen": [tag(1, 1)]}]
    assert Path(decisions.root, "opstate/1/0-0.arrow").exists()  # the loser's, named by nothing (pruning removes it)


def test_state_follows_parallelism_2_then_4_then_2(env):
    recorder, sink, decisions = env
    for batch, k in ((0, 2), (1, 2), (2, 4), (3, 4), (4, 2)):
        run_batch(sink, decisions, batch, k)
    got = {task[:2]: share["ledger"] for task, share in recorder.restored.items()}
    # Same k: instance p keeps its part.
    assert got[(1, 0)] == [tag(0, 0)] and got[(1, 1)] == [tag(0, 1)]
    # 2 -> 4: the parts [0:0 1:0] [0:1 1:1], concatenated and split evenly.
    assert [got[(2, p)] for p in range(4)] == [[tag(0, 0)], [tag(1, 0)], [tag(0, 1)], [tag(1, 1)]]
    assert [got[(3, p)] for p in range(4)] == [[tag(0, 0), tag(2, 0)], [tag(1, 0), tag(2, 1)],
                                               [tag(0, 1), tag(2, 2)], [tag(1, 1), tag(2, 3)]]
    # 4 -> 2: the four parts of three each, two to an instance.
    assert got[(4, 0)] == [tag(0, 0), tag(2, 0), tag(3, 0), tag(1, 0), tag(2, 1), tag(3, 1)]
    assert got[(4, 1)] == [tag(0, 1), tag(2, 2), tag(3, 2), tag(1, 1), tag(2, 3), tag(3, 3)]
    # Union: every instance of a batch saw every tag the batch before left.
    for batch, before in ((1, 2), (2, 2), (3, 4), (4, 4)):
        seen = [share["seen"] for task, share in recorder.restored.items() if task[0] == batch]
        assert all(s == [tag(batch - 1, p) for p in range(before)] for s in seen), batch
    # Nothing lost or doubled: the last decision holds every append exactly once.
    ledger = sorted(e for part in decided_parts(decisions, 4) for e in part["ledger"])
    assert ledger == sorted(tag(b, p) for b, k in ((0, 2), (1, 2), (2, 4), (3, 4), (4, 2)) for p in range(k))


def test_an_empty_task_restores_and_snapshots_all_the_same(env):
    recorder, sink, decisions = env
    acks, _ = run_batch(sink, decisions, 0, 2, empty=(1,))
    assert isinstance(acks[1], NothingToCommit) and not acks[1].replay
    assert acks[1].state_file == "opstate/0/1-0.arrow"
    assert decided_parts(decisions, 0)[1]["ledger"] == [tag(0, 1)]


def test_a_batch_with_other_than_k_tasks_is_refused_with_the_message(env):
    recorder, sink, decisions = env
    acks = [write_task(sink, decisions, TWOPHASE, iter(rows(p)), identity=(0, p, 0), parallelism=3)
            for p in range(2)]
    with pytest.raises(CoordinatorError) as caught:
        Coordinator(sink, decisions, 3).commit(acks, 0)
    assert str(caught.value) == ("sink ops1 keeps operator state with parallelism 3, batch 0 ran 2 tasks: "
                                 "repartition(3) before the sink")
    assert caught.value.verdict is Verdict.PERMANENT
    assert decisions.get(0) is None and recorder.committed == []


def test_a_task_beyond_k_fails_at_once(env):
    recorder, sink, decisions = env
    with pytest.raises(OperatorStateError, match=r"parallelism 2 .*'operatorStateParallelism'.*task 2: "
                                                 r"repartition\(2\) before the sink"):
        write_task(sink, decisions, TWOPHASE, iter(rows(1)), identity=(0, 2, 0), parallelism=2)
    assert recorder.restored == {} and recorder.prepared == {}


def test_a_replay_of_a_decided_batch_restores_snapshots_and_writes_nothing(env):
    recorder, sink, decisions = env
    run_batch(sink, decisions, 0, 2)
    folder = Path(decisions.root, "opstate/0")
    before = sorted(p.name for p in folder.iterdir())
    recorder.restored.clear()
    ack = write_task(sink, decisions, TWOPHASE, iter(rows(1)), identity=(0, 1, 1), parallelism=2)
    assert isinstance(ack, NothingToCommit) and ack.replay and ack.state_file == ""
    assert recorder.restored == {} and sorted(p.name for p in folder.iterdir()) == before


def test_an_undecided_replay_restores_what_its_first_attempt_restored(env):
    recorder, sink, decisions = env
    run_batch(sink, decisions, 0, 2)
    write_task(sink, decisions, TWOPHASE, iter(rows(1)), identity=(1, 0, 0), parallelism=2)
    again = write_task(sink, decisions, TWOPHASE, iter(rows(1)), identity=(1, 0, 1), parallelism=2)
    assert isinstance(again, PreparedTransaction)
    assert recorder.restored[(1, 0, 1)] == recorder.restored[(1, 0, 0)] == {"ledger": [tag(0, 0)],
                                                                          "seen": [tag(0, 0), tag(0, 1)]}


def test_state_before_takes_the_newest_decision_with_state_below_the_batch(env):
    recorder, sink, decisions = env
    assert decisions.state_before(0) is None
    run_batch(sink, decisions, 0, 2)
    decisions.mark_done(decisions.decide(1, [], 0))  # a batch decided without operator state
    assert decisions.state_before(2).batch == 0
    assert decisions.state_before(0) is None


def test_option_and_capability_must_agree(env):
    recorder, sink, decisions = env
    with pytest.raises(OperatorStateError, match="keep operator state \\(ledger \\(list\\), seen \\(union\\)\\): "
                                                 "set the sink option 'operatorStateParallelism'"):
        write_task(sink, decisions, TWOPHASE, iter(rows(1)), identity=(0, 0, 0))
    plain = StateSink(recorder, PlainWriter)
    with pytest.raises(OperatorStateError, match="'operatorStateParallelism' is set, but the writers of "
                                                 "statefake keep no operator state"):
        write_task(plain, decisions, TWOPHASE, iter(rows(1)), identity=(0, 0, 0), parallelism=2)
    assert recorder.prepared == {}


def test_a_snapshot_of_undeclared_state_or_non_bytes_fails_the_task(env):
    recorder, sink, decisions = env

    class Wrong(StateWriter):
        def snapshot(self):
            return {"ledger": ["text"]}

    with pytest.raises(OperatorStateError, match="state 'ledger' holds a str"):
        write_task(StateSink(recorder, Wrong), decisions, TWOPHASE, iter(rows(1)), identity=(0, 0, 0),
                   parallelism=1)

    class Undeclared(StateWriter):
        def snapshot(self):
            return {"other": [b"x"]}

    with pytest.raises(OperatorStateError, match="'other' that its operator_state does not declare"):
        write_task(StateSink(recorder, Undeclared), decisions, TWOPHASE, iter(rows(1)), identity=(0, 0, 0),
                   parallelism=1)
    assert recorder.prepared == {}


class StateDataSource(TransactionalDataSource):
    sink_type = StateSink

    @classmethod
    def name(cls) -> str:
        return "statefake"

    def transactional_sink(self, schema):
        return StateSink(Recorder())


def test_marked_commit_refuses_operator_state_at_start_and_in_its_tasks(env):
    recorder, sink, decisions = env
    source = StateDataSource({"commitMode": "idempotent", "operatorStateParallelism": "2"})
    with pytest.raises(SinkError, match="'operatorStateParallelism' needs commitMode twophase "
                                        "\\(given: idempotent\\)"):
        source.operator_state_parallelism()
    assert StateDataSource({"commitMode": "twophase", "operatorStateParallelism": "2"}
                           ).operator_state_parallelism() == 2
    with pytest.raises(OperatorStateError, match="only commitMode=twophase checkpoints"):
        write_task(sink, decisions, CommitMode.IDEMPOTENT, iter(rows(1)), identity=(0, 0, 0))


# -- pruning ---------------------------------------------------------------------------------

def _decide_with_state(decisions: DecisionLog, batch: int, k: int, losers: tuple[int, ...] = ()) -> None:
    for p in losers:
        write_snapshot(decisions, batch, p, 0, SPECS, {"ledger": [b"lost"]})
    files = {p: write_snapshot(decisions, batch, p, 1 if p in losers else 0, SPECS, {"ledger": [tag(batch, p)]})
             for p in range(k)}
    decisions.mark_done(decisions.decide(batch, [], 0, None, DecidedState(batch, k, files)))


def _retain(checkpoint: Path, batches: range) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    for batch in batches:
        (checkpoint / "offsets" / str(batch)).write_text("v1")


def test_pruning_removes_old_batches_state_and_losing_attempts(tmp_path):
    decisions = DecisionLog(str(tmp_path), "ops1")
    decisions.create()
    for batch in range(30):
        _decide_with_state(decisions, batch, 2, losers=(1,) if batch in (5, 25) else ())
    write_snapshot(decisions, 30, 0, 0, SPECS, {})  # batch 30 in flight: not decided yet
    _retain(tmp_path, range(20, 31))
    decisions.prune(29)
    opstate = Path(decisions.root, "opstate")
    assert decisions.batches() == list(range(20, 30))
    assert sorted(int(p.name) for p in opstate.iterdir()) == list(range(20, 31))
    assert sorted(p.name for p in (opstate / "25").iterdir()) == ["0-0.arrow", "1-1.arrow"]
    assert (opstate / "30" / "0-0.arrow").exists()


def test_pruning_keeps_the_newest_decision_with_state_past_retention(tmp_path):
    decisions = DecisionLog(str(tmp_path), "ops1")
    decisions.create()
    _decide_with_state(decisions, 3, 2)
    _decide_with_state(decisions, 4, 2)
    for batch in range(5, 30):  # the state was turned off after batch 4
        decisions.mark_done(decisions.decide(batch, [f"t{batch}"], 1))
    write_snapshot(decisions, 6, 0, 0, SPECS, {})  # never decided with state: a crashed attempt's
    _retain(tmp_path, range(20, 30))
    assert decisions.prune(29) == 20
    assert decisions.batches() == [4, *range(20, 30)]
    assert sorted(p.name for p in Path(decisions.root, "opstate").iterdir()) == ["4"]
    assert DecisionLog(str(tmp_path), "ops1").state_before(30) == DecidedState(
        4, 2, {0: "opstate/4/0-0.arrow", 1: "opstate/4/1-0.arrow"})


def test_pruning_a_sink_without_operator_state_reads_no_opstate(tmp_path):
    decisions = DecisionLog(str(tmp_path), "ops1")
    decisions.create()
    for batch in range(12):
        decisions.mark_done(decisions.decide(batch, [f"t{batch}"], 1))
    _retain(tmp_path, range(5, 12))
    assert decisions.prune(11) == 5 and decisions.batches() == list(range(5, 12))


def test_snapshots_are_readable_on_an_in_memory_file_system():
    decisions = DecisionLog("memory://opstate-test", "ops1")
    decisions.create()
    name = write_snapshot(decisions, 2, 1, 0, SPECS, {"ledger": [b"a", b"b"], "seen": [b"c"]})
    elements, kinds = decode(decisions.read_bytes(name))
    assert elements == {"ledger": [b"a", b"b"], "seen": [b"c"]}
    assert kinds == {"ledger": "list", "seen": "union"}


# -- savepoints and inspection ---------------------------------------------------------------

# The synthetic checkpoint tree of tests/test_checkpoints.py (tests/ is no package).
_spec = importlib.util.spec_from_file_location("checkpoint_trees", Path(__file__).with_name("test_checkpoints.py"))
trees = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trees)  # type: ignore[union-attr]


@pytest.fixture
def checkpoint_with_state(tmp_path) -> str:
    location = str(tmp_path / "ck")
    trees.make_checkpoint(location)  # batches 0..4 planned, 0..3 committed
    decisions = DecisionLog(location, "ops1")
    decisions.create()
    _decide_with_state(decisions, 2, 2)
    _decide_with_state(decisions, 3, 4, losers=(2,))
    _decide_with_state(decisions, 5, 2)  # beyond what a savepoint of batch 3 copies
    return location


def test_a_savepoint_copies_the_state_files_its_decisions_name(checkpoint_with_state):
    copied = {rel for rel, _ in savepoint_files(Checkpoint(checkpoint_with_state), 3)}
    state = {rel for rel in copied if "/opstate/" in rel}
    assert state == {f"eoskit/sinks/ops1/opstate/2/{p}-0.arrow" for p in range(2)} | {
        "eoskit/sinks/ops1/opstate/3/0-0.arrow", "eoskit/sinks/ops1/opstate/3/1-0.arrow",
        "eoskit/sinks/ops1/opstate/3/2-1.arrow", "eoskit/sinks/ops1/opstate/3/3-0.arrow"}
    assert "eoskit/sinks/ops1/decisions/3.json" in copied and "eoskit/sinks/ops1/decisions/5.json" not in copied


def test_inspection_lists_each_sinks_operator_state(checkpoint_with_state):
    rows = operator_states(checkpoint_with_state, 3)
    assert [(r.sink_id, r.name, r.kind, r.parallelism, r.elements, r.batch) for r in rows] == [
        ("ops1", "ledger", "list", 4, 4, 3), ("ops1", "seen", "union", 4, 0, 3)]
    assert [r.batch for r in operator_states(checkpoint_with_state)] == [5, 5]
