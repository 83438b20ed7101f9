"""The conformance crash scenarios against the MySQL / MariaDB sink, in
both exactly-once modes, checked with the ``mariadb`` command-line client
(an independent client: eoskit itself talks through PyMySQL)."""

from __future__ import annotations

import pytest

from eoskit.testing.conformance import ENDURANCE, ONE_LONG_RUN, Workload, run_scenario, scenarios_for
from eoskit.testing.conformance.mysql import CLIENT, MySQLTarget


@pytest.fixture(scope="module")
def workload(kafka: str) -> Workload:
    return Workload.produce(kafka, records=20_000, partitions=4, batches=5)


@pytest.fixture
def mysql_target(mysql):
    if CLIENT is None:
        pytest.skip("the mariadb (or mysql) command-line client is not installed")
    return mysql


TWOPHASE = scenarios_for("twophase")
IDEMPOTENT = scenarios_for("idempotent")
#: The stateful job (running totals per customer, upserted in update mode);
#: PostgreSQL's suite runs the other crash points of the same job.
STATEFUL = [s for s in scenarios_for("twophase", stateful=True) if s.name in (
    "driver_killed_after_all_commits", "driver_killed_at_random")]


@pytest.fixture(scope="module")
def stateful_workload(kafka: str) -> Workload:
    """Smaller batches: a random kill lands in a run of ten of them."""
    return Workload.produce(kafka, records=20_000, partitions=4, batches=10)


def _nothing_left_prepared(target: MySQLTarget) -> None:
    """After each scenario, XA RECOVER shows nothing it prepared."""
    assert target.left_prepared == [], f"XA RECOVER listed {target.left_prepared} after the scenario"


@pytest.mark.crash
@pytest.mark.parametrize("scenario", TWOPHASE, ids=[s.name for s in TWOPHASE])
def test_mysql_twophase(spark, mysql_target, workload, scenario, tmp_path):
    target = MySQLTarget(mysql_target)
    run_scenario(target, workload, scenario, tmp_path, spark)
    _nothing_left_prepared(target)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", IDEMPOTENT, ids=[s.name for s in IDEMPOTENT])
def test_mysql_idempotent(spark, mysql_target, workload, scenario, tmp_path):
    target = MySQLTarget(mysql_target, "idempotent")
    run_scenario(target, workload, scenario, tmp_path, spark)
    _nothing_left_prepared(target)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", STATEFUL, ids=[s.name for s in STATEFUL])
def test_mysql_stateful(spark, mysql_target, stateful_workload, scenario, tmp_path):
    target = MySQLTarget(mysql_target)
    run_scenario(target, stateful_workload, scenario, tmp_path, spark, stateful=True)
    _nothing_left_prepared(target)


#: The endurance tier (``ENDURANCE``, see test_postgres_conformance.py). XA
#: costs MariaDB a new session per task (0.35 s a batch here), and
#: test_endurance_protocol.py drives this sink's protocol past batch 1,300
#: against the same server.
@pytest.mark.crash
@pytest.mark.endurance
@pytest.mark.full
def test_mysql_endurance(spark, mysql_target, kafka, tmp_path):
    workload = Workload.endurance(kafka)
    target = MySQLTarget(mysql_target)
    run_scenario(target, workload, ENDURANCE, tmp_path, spark)
    _nothing_left_prepared(target)


#: The long tier (``pytest -m long``, not in CI): past batch 1,100, where
#: pruning once stopped the default mode for good, in one run.
LONG_RUN_BATCHES = 1_300


@pytest.mark.long
def test_mysql_1300_batches_in_one_run(spark, mysql_target, kafka, tmp_path):
    workload = Workload.produce(kafka, records=2 * LONG_RUN_BATCHES, partitions=1, batches=LONG_RUN_BATCHES)
    target = MySQLTarget(mysql_target)
    run_scenario(target, workload, ONE_LONG_RUN, tmp_path, spark)
    _nothing_left_prepared(target)
