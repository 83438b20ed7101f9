"""A job that runs for weeks: the endurance scenario (thousands of tiny
batches, the driver killed in the middle, what the job keeps flat) and the
long tier's one run through as many without a fault. Neither is one of
``SCENARIOS``; a conformance test runs them with ``run_scenario``.
"""

from __future__ import annotations

import os
import signal

from eoskit.testing.conformance.harness import Run, reap_group, wait_for_file
from eoskit.testing.conformance.scenarios import Scenario
from eoskit.testing.conformance.workload import ENDURANCE_RETAINED
from eoskit.twophase.decision_log import PRUNE_EVERY


#: How much the kept counts may differ between the middle and the end of an
#: endurance run: decisions and markers are pruned every ``PRUNE_EVERY``
#: batches, Spark's logs at every batch, so a count may stand up to one
#: period (and a batch in flight) apart at two moments.
ENDURANCE_SLACK = {"decision files": 2 * PRUNE_EVERY, "checkpoint files": 8 * PRUNE_EVERY}


def kept(run: Run) -> dict[str, int]:
    """What the job keeps that must not grow with its batches: the
    checkpoint's files (Spark's logs, eoskit's decision log and metadata),
    the decision files alone, and the sink's own (``ConformanceTarget.kept``)."""
    files = [p for p in run.checkpoint.rglob("*") if p.is_file()]
    decisions = [p for p in files if p.parent.name == "decisions"]
    return {"checkpoint files": len(files), "decision files": len(decisions),
            **run.target.kept(run.table, run.sink_id)}


def _endurance(run: Run) -> None:
    """The job through every batch of its workload (``ENDURANCE_BATCHES``
    in the endurance tier, keeping ``ENDURANCE_RETAINED``), its driver SIGKILLed after the commit
    of the middle batch, then restarted: every record once, and what the job
    keeps (``kept``) no larger at the end than in the middle, so that a week
    of batches keeps no more than a day's."""
    batches = -(-run.workload.records // run.workload.batch_offsets)
    middle = batches // 2
    retained = {"EOSKIT_TEST_RETAINED_CHECKPOINTS": str(ENDURANCE_RETAINED)}
    process = run.start(**retained)
    wait_for_file(run.checkpoint / f"commits/{middle}", process, run, timeout=max(300, batches))
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    reap_group(process.pid)
    at_middle = kept(run)
    run.recover(**retained)
    at_end = kept(run)
    print(f"kept after batch {middle}: {at_middle}; after batch {batches - 1}: {at_end}")
    run.verify_exactly_once()
    committed = sorted(int(p.name) for p in (run.checkpoint / "commits").iterdir() if p.name.isdigit())
    assert committed[-1] == batches - 1, f"the last committed batch is {committed[-1]}, not {batches - 1}"
    for name, count in at_end.items():
        slack = ENDURANCE_SLACK.get(name, 2 * PRUNE_EVERY * run.workload.partitions)
        assert count <= at_middle[name] + slack, (
            f"{name} grew from {at_middle[name]} after batch {middle} to {count} after batch "
            f"{batches - 1}: something is kept per batch and never pruned")


def _one_long_run(run: Run) -> None:
    """The job through every batch of its workload in one run, no fault:
    exit 0, every record once, nothing left prepared, and the last batch
    committed. What a week at a one-second trigger does to the periodic
    paths, in one process (batch 1,100 once stopped the two-phase SQL sinks
    for good: pruning handed the sink the wrong argument)."""
    batches = -(-run.workload.records // run.workload.batch_offsets)
    code, log = run.run_job(timeout=max(600, 2 * batches))
    assert code == 0, f"the run of {batches} batches failed (exit {code}):\n{log[-4000:]}"
    committed = sorted(int(p.name) for p in (run.checkpoint / "commits").iterdir() if p.name.isdigit())
    assert committed[-1] == batches - 1, f"the last committed batch is {committed[-1]}, not {batches - 1}"
    print(f"one run of {batches} batches: exit 0; kept at the end: {kept(run)}")
    run.verify_exactly_once()


#: Not one of ``SCENARIOS``: one run through thousands of tiny batches (the
#: long tier, ``pytest -m long``; not part of CI, see docs/conformance.md).
ONE_LONG_RUN = Scenario("one_long_run", _one_long_run,
                        "a job through thousands of batches in one run: exit 0, exact",
                        stateful=False)


#: Not one of ``SCENARIOS``: thousands of tiny batches, for the endurance tier
#: (``Workload.produce(records=2 * batches, partitions=1, batches=batches)``).
ENDURANCE = Scenario("endurance", _endurance,
                     "a job through thousands of batches, its driver killed in the middle: "
                     "exact, and what it keeps flat", stateful=False)

