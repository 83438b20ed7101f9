"""The driver's half of a SQL sink in two-phase mode: ending prepared
transactions by id, listing them, and proving what became of one whose
reply was lost.

``SqlCommitter`` is the same for every database; a dialect's committer
(``postgres/committer.py``, ``mysql/committer.py``) supplies the
statements: ending one prepared transaction, reading the prepared ids,
reading an outcome from evidence. Every call rides out a lost connection
(``sql/reconnect.py``): it is tried again on a new connection, for the
sink's ``reconnectWithin``.

The one subtle case is a ``COMMIT PREPARED`` / ``XA COMMIT`` whose
connection drops after it was sent and before the reply: it may have been
applied, and the next try hears "no such prepared transaction", as it
would for one somebody rolled back meanwhile. The committer never guesses
which: it proves outcomes (``ProvesOutcomes``). Each task's prepare leaves
evidence (PostgreSQL: the transaction's id, whose fate ``txid_status``
reports; MySQL: a row of the marker table written inside the XA
transaction, there only if it committed), the coordinator writes it into
the decision, and an id found gone is settled by ``outcome``
(``twophase/coordinator.py``, step 2).

Where it runs: on the driver (the coordinator), and on an executor for a
task's rollback of its own earlier attempts. It holds its sink (the
declaration: URL, settings, the target found once) and connects through
the process's cached connection.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, TypeVar

from eoskit.connectors.sql.reconnect import Attempt
from eoskit.twophase.contract import Outcome, ProvesOutcomes

if TYPE_CHECKING:
    from eoskit.connectors.sql.sink import SqlSink

T = TypeVar("T")

log = logging.getLogger(__name__)


class SqlCommitter(ProvesOutcomes):
    """Commits, rolls back and lists one SQL sink's prepared transactions; picklable."""

    #: The statement that ends a prepared transaction, ``verb`` COMMIT or
    #: ROLLBACK (``{verb} PREPARED``, ``XA {verb}``), as messages name it.
    END_PREPARED: ClassVar[str]
    #: What listing the prepared ids is called in messages.
    LIST_PREPARED: ClassVar[str]

    def __init__(self, sink: "SqlSink") -> None:
        self.sink = sink

    # -- what a dialect supplies ----------------------------------------------

    @abstractmethod
    def _end_prepared(self, statement: str, txn_id: str, attempt: Attempt) -> bool:
        """Run ``statement`` (``END_PREPARED`` with its verb) for ``txn_id``
        on the cached connection, the sending inside ``attempt.sending()``;
        True if it ended the transaction, False if no prepared transaction
        has the id. Inside ``reconnecting``: a lost connection is tried
        again on a new one; any other error fails the caller (the
        coordinator's call, and with it the batch's commit, which a restart
        repeats)."""

    @abstractmethod
    def _outcome(self, txn_id: str, evidence: str) -> Outcome:
        """The fate of ``txn_id``, no longer prepared, from ``evidence`` (its
        writer's ``evidence``), read on the cached connection. Inside
        ``reconnecting``, like ``_end_prepared``."""

    @abstractmethod
    def _prepared_ids(self, prefix: str) -> list[str]:
        """The prepared ids starting with ``prefix``, sorted, read on the
        cached connection. Inside ``reconnecting``, like ``_end_prepared``."""

    # -- the same for every database --------------------------------------------

    def describe(self) -> str:
        return self.sink.describe()

    def commit(self, txn_id: str) -> bool:
        return self._finish("COMMIT", txn_id)

    def roll_back(self, txn_id: str) -> bool:
        return self._finish("ROLLBACK", txn_id)

    def _finish(self, verb: str, txn_id: str) -> bool:
        """Commit or roll back a prepared transaction by id; False if no
        prepared transaction has the id. A lost connection is ridden out:
        the statement is sent again on a new connection. If a try lost its
        connection with the statement on the wire, the server may have
        finished the transaction before the connection dropped, and a later
        try hears "no such id": False all the same, for the coordinator to
        settle from the evidence (``outcome``), never a guess here."""
        statement = self.END_PREPARED.format(verb=verb)

        def attempt(state: Attempt) -> bool:
            if self._end_prepared(statement, txn_id, state):
                return True
            if state.maybe_applied:
                log.info("%s %s: no such prepared transaction after a try whose connection was "
                         "lost with the statement sent; its outcome is read from the evidence",
                         statement, txn_id)
            return False

        return self.reconnecting(f"{statement} {txn_id}", attempt)

    def outcome(self, txn_id: str, evidence: str) -> Outcome:
        """What became of ``txn_id`` (no longer prepared); a read, tried again
        over a lost connection."""
        return self.reconnecting(f"reading the outcome of {txn_id}",
                                 lambda _: self._outcome(txn_id, evidence))

    def in_doubt(self, prefix: str) -> list[str]:
        """Prepared ids starting with ``prefix``; a read, so a lost
        connection is simply tried again."""
        return self.reconnecting(self.LIST_PREPARED, lambda _: self._prepared_ids(prefix))

    def reconnecting(self, what: str, action: Callable[[Attempt], T]) -> T:
        return self.sink.reconnecting(what, action)


__all__ = ["SqlCommitter"]
