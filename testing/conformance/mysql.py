"""The MySQL / MariaDB sink as a conformance target, read back with the
``mariadb`` (or ``mysql``) command-line client, a client eoskit does not use
(it talks through PyMySQL): what the crash tests, the service-fault and
network-fault tests check the table and ``XA RECOVER`` with. Needs the
client on the PATH (``CLIENT`` is None without it)."""

from __future__ import annotations

import os
import shutil
import subprocess

from sqlalchemy.engine import make_url

from eoskit.testing.conformance.target import PreparingTarget, TotalsTarget

CLIENT = shutil.which("mariadb") or shutil.which("mysql")


class MySQLTarget(PreparingTarget, TotalsTarget):
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

    def kept(self, table: str, sink_id: str) -> dict[str, int]:
        """The marker table's rows of this sink: the idempotent mode's
        markers, or the two-phase mode's evidence rows (named by XA id)."""
        prefix = f"eoskit:{sink_id}:" if self.commit_mode == "twophase" else None
        where = (f"LEFT(sink_id, {len(prefix)}) = '{prefix}'" if prefix else f"sink_id = '{sink_id}'")
        found = self.sql(f"SELECT COUNT(*) FROM eoskit_markers WHERE {where}")
        return {"marker rows": int(found[0][0])}
