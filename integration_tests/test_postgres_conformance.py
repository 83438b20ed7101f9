"""The conformance crash scenarios against the PostgreSQL sink (two-phase),
checked with psql, an independent client."""

from __future__ import annotations

import subprocess

import pytest
from sqlalchemy.engine import make_url

from eoskit.twophase.conformance import ConformanceTarget, Workload, run_scenario, scenarios_for


def libpq_uri(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class PostgresTarget(ConformanceTarget):
    format = "eoskit-postgres"

    def __init__(self, url: str, commit_mode: str = "twophase") -> None:
        self.url = url
        self.commit_mode = commit_mode

    def psql(self, query: str) -> str:
        result = subprocess.run(
            ["psql", libpq_uri(self.url), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", query],
            capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def options(self, table: str) -> dict[str, str]:
        return {"url": self.url, "dbtable": table, "mode": "append", "commitMode": self.commit_mode}

    def create_table(self, table: str) -> None:
        self.psql(f"CREATE TABLE {table} (id bigint NOT NULL, amount bigint, customer text)")

    def drop_table(self, table: str) -> None:
        self.psql(f"DROP TABLE IF EXISTS {table}")

    def rollback(self, txn_id: str) -> None:
        self.psql(f"ROLLBACK PREPARED '{txn_id}'")

    def rows(self, table: str) -> list[tuple[int, int]]:
        out = self.psql(f"SELECT id, amount FROM {table}")
        return [tuple(int(x) for x in line.split("|")) for line in out.splitlines() if line]

    def prepared(self, prefix: str) -> list[str]:
        out = self.psql(f"SELECT gid FROM pg_prepared_xacts WHERE left(gid, {len(prefix)}) = '{prefix}'")
        return sorted(line for line in out.splitlines() if line)

    def resolve_command(self) -> list[str]:
        return ["--url", self.url]


@pytest.fixture(scope="module")
def workload(kafka: str) -> Workload:
    return Workload.produce(kafka, records=100_000, partitions=4, batches=5)


TWOPHASE = scenarios_for("twophase")
IDEMPOTENT = scenarios_for("idempotent")


@pytest.mark.crash
@pytest.mark.parametrize("scenario", TWOPHASE, ids=[s.name for s in TWOPHASE])
def test_postgres_twophase(spark, postgres, workload, scenario, tmp_path):
    run_scenario(PostgresTarget(postgres), workload, scenario, tmp_path, spark)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", IDEMPOTENT, ids=[s.name for s in IDEMPOTENT])
def test_postgres_idempotent(spark, postgres, workload, scenario, tmp_path):
    run_scenario(PostgresTarget(postgres, "idempotent"), workload, scenario, tmp_path, spark)
