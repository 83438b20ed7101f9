"""The conformance crash scenarios with the chained job (issue 33, item 2;
``runtime/job/chain.py``): the source's tasks decode, transform and write to
the sink themselves, so every crash point of the sink's protocol fires
inside the source's read task. PostgreSQL two-phase and idempotent, checked
with psql. The submission tier keeps a share of each (the root conftest.py);
the full tier runs them all."""

from __future__ import annotations

from pathlib import Path

import pytest

from eoskit.testing.conformance import run_scenario, scenarios_for

#: The chained job reads its values decoded and writes SCHEMA's columns.
CHAINED = {"EOSKIT_TEST_CHAINED": "1"}
TWOPHASE = scenarios_for("twophase")
IDEMPOTENT = scenarios_for("idempotent")


@pytest.mark.crash
@pytest.mark.parametrize("scenario", TWOPHASE, ids=[s.name for s in TWOPHASE])
def test_postgres_chained_twophase(spark, postgres_target, postgres_workload, scenario, tmp_path):
    run_scenario(postgres_target(), postgres_workload, scenario, tmp_path, spark, env=CHAINED)
    assert_chained(tmp_path)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", IDEMPOTENT, ids=[s.name for s in IDEMPOTENT])
def test_postgres_chained_idempotent(spark, postgres_target, postgres_workload, scenario, tmp_path):
    run_scenario(postgres_target("idempotent"), postgres_workload, scenario, tmp_path, spark, env=CHAINED)
    assert_chained(tmp_path)


def assert_chained(workdir: Path) -> None:
    """Every run that started its query said it was chained (a pipeline that
    fell back to mapInArrow would pass the scenario without proving chaining)."""
    logs = [log.read_text() for log in workdir.glob("run-*.log")]
    started = [log for log in logs if "batch " in log]
    assert started and all("chained: " in log for log in started), "a run was not chained"
