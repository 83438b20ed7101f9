"""The SQLite sink as a conformance target, read back with Python's own
``sqlite3`` module and ``os``: nothing of the plug-in's code."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from eoskit.testing.conformance import ConformanceTarget

SUFFIX = ".prepared.db"


class SqliteTarget(ConformanceTarget):
    format = "eoskit-sqlite"
    #: The idempotent mode records each task's rows with its marker.
    records_replay_rows = True

    def __init__(self, database: Path, commit_mode: str = "twophase") -> None:
        self.database, self.commit_mode = database, commit_mode
        self.staging = Path(f"{database}.eoskit")

    def _query(self, statement: str, args: tuple = ()) -> list[tuple]:
        with closing(sqlite3.connect(self.database, timeout=60)) as conn:
            with conn:
                return conn.execute(statement, args).fetchall()

    def options(self, table: str) -> dict[str, str]:
        return {"path": str(self.database), "dbtable": table, "commitMode": self.commit_mode}

    def create_table(self, table: str) -> None:
        self._query(f'CREATE TABLE "{table}" (id INTEGER, amount INTEGER, customer TEXT)')

    def drop_table(self, table: str) -> None:
        self._query(f'DROP TABLE IF EXISTS "{table}"')

    def rows(self, table: str) -> list[tuple[int, int]]:
        return sorted(self._query(f'SELECT id, amount FROM "{table}"'))

    def prepared(self, prefix: str) -> list[str]:
        names = (p.name[: -len(SUFFIX)] for p in self.staging.glob(f"*{SUFFIX}"))
        return sorted(n for n in names if n.startswith(prefix))

    def rollback(self, txn_id: str) -> None:
        (self.staging / f"{txn_id}{SUFFIX}").unlink(missing_ok=True)

    def leftovers(self, table: str) -> list[str]:
        return sorted(str(p) for p in self.staging.glob("*.writing.db"))

    def resolve_command(self) -> list[str]:
        return ["--path", str(self.database)]

    def kept(self, table: str, sink_id: str) -> dict[str, int]:
        return {name: self._query(f"SELECT count(*) FROM {name} WHERE sink_id = ?", (sink_id,))[0][0]
                for name in ("eoskit_markers", "eoskit_committed")}
