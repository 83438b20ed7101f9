"""The conformance crash scenarios against the PostgreSQL sink (two-phase),
checked with psql, an independent client."""

from __future__ import annotations

import pytest

from eoskit.testing.conformance import ENDURANCE, ONE_LONG_RUN, Workload, run_scenario, scenarios_for


@pytest.fixture(scope="module")
def workload(kafka: str) -> Workload:
    return Workload.produce(kafka, records=20_000, partitions=4, batches=5)


TWOPHASE = scenarios_for("twophase")
IDEMPOTENT = scenarios_for("idempotent")
#: The stateful job (running totals per customer, upserted in update mode):
#: the driver killed between the tasks' commits and at random, a worker
#: killed holding a prepared transaction, a replay of a committed batch
#: (MySQL's suite kills it after all commits; the stateless job here takes
#: every crash point).
STATEFUL = [s for s in scenarios_for("twophase", stateful=True) if s.name in (
    "driver_killed_after_some_commits", "task_killed_after_prepare",
    "driver_killed_at_random", "replay_of_committed_batch")]


@pytest.fixture(scope="module")
def stateful_workload(kafka: str) -> Workload:
    """Smaller batches: a random kill lands in a run of ten of them."""
    return Workload.produce(kafka, records=20_000, partitions=4, batches=10)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", TWOPHASE, ids=[s.name for s in TWOPHASE])
def test_postgres_twophase(spark, postgres_target, workload, scenario, tmp_path):
    run_scenario(postgres_target(), workload, scenario, tmp_path, spark)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", IDEMPOTENT, ids=[s.name for s in IDEMPOTENT])
def test_postgres_idempotent(spark, postgres_target, workload, scenario, tmp_path):
    run_scenario(postgres_target("idempotent"), workload, scenario, tmp_path, spark)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", STATEFUL, ids=[s.name for s in STATEFUL])
def test_postgres_stateful(spark, postgres_target, stateful_workload, scenario, tmp_path):
    run_scenario(postgres_target(), stateful_workload, scenario, tmp_path, spark, stateful=True)


#: The endurance tier (``ENDURANCE``): ``ENDURANCE_BATCHES`` micro-batches of
#: two records each with a driver kill in the middle, as for the other sinks
#: (a batch costs about 0.2 s here).
@pytest.mark.crash
@pytest.mark.endurance
@pytest.mark.full
def test_postgres_endurance(spark, postgres_target, kafka, tmp_path):
    """The default (two-phase) mode; the idempotent mode's marker pruning
    crosses batch 1,300 in test_endurance_protocol.py, against the same server."""
    run_scenario(postgres_target(), Workload.endurance(kafka), ENDURANCE, tmp_path, spark)


#: The long tier (``pytest -m long``, not in CI): past batch 1,100, where
#: pruning once stopped the default mode for good, in one run.
LONG_RUN_BATCHES = 1_300


@pytest.mark.long
def test_postgres_1300_batches_in_one_run(spark, postgres_target, kafka, tmp_path):
    workload = Workload.produce(kafka, records=2 * LONG_RUN_BATCHES, partitions=1, batches=LONG_RUN_BATCHES)
    run_scenario(postgres_target(), workload, ONE_LONG_RUN, tmp_path, spark)
