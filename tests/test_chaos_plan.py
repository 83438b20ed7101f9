"""The chaos command's fault plan (issue 24): drawn from a seed, in
batches, within its bounds; what a run cannot inject is dropped and said."""

from __future__ import annotations

import pytest

from eoskit.runtime.chaos.plan import DRIVER_STEPS, FAULT_KINDS, KINDS, NEEDS, Fault, FaultPlan, parse_faults


def test_every_kind_declared_once_with_help_and_a_known_need():
    assert FAULT_KINDS == ("driver", "worker", "executor", "database", "broker")
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
    assert "driver, worker, executor, database, broker" in message
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
    ]
    assert plan.applicable(set(NEEDS)) == (plan, [])
    with pytest.raises(ValueError, match="unknown needs"):
        plan.applicable({"dev-services"})


def test_fault_describes_itself():
    fault = Fault(2, "worker", 5, 0.314)
    assert fault.describe() == "fault 2 (worker): 0.314 s after batch 5 commits"
    assert FaultPlan(1, (fault,)).to_dict() == {
        "seed": 1, "faults": [{"index": 2, "kind": "worker", "after_batch": 5, "delay_s": 0.314,
                               "step": None, "down_s": 0.0}]}
    at_step = Fault(1, "driver", 2, 0.1, "driver_after_decision")
    assert at_step.describe() == "fault 1 (driver): at driver_after_decision in batch 3"


def test_driver_faults_draw_a_protocol_step_others_none():
    plan = FaultPlan.draw(11, ["driver", "worker"], 40)
    steps = {f.step for f in plan.faults if f.kind == "driver"}
    assert {f.step for f in plan.faults if f.kind == "worker"} == {None}
    assert len(steps) >= 3 and steps <= set(DRIVER_STEPS)
