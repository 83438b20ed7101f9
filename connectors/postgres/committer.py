"""PostgreSQL's committer: ``COMMIT PREPARED`` / ``ROLLBACK PREPARED`` by
id, ``pg_prepared_xacts`` for what is prepared, ``txid_status`` for the
fate of one whose reply was lost. The flow, and riding out a lost
connection, are ``SqlCommitter``'s (``sql/committer.py``); these are the
statements."""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from eoskit.connectors.postgres.connection import cached_connection
from eoskit.connectors.sql.committer import SqlCommitter
from eoskit.connectors.sql.reconnect import Attempt
from eoskit.twophase.contract import Outcome

#: How long ``COMMIT PREPARED`` waits for a prepared transaction that
#: another session (an earlier try whose reply was lost) is still ending.
BUSY_WAIT_S = 30.0


class PostgresCommitter(SqlCommitter):
    """Ends a PostgreSQL sink's prepared transactions on the process's cached connection."""

    END_PREPARED = "{verb} PREPARED"
    LIST_PREPARED = "listing prepared transactions"

    def _end_prepared(self, statement: str, txn_id: str, attempt: Attempt) -> bool:
        """``COMMIT PREPARED`` / ``ROLLBACK PREPARED``; "no such prepared
        transaction" (UndefinedObject) is False."""
        conn = cached_connection(self.sink.url, self.sink.settings.limits)
        deadline = time.monotonic() + BUSY_WAIT_S
        while True:
            try:
                with attempt.sending():
                    conn.execute(sql.SQL(statement + " {}").format(sql.Literal(txn_id)))
            except psycopg.errors.UndefinedObject:
                return False
            except psycopg.errors.ObjectInUse:
                # "prepared transaction ... is busy": an earlier try's session,
                # cut off from us, is still ending it; its outcome comes soon.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                continue
            return True

    def _outcome(self, txn_id: str, evidence: str) -> Outcome:
        """``txid_status`` of the transaction id its prepare recorded: the
        server's own commit log ("in progress" would be a transaction still
        prepared, and NULL one too old for the log: neither says)."""
        status = cached_connection(self.sink.url, self.sink.settings.limits).execute(
            "SELECT txid_status(%s)", (int(evidence),)).fetchone()[0]
        return {"committed": Outcome.COMMITTED, "aborted": Outcome.ROLLED_BACK}.get(status, Outcome.UNKNOWN)

    def _prepared_ids(self, prefix: str) -> list[str]:
        """From ``pg_prepared_xacts``, this database's only."""
        rows = cached_connection(self.sink.url, self.sink.settings.limits).execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
            "AND left(gid, length(%s)) = %s ORDER BY gid", (prefix, prefix)
        ).fetchall()
        return [r[0] for r in rows]
