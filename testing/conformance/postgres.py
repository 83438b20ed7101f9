"""The PostgreSQL sink as a conformance target, read back with psql (a
client eoskit does not use): what the crash tests, the service-fault tests
and the soak run check the table and its prepared transactions with.

Also an example of a ``ConformanceTarget`` for plug-in authors. Needs the
``psql`` client on the PATH.
"""

from __future__ import annotations

import subprocess

from sqlalchemy.engine import make_url

from eoskit.testing.conformance.target import PreparingTarget, TotalsTarget


def libpq_uri(url: str) -> str:
    """A SQLAlchemy URL (``postgresql+psycopg://...``) as libpq reads it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class PostgresTarget(PreparingTarget, TotalsTarget):
    """The ``eoskit-postgres`` sink writing ``(id, amount, customer)`` rows, or
    a stateful job's ``(customer, total, orders)`` upserted by customer."""

    format = "eoskit-postgres"

    def __init__(self, url: str, commit_mode: str = "twophase") -> None:
        self.url = url
        self.commit_mode = commit_mode

    def psql(self, query: str) -> str:
        result = subprocess.run(
            ["psql", libpq_uri(self.url), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", query],
            capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, f"psql failed: {result.stderr.strip()}"
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
        return [(int(a), int(b)) for a, b in (line.split("|") for line in out.splitlines() if line)]

    def totals_options(self, table: str) -> dict[str, str]:
        return {"url": self.url, "dbtable": table, "mode": "upsert", "key": "customer",
                "commitMode": self.commit_mode}

    def create_totals_table(self, table: str) -> None:
        self.psql(f"CREATE TABLE {table} (customer text PRIMARY KEY, total bigint, orders bigint)")

    def totals(self, table: str) -> dict[str, tuple[int, int]]:
        out = self.psql(f"SELECT customer, total, orders FROM {table}")
        return {c: (int(t), int(n)) for c, t, n in (line.split("|") for line in out.splitlines() if line)}

    def prepared(self, prefix: str) -> list[str]:
        out = self.psql(f"SELECT gid FROM pg_prepared_xacts WHERE left(gid, {len(prefix)}) = '{prefix}'")
        return sorted(line for line in out.splitlines() if line)

    def resolve_command(self) -> list[str]:
        return ["--url", self.url]

    def kept(self, table: str, sink_id: str) -> dict[str, int]:
        if self.commit_mode != "idempotent":
            return {}
        out = self.psql(f"SELECT count(*) FROM eoskit_markers WHERE sink_id = '{sink_id}'")
        return {"marker rows": int(out.strip())}
