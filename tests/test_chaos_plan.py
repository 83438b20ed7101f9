"""The chaos command's fault plan (issue 24): drawn from a seed, in
batches, within its bounds; what a run cannot inject is dropped and said."""

from __future__ import annotations

import pytest

from eoskit.runtime.devtools.chaos.plan import (
    CUT_S,
    CUTS,
    DRIVER_STEPS,
    FAULT_KINDS,
    KINDS,
    MODE_STEPS,
    NEEDS,
    WINDOWS,
    Fault,
    FaultPlan,
    parse_faults,
)
from eoskit.core import crash

def test_every_kind_declared_once_with_help_and_a_known_need():
    assert FAULT_KINDS == ("driver", "worker", "executor", "database", "broker", "network")
    for name, kind in KINDS.items():
        assert kind.name == name and kind.help
        assert kind.needs is None or kind.needs in NEEDS
    assert KINDS["executor"].needs == "cluster"
    assert KINDS["driver"].needs is None and KINDS["worker"].needs is None


def test_parse_faults():
    assert parse_faults("worker, Driver,worker") == ("driver", "worker")
    with pytest.raises(ValueError) as refused:
        parse_faults("driver,drver")
    message = str(refused.value)
    assert message.startswith("--faults:") and "'drver'" in message
    assert "driver, worker, executor, database, broker, network" in message
    with pytest.raises(ValueError, match="--faults"):
        parse_faults(" , ")


def test_same_seed_same_plan_other_seed_other_plan():
    kinds = ("driver", "worker", "database")
    plan = FaultPlan.draw(7, kinds, kills=12)
    assert plan == FaultPlan.draw(7, kinds, kills=12)
    assert plan == FaultPlan.draw(7, tuple(reversed(kinds)), kills=12)  # the order typed does not matter
    assert plan != FaultPlan.draw(8, kinds, kills=12)
    assert plan.seed == 7 and len(plan.faults) == 12
    assert [f.index for f in plan.faults] == list(range(1, 13))


def test_gaps_delays_and_kinds_within_bounds():
    plan = FaultPlan.draw(3, ("worker", "broker"), kills=200, every_batches=(2, 4), delay_s=(0.1, 0.3))
    batches = [-1] + [f.after_batch for f in plan.faults]
    gaps = [b - a for a, b in zip(batches, batches[1:])]
    assert set(gaps) == {2, 3, 4}  # both bounds included, and reached
    assert all(0.1 <= f.delay_s <= 0.3 for f in plan.faults)
    assert {f.kind for f in plan.faults} == {"worker", "broker"}
    assert plan.last_batch == plan.faults[-1].after_batch


@pytest.mark.parametrize("kills, every, delay, option", [
    (0, (1, 3), (0.0, 0.6), "--kills"),
    (True, (1, 3), (0.0, 0.6), "--kills"),
    (2, (0, 3), (0.0, 0.6), "--faults-every"),
    (2, (3, 1), (0.0, 0.6), "--faults-every"),
    (2, (1, 2.5), (0.0, 0.6), "--faults-every"),
    (2, (1,), (0.0, 0.6), "--faults-every"),
    (2, (1, 3), (-1.0, 0.6), "--fault-delay"),
    (2, (1, 3), (0.0, float("inf")), "--fault-delay"),
])
def test_bad_bounds_are_refused_naming_the_option(kills, every, delay, option):
    with pytest.raises(ValueError, match=f"^{option}:"):
        FaultPlan.draw(1, ("driver",), kills=kills, every_batches=every, delay_s=delay)


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="--faults: unknown fault 'disk'"):
        FaultPlan.draw(1, ("driver", "disk"), kills=1)


def test_applicable_drops_what_the_run_lacks_and_says_why():
    plan = FaultPlan.draw(11, FAULT_KINDS, kills=40)
    assert {f.kind for f in plan.faults} == set(FAULT_KINDS)
    kept, skipped = plan.applicable({"dev-broker"})
    assert {f.kind for f in kept.faults} == {"driver", "worker", "broker"}
    assert kept.faults == tuple(f for f in plan.faults if f.kind in ("driver", "worker", "broker"))
    assert skipped == [
        "executor faults skipped: the job runs in local mode: its executors are not processes of their own",
        "database faults skipped: the sink's database is not eoskit's dev service",
        "network faults skipped: the job's database and broker are not eoskit's dev services on hosts "
        "of their own (eoskit dev up --network)",
    ]
    assert plan.applicable(set(NEEDS)) == (plan, [])
    with pytest.raises(ValueError, match="unknown needs"):
        plan.applicable({"dev-services"})


def test_fault_describes_itself():
    fault = Fault(2, "worker", 5, 0.314)
    assert fault.describe() == "fault 2 (worker): 0.314 s after batch 5 commits"
    assert FaultPlan(1, (fault,)).to_dict() == {
        "seed": 1, "faults": [{"index": 2, "kind": "worker", "after_batch": 5, "delay_s": 0.314,
                               "step": None, "down_s": 0.0, "cut": None}]}
    at_step = Fault(1, "driver", 2, 0.1, "driver_after_decision")
    assert at_step.describe() == "fault 1 (driver): at driver_after_decision in batch 3"


def test_driver_faults_draw_a_protocol_step_others_none():
    plan = FaultPlan.draw(11, ["driver", "worker"], 40)
    steps = {f.step for f in plan.faults if f.kind == "driver"}
    assert {f.step for f in plan.faults if f.kind == "worker"} == {None}
    assert len(steps) >= 3 and steps <= set(DRIVER_STEPS)


def test_network_faults_draw_a_cut_and_its_length_and_leave_other_plans_as_they_were():
    mixed = FaultPlan.draw(7, ("driver", "network"), kills=12)
    cuts = [f for f in mixed.faults if f.kind == "network"]
    assert cuts, "seed 7 drew no network fault"
    for fault in cuts:
        assert fault.cut in CUTS and CUT_S[0] <= fault.down_s <= CUT_S[1] and fault.step is None
        assert fault.describe().startswith(f"fault {fault.index} (network): {fault.cut} for ")
    assert KINDS["network"].needs == "dev-network" and "eoskit dev up --network" in NEEDS["dev-network"]
    # A plan without network faults draws as before: the cut is drawn only for them.
    assert all(f.cut is None for f in FaultPlan.draw(7, ("driver", "worker"), kills=12).faults)


def test_driver_faults_are_aimed_at_the_windows_of_the_sinks_mode():
    for mode, steps in MODE_STEPS.items():
        plan = FaultPlan.draw(3, ("driver",), kills=20, steps=steps)
        assert {f.step for f in plan.faults} <= set(steps), mode
    # The marked and at-least-once modes: always a task committed, its batch not recorded.
    assert MODE_STEPS["at_least_once"] == MODE_STEPS["idempotent"] == (crash.DRIVER_AFTER_TASK_COMMIT,)
    assert None not in MODE_STEPS["twophase"]
    assert set(WINDOWS) == set(DRIVER_STEPS)
