"""The conformance crash scenarios against the PostgreSQL sink (two-phase),
checked with psql, an independent client."""

from __future__ import annotations

import pytest

from eoskit.twophase.conformance import Workload, run_scenario, scenarios_for


@pytest.fixture(scope="module")
def workload(kafka: str) -> Workload:
    return Workload.produce(kafka, records=50_000, partitions=4, batches=5)


TWOPHASE = scenarios_for("twophase")
IDEMPOTENT = scenarios_for("idempotent")


@pytest.mark.crash
@pytest.mark.parametrize("scenario", TWOPHASE, ids=[s.name for s in TWOPHASE])
def test_postgres_twophase(spark, postgres_target, workload, scenario, tmp_path):
    run_scenario(postgres_target(), workload, scenario, tmp_path, spark)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", IDEMPOTENT, ids=[s.name for s in IDEMPOTENT])
def test_postgres_idempotent(spark, postgres_target, workload, scenario, tmp_path):
    run_scenario(postgres_target("idempotent"), workload, scenario, tmp_path, spark)
