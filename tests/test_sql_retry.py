"""The reconnect-and-retry helper of the SQL sinks, against a fake server
of our own (its prepared transactions, a link that drops), and the two
sinks' classifiers of "connection lost" on the drivers' own exceptions."""

from __future__ import annotations

import pytest

from eoskit.connectors.sql.reconnect import (
    MAX_DELAY_S,
    Attempt,
    ConnectionLostError,
    reconnecting,
)
from eoskit.twophase.contract import SinkError


class _Everyone(set):
    def __contains__(self, item: object) -> bool:
        return True


@pytest.fixture(autouse=True)
def servers_reached_before(monkeypatch):
    """These tests are about a connection lost after it worked (a server
    never reached fails at once: test_a_server_never_reached_fails_at_once)."""
    from eoskit.connectors.sql import reconnect as sink

    monkeypatch.setattr(sink, "_reached", _Everyone())


def test_a_server_never_reached_fails_at_once(monkeypatch):
    from eoskit.connectors.sql import reconnect as sink

    monkeypatch.setattr(sink, "_reached", set())
    tries = []

    def refused(attempt):
        tries.append(attempt)
        raise ConnectionRefusedError("refused")

    with pytest.raises(sink.ConnectionLostError, match="cannot reach the database"):
        sink.reconnecting(refused, lost=lambda e: isinstance(e, ConnectionRefusedError),
                           drop=lambda: None, what="x", server="db")
    assert len(tries) == 1


def test_a_process_of_a_running_query_waits_for_a_server_it_has_not_reached_yet(monkeypatch):
    """A Python worker the query starts while the database restarts (a
    retried task's, the abort's) has never talked to it, but the query's
    start-up check did: it waits for the server like the others."""
    from eoskit.connectors.sql import reconnect as sink

    monkeypatch.setattr(sink, "_reached", set())
    tries = []

    def refused_twice(attempt):
        tries.append(attempt)
        if len(tries) < 3:
            raise ConnectionRefusedError("refused")
        return "listed"

    clock = Clock()
    assert sink.reconnecting(refused_twice, lost=lambda e: isinstance(e, ConnectionRefusedError),
                              drop=lambda: None, what="x", server="db", reached=True,
                              clock=clock, sleep=clock.sleep) == "listed"
    assert len(tries) == 3 and len(clock.sleeps) == 2


def test_only_a_sink_made_to_settle_by_hand_fails_at_once_on_a_server_it_never_reached():
    from eoskit.connectors.mysql.transactions import MySQLTransactions
    from eoskit.connectors.postgres.transactions import PostgresTransactions

    assert not PostgresTransactions.for_url("postgresql+psycopg://u@127.0.0.1:1/db").in_query
    assert not MySQLTransactions.for_url("mysql+pymysql://u@127.0.0.1:1/db").in_query
    assert PostgresTransactions.in_query and MySQLTransactions.in_query


class Lost(Exception):
    """What the fake's link raises when it drops."""


class Refused(Exception):
    """A statement the fake server answers with an error."""


def lost(exc: BaseException) -> bool:
    return isinstance(exc, Lost)


class Clock:
    """Time that moves only when someone sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class FakeServer:
    """Prepared transactions behind a link that can be down for a while or
    drop a reply after applying the statement."""

    def __init__(self, prepared: set[str]) -> None:
        self.prepared = set(prepared)
        self.committed: list[str] = []
        self.down_for = 0  # connection attempts refused before it is back
        self.drop_next_reply = False  # apply the next commit, then lose the link
        self.connects = 0
        self.drops = 0

    def connect(self) -> None:
        self.connects += 1
        if self.down_for:
            self.down_for -= 1
            raise Lost("connection refused")

    def commit_prepared(self, txn: str) -> None:
        if txn not in self.prepared:
            raise Refused(f"no prepared transaction {txn}")
        self.prepared.remove(txn)
        self.committed.append(txn)
        if self.drop_next_reply:
            self.drop_next_reply = False
            raise Lost("server closed the connection unexpectedly")


def commit(server: FakeServer, txn: str, clock: Clock, within: float = 60.0) -> bool:
    """Shaped like ``SqlCommitter._finish``: connect (outside ``sending``),
    send the statement (inside), "not found" counts only after a maybe
    applied try."""
    def attempt(state: Attempt) -> bool:
        server.connect()
        try:
            with state.sending():
                server.commit_prepared(txn)
        except Refused:
            return state.maybe_applied
        return True

    def drop() -> None:
        server.drops += 1

    return reconnecting(attempt, lost=lost, drop=drop, what=f"COMMIT {txn}", within=within,
                        clock=clock, sleep=clock.sleep)


def test_a_live_server_is_asked_once():
    server, clock = FakeServer({"t1"}), Clock()
    assert commit(server, "t1", clock) is True
    assert server.committed == ["t1"] and server.connects == 1 and clock.sleeps == []


def test_a_server_that_comes_back_is_reconnected_to_with_growing_bounded_delays():
    server, clock = FakeServer({"t1"}), Clock()
    server.down_for = 12
    assert commit(server, "t1", clock) is True
    assert server.committed == ["t1"]
    assert server.connects == 13 and server.drops == 12  # each lost try dropped the connection
    assert clock.sleeps == sorted(clock.sleeps) and clock.sleeps[0] < clock.sleeps[-1]
    assert max(clock.sleeps) == MAX_DELAY_S


def test_a_commit_applied_before_its_reply_was_lost_counts_as_done():
    server, clock = FakeServer({"t1"}), Clock()
    server.drop_next_reply = True
    # The retry finds no such prepared transaction: it was this call's own commit.
    assert commit(server, "t1", clock) is True
    assert server.committed == ["t1"] and server.connects == 2


def test_a_missing_id_is_reported_when_no_try_was_lost_on_the_wire():
    server, clock = FakeServer(set()), Clock()
    server.down_for = 3  # lost while connecting: the statement never left
    assert commit(server, "gone", clock) is False


def test_a_server_that_stays_away_fails_the_call_after_the_bound():
    server, clock = FakeServer({"t1"}), Clock()
    server.down_for = 10_000
    with pytest.raises(ConnectionLostError, match=r"COMMIT t1: .* within 60 s \(last error: connection refused\)"):
        commit(server, "t1", clock)
    assert isinstance(ConnectionLostError("x"), SinkError)
    assert 60.0 <= clock.now <= 60.0 + MAX_DELAY_S
    assert server.prepared == {"t1"}  # nothing committed, the decision stays to be applied


def test_an_answer_from_the_server_is_not_retried():
    clock = Clock()

    def attempt(state: Attempt) -> None:
        raise Refused("permission denied")

    with pytest.raises(Refused):
        reconnecting(attempt, lost=lost, drop=lambda: None, what="x", clock=clock, sleep=clock.sleep)
    assert clock.sleeps == []


def test_a_lost_connection_outside_sending_is_not_maybe_applied():
    seen: list[bool] = []
    tries = iter([Lost("reset"), None])

    def attempt(state: Attempt) -> int:
        seen.append(state.maybe_applied)
        error = next(tries)
        if error is not None:
            raise error
        return state.retries

    clock = Clock()
    assert reconnecting(attempt, lost=lost, drop=lambda: None, what="x", clock=clock,
                        sleep=clock.sleep) == 1
    assert seen == [False, False]
