"""The conformance crash scenarios against the MySQL / MariaDB sink, in
both exactly-once modes, checked with the ``mariadb`` command-line client
(an independent client: eoskit itself talks through PyMySQL)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from sqlalchemy.engine import make_url

from eoskit.testing.conformance import (ENDURANCE, ONE_LONG_RUN, ConformanceTarget, TotalsTarget, Workload,
                                        run_scenario, scenarios_for)

CLIENT = shutil.which("mariadb") or shutil.which("mysql")


class MySQLTarget(ConformanceTarget, TotalsTarget):
    format = "eoskit-mysql"

    def __init__(self, url: str, commit_mode: str = "twophase") -> None:
        self.url = url
        self.commit_mode = commit_mode
        self._before: set[str] = set()
        #: eoskit XA transactions a scenario left prepared (see drop_table).
        self.left_prepared: list[str] = []

    def sql(self, query: str) -> list[list[str]]:
        """Rows of ``query`` as tab-separated fields; the password goes through
        the environment, never the command line."""
        u = make_url(self.url)
        command = [CLIENT, "--batch", "--skip-column-names", "--raw",
                   f"--host={u.host}", f"--port={u.port}", f"--user={u.username}",
                   f"--database={u.database}", "--execute", query]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                                env={**os.environ, "MYSQL_PWD": u.password or ""})
        assert result.returncode == 0, result.stderr
        return [line.split("\t") for line in result.stdout.splitlines() if line]

    def options(self, table: str) -> dict[str, str]:
        return {"url": self.url, "dbtable": table, "mode": "append", "commitMode": self.commit_mode}

    def create_table(self, table: str) -> None:
        self._before = set(self.prepared("eoskit:"))
        self.left_prepared = []
        self.sql(f"CREATE TABLE `{table}` (id BIGINT NOT NULL, amount BIGINT, customer TEXT) "
                 "ENGINE=InnoDB")

    def totals_options(self, table: str) -> dict[str, str]:
        return {"url": self.url, "dbtable": table, "mode": "upsert", "key": "customer",
                "commitMode": self.commit_mode}

    def create_totals_table(self, table: str) -> None:
        self._before = set(self.prepared("eoskit:"))
        self.left_prepared = []
        self.sql(f"CREATE TABLE `{table}` (customer VARCHAR(64) PRIMARY KEY, total BIGINT, "
                 "orders BIGINT) ENGINE=InnoDB")

    def totals(self, table: str) -> dict[str, tuple[int, int]]:
        return {c: (int(t), int(n)) for c, t, n in self.sql(f"SELECT customer, total, orders FROM `{table}`")}

    def rollback(self, txn_id: str) -> None:
        """Called by the kit for the sink's leftovers of a failed scenario:
        recorded (the test then fails on them), and rolled back so that their
        locks block neither the DROP nor later scenarios."""
        self.left_prepared.append(txn_id)
        self.sql(f"XA ROLLBACK '{txn_id}'")

    def drop_table(self, table: str) -> None:
        """Anything else an eoskit job prepared during the scenario goes the same way."""
        for txn in sorted(set(self.prepared("eoskit:")) - self._before):
            self.rollback(txn)
        self.sql(f"DROP TABLE IF EXISTS `{table}`")

    def rows(self, table: str) -> list[tuple[int, int]]:
        return [(int(row[0]), int(row[1])) for row in self.sql(f"SELECT id, amount FROM `{table}`")]

    def prepared(self, prefix: str) -> list[str]:
        """XA RECOVER: formatID, gtrid_length, bqual_length, data."""
        ids = []
        for _format_id, gtrid_length, _bqual_length, data in self.sql("XA RECOVER"):
            gtrid = data[: int(gtrid_length)]
            if gtrid.startswith(prefix):
                ids.append(gtrid)
        return sorted(ids)

    def resolve_command(self) -> list[str]:
        return ["--url", self.url]


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
