"""eoskit's conformance kit against the SQLite sink: every crash scenario
of both commit modes, each a real ``eoskit run`` job killed at one step of
the protocol, restarted until caught up, and checked with Python's own
``sqlite3``: every record exactly once, nothing left prepared.

The submission tier keeps a driver kill and a worker kill per mode; the
full tier runs them all (``pytest.mark.full``)."""

from __future__ import annotations

import pytest

from eoskit.testing.conformance import Workload, run_scenario, scenarios_for

from target import SqliteTarget

#: What the submission tier keeps of each mode.
KEPT = {"twophase": ("task_killed_after_prepare", "driver_killed_after_some_commits"),
        "idempotent": ("worker_killed_during_write", "driver_killed_after_some_task_commits")}


def scenarios(mode: str) -> list:
    return [pytest.param(s, id=s.name, marks=() if s.name in KEPT[mode] else pytest.mark.full)
            # Given the target class: the scenarios its markers allow (replays with other rows).
            for s in scenarios_for(mode, SqliteTarget)]


@pytest.fixture(scope="module")
def workload(kafka: str) -> Workload:
    return Workload.produce(kafka, records=8_000, partitions=4, batches=4)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", scenarios("twophase"))
def test_sqlite_twophase(workload, scenario, tmp_path):
    run_scenario(SqliteTarget(tmp_path / "app.db"), workload, scenario, tmp_path / "work")


@pytest.mark.crash
@pytest.mark.parametrize("scenario", scenarios("idempotent"))
def test_sqlite_idempotent(workload, scenario, tmp_path):
    run_scenario(SqliteTarget(tmp_path / "app.db", "idempotent"), workload, scenario, tmp_path / "work")


def test_both_modes_keep_a_driver_and_a_worker_kill_in_the_submission_tier():
    for mode, kept in KEPT.items():
        kills = {s.kills for s in scenarios_for(mode, SqliteTarget) if s.name in kept}
        assert kills == {"driver", "worker"}, (mode, kills)
