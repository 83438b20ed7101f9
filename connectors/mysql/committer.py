"""MySQL's and MariaDB's committer: ``XA COMMIT`` / ``XA ROLLBACK`` by id,
``XA RECOVER`` for what is prepared, and the evidence row of the marker
table for the fate of one whose reply was lost. The flow, and riding out a
lost connection, are ``SqlCommitter``'s (``sql/committer.py``); these are
the statements. Why a prepared XA transaction may still be attached to its
session for a moment is in ``connection.py``."""

from __future__ import annotations

import logging
import time

import pymysql

from eoskit.connectors.mysql import checks
from eoskit.connectors.mysql.connection import cached_connection
from eoskit.connectors.mysql.dialect import error_code, error_text
from eoskit.connectors.mysql.failures import lost as connection_lost
from eoskit.connectors.sql.committer import SqlCommitter
from eoskit.connectors.sql.reconnect import Attempt
from eoskit.twophase.contract import Outcome, SinkError
from eoskit.twophase.txn_id import sink_prefix

log = logging.getLogger(__name__)

# Server error numbers the committer reacts to.
XAER_NOTA = 1397  # unknown XID (or still attached to the session that prepared it)
XA_RBROLLBACK = 1402  # the branch was rolled back (a read-only branch, on XA COMMIT)
#: How long ``XA COMMIT`` / ``XA ROLLBACK`` wait for a prepared transaction
#: to be detached from the session that prepared it (see connection.py).
DETACH_WAIT_S = 30.0


class MySQLCommitter(SqlCommitter):
    """Ends a MySQL sink's XA transactions on the process's cached connection."""

    END_PREPARED = "XA {verb}"
    LIST_PREPARED = "XA RECOVER"

    def _end_prepared(self, statement: str, txn_id: str, attempt: Attempt) -> bool:
        """``XA COMMIT`` / ``XA ROLLBACK``. XAER_NOTA for an id that ``XA
        RECOVER`` still lists means the session that prepared it has not
        finished disconnecting: wait; one it no longer lists is False. A
        server error other than a lost session fails with a ``SinkError``
        naming the statement (a lost one is raised as it is, for
        ``reconnecting`` to try again)."""
        try:
            return self._end_xa(statement, txn_id, attempt)
        except pymysql.MySQLError as exc:
            if connection_lost(exc):
                raise
            raise SinkError(f"{statement} {txn_id} failed in {self.sink.describe()}: "
                            f"{error_text(exc)}") from None

    def _end_xa(self, statement: str, txn_id: str, attempt: Attempt) -> bool:
        deadline = time.monotonic() + DETACH_WAIT_S
        delay = 0.01
        while True:
            conn = cached_connection(self.sink.url, self.sink.settings.limits)
            try:
                with attempt.sending(), conn.cursor() as cursor:
                    cursor.execute(f"{statement} %s", (txn_id,))
                return True
            except pymysql.MySQLError as exc:
                code = error_code(exc)
                if code == XA_RBROLLBACK:
                    # A read-only branch: the server ends it as rolled back;
                    # there was nothing to commit, and it is gone now.
                    log.info("%s %s: read-only branch, ended as rolled back", statement, txn_id)
                    return True
                if code != XAER_NOTA:
                    raise
            if txn_id not in self._prepared_ids(txn_id):
                return False
            if time.monotonic() > deadline:
                raise SinkError(
                    f"prepared transaction {txn_id} in {self.sink.describe()} is still attached to "
                    f"the session that prepared it after {DETACH_WAIT_S:.0f} s; that session "
                    "(a stuck task?) must disconnect before it can be committed or rolled back"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def _outcome(self, txn_id: str, evidence: str) -> Outcome:
        """The XA transaction's evidence row (``MySQLWriter._insert_evidence``):
        there, it committed; not there and not prepared, it rolled back."""
        with cached_connection(self.sink.url, self.sink.settings.limits).cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {self.sink.marker_table_sql} WHERE sink_id = %s", (txn_id,))
            found = int(cursor.fetchone()[0])
        if found:
            return Outcome.COMMITTED
        return Outcome.UNKNOWN if txn_id in self._prepared_ids(txn_id) else Outcome.ROLLED_BACK

    def forget_evidence(self, sink_id: str, below_batch: int) -> None:
        """The evidence rows of batches whose decisions are forgotten."""
        prefix = sink_prefix(sink_id)
        with cached_connection(self.sink.url, self.sink.settings.limits).cursor() as cursor:
            cursor.execute(f"DELETE FROM {self.sink.marker_table_sql} WHERE LEFT(sink_id, %s) = %s "
                           "AND batch < %s", (len(prefix), prefix, below_batch))

    def _prepared_ids(self, prefix: str) -> list[str]:
        """``XA RECOVER`` on the cached session: formatID, gtrid_length,
        bqual_length, data; the gtrid is the first gtrid_length bytes of
        data. eoskit's ids use the default formatID 1 and no bqual; anything
        else is someone else's. A lost session raises (the caller retries)."""
        with cached_connection(self.sink.url, self.sink.settings.limits).cursor() as cursor:
            try:
                cursor.execute("XA RECOVER")
            except pymysql.MySQLError as exc:
                if connection_lost(exc):
                    raise
                raise SinkError(checks.xa_rights_message(exc, self.sink.url)) from None
            rows = cursor.fetchall()
        found = []
        for format_id, gtrid_length, bqual_length, data in rows:
            if int(format_id) != 1 or int(bqual_length) != 0:
                continue
            raw = data if isinstance(data, bytes) else str(data).encode()
            gtrid = raw[: int(gtrid_length)].decode("utf-8", errors="replace")
            if gtrid.startswith(prefix):
                found.append(gtrid)
        return sorted(found)
