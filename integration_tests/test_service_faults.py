"""Service faults under a running job, against the real local services:
the database restarted between the decision and its commits and during the
tasks' writes, a session killed while transactions are prepared, the broker
SIGKILLed mid-batch and brought back by `eoskit dev up`. Each job is a real ``eoskit run`` process paused at a
named point (``EOSKIT_PAUSE_AT``, core/crash.py) while the fault
happens. What is built, and asserted: the job rides each fault out (exit 0)
and the sink holds every record exactly once, checked with an independent
client (psql, the mariadb client, a read_committed consumer), nothing left
prepared or open.

Restarting a database needs the folder of the local services the session
uses (the pytest plugin's, or ``EOSKIT_DEV_DIR`` naming the folder behind
the ``EOSKIT_*`` variables); without it those tests skip, saying so.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from eoskit.runtime.devtools.services import LocalServices
from eoskit.core import crash
from eoskit.testing.conformance import ConformanceTarget, Workload
from eoskit.testing.conformance.harness import Paused, Run, Runs, wait_for_file
from eoskit.testing.conformance.kafka import KafkaTopicTarget
from eoskit.testing.conformance.postgres import PostgresTarget
from eoskit.twophase.txn_id import sink_prefix

RECORDS, PARTITIONS, BATCHES = 20_000, 4, 4
#: How long a database stays down while the job goes on against it; well
#: inside the sinks' reconnect bound (RECONNECT_WITHIN_S, 60 s).
DOWNTIME_S = 3.0
#: How long the broker stays down (SIGKILLed) before `eoskit dev up`.
BROKER_DOWN_S = 6.0
MARIADB_CLIENT = shutil.which("mariadb") or shutil.which("mysql")
#: What the sinks log when a lost connection is being ridden out (connectors/sql/sink.py).
RECONNECTING = "reconnecting for up to"


# -- targets: the sink under test and an independent client to check it ----

class FaultPostgresTarget(PostgresTarget):
    """The sink's sessions carry an application_name of their own, so that
    a test can end exactly them (``pg_terminate_backend``)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.application = f"eoskit-fault-{uuid.uuid4().hex[:8]}"

    def options(self, table: str) -> dict[str, str]:
        url = make_url(self.url).update_query_dict({"application_name": self.application})
        return {**super().options(table), "url": url.render_as_string(hide_password=False)}

    def open_transactions(self) -> int:
        """Sessions of the job inside a transaction (a task mid-write)."""
        return int(self.psql("SELECT count(*) FROM pg_stat_activity "
                             f"WHERE application_name = '{self.application}' "
                             "AND xact_start IS NOT NULL").strip())

    def end_sessions(self) -> int:
        """End every session of the job from the server side; how many."""
        out = self.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        f"WHERE application_name = '{self.application}'")
        return int(out.strip())


class MySQLTarget(ConformanceTarget):
    """The job writes into a database of its own, so that a test can find
    (and ``KILL``) exactly its sessions in the process list."""

    format = "eoskit-mysql"

    def __init__(self, url: str) -> None:
        self.base = make_url(url)
        self.database = f"fault_{uuid.uuid4().hex[:8]}"

    def sql(self, query: str, database: str | None = None) -> list[list[str]]:
        u = self.base
        command = [MARIADB_CLIENT, "--batch", "--skip-column-names", "--raw", f"--host={u.host}",
                   f"--port={u.port}", f"--user={u.username}",
                   f"--database={database or self.database}", "--execute", query]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                                env={**os.environ, "MYSQL_PWD": u.password or ""})
        assert result.returncode == 0, result.stderr
        return [line.split("\t") for line in result.stdout.splitlines() if line]

    def options(self, table: str) -> dict[str, str]:
        url = self.base.set(database=self.database).render_as_string(hide_password=False)
        return {"url": url, "dbtable": table, "mode": "append", "commitMode": "twophase"}

    def create_table(self, table: str) -> None:
        self.sql(f"CREATE DATABASE `{self.database}`", database=self.base.database)
        self.sql(f"CREATE TABLE `{table}` (id BIGINT NOT NULL, amount BIGINT, customer TEXT) "
                 "ENGINE=InnoDB")

    def drop_table(self, table: str) -> None:
        self.sql(f"DROP DATABASE IF EXISTS `{self.database}`", database=self.base.database)

    def rollback(self, txn_id: str) -> None:
        self.sql(f"XA ROLLBACK '{txn_id}'")

    def rows(self, table: str) -> list[tuple[int, int]]:
        return [(int(r[0]), int(r[1])) for r in self.sql(f"SELECT id, amount FROM `{table}`")]

    def prepared(self, prefix: str) -> list[str]:
        ids = []
        for _format_id, gtrid_length, _bqual_length, data in self.sql("XA RECOVER"):
            if data[: int(gtrid_length)].startswith(prefix):
                ids.append(data[: int(gtrid_length)])
        return sorted(ids)

    def open_transactions(self) -> int:
        """Sessions of the job's database inside a transaction (a task mid-write)."""
        return int(self.sql(
            "SELECT count(*) FROM information_schema.INNODB_TRX t JOIN "
            "information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
            f"WHERE p.DB = '{self.database}'")[0][0])

    def end_sessions(self) -> int:
        """``KILL`` every session of the job's database; how many."""
        ids = [row[0] for row in self.sql(
            "SELECT ID FROM information_schema.PROCESSLIST "
            f"WHERE DB = '{self.database}' AND ID <> CONNECTION_ID()")]
        for session in ids:
            self.sql(f"KILL CONNECTION {int(session)}")
        return len(ids)


KafkaTarget = KafkaTopicTarget


# -- fixtures ---------------------------------------------------------------

@pytest.fixture(scope="module")
def workload(kafka: str) -> Workload:
    return Workload.produce(kafka, records=RECORDS, partitions=PARTITIONS, batches=BATCHES)


@pytest.fixture
def fault_run(tmp_path: Path) -> Iterator[Callable[[ConformanceTarget, Workload], Run]]:
    """Make a Run (table created); afterwards roll back what it left
    prepared and drop its table, as the conformance kit does."""
    runs = Runs(tmp_path)
    yield runs.make
    runs.close()


# -- a job paused at a point while the fault happens -------------------------

def _rode_it_out(paused: Paused) -> str:
    code, log = paused.finish()
    assert code == 0, f"the job did not ride the fault out (exit {code}):\n{log[-4000:]}"
    paused.run.verify_exactly_once()
    return log


def _restart(services: LocalServices, name: str, paused: Paused, downtime: float = DOWNTIME_S) -> None:
    """Stop the server, let the job go on against nothing for ``downtime``
    seconds, start the server again on the same port."""
    def while_down() -> None:
        paused.go()
        time.sleep(downtime)
    services.restart(name, while_down=while_down)


# -- the database restarted --------------------------------------------------

@pytest.mark.crash
def test_postgres_restarted_between_decision_and_commit(postgres, local_services, workload, fault_run):
    """The coordinator wrote batch 1's decision; PostgreSQL goes down before
    COMMIT PREPARED and is back DOWNTIME_S later. The prepared transactions
    survive the restart; the coordinator reconnects and commits them."""
    target = FaultPostgresTarget(postgres)
    run = fault_run(target, workload)
    paused = Paused(run, crash.DRIVER_AFTER_DECISION)
    paused.wait_reached()
    prepared = target.prepared(sink_prefix(run.sink_id))
    assert prepared, "batch 1 was decided with nothing prepared"
    _restart(local_services, "postgres", paused)
    log = _rode_it_out(paused)
    assert RECONNECTING in log, "the coordinator never had to reconnect"


@pytest.mark.crash
@pytest.mark.full
def test_postgres_restarted_during_the_tasks_writes(postgres, local_services, workload, fault_run):
    """Two tasks of batch 1 are paused mid-COPY with their transactions open
    when PostgreSQL goes down (fast shutdown: it does not wait for them).
    Their writes fail, Spark retries them, and the retries wait for the
    server to come back before they begin."""
    target = FaultPostgresTarget(postgres)
    run = fault_run(target, workload)
    paused = Paused(run, crash.TASK_DURING_WRITE)
    paused.wait_reached()
    assert target.open_transactions() > 0, "no task was inside its transaction at the pause"
    _restart(local_services, "postgres", paused)
    _rode_it_out(paused)


@pytest.mark.crash
@pytest.mark.full
def test_postgres_stopped_for_20_seconds_mid_run(postgres, local_services, workload, fault_run):
    """The runtime issue's fault: the server stopped for 20 s while batch 1's
    tasks write, then started again. The job recovers by itself without
    even a restart of its query (its restart strategy here is ``none``): the
    tasks' retries and the coordinator wait for the server (up to
    RECONNECT_WITHIN_S), and the table is exact."""
    target = FaultPostgresTarget(postgres)
    run = fault_run(target, workload)
    paused = Paused(run, crash.TASK_DURING_WRITE)
    paused.wait_reached()
    started = time.monotonic()
    _restart(local_services, "postgres", paused, downtime=20.0)
    assert time.monotonic() - started >= 20.0
    log = _rode_it_out(paused)
    assert RECONNECTING in log, "nothing waited for the server"
    run.assert_nothing_prepared()


@pytest.mark.crash
@pytest.mark.full
def test_mariadb_restarted_between_decision_and_commit(mysql, local_services, workload, fault_run):
    """As for PostgreSQL, with XA: the prepared XA transactions survive the
    restart (MariaDB >= 10.5) and the coordinator's XA COMMIT reconnects."""
    if MARIADB_CLIENT is None:
        pytest.skip("the mariadb (or mysql) command-line client is not installed")
    target = MySQLTarget(mysql)
    run = fault_run(target, workload)
    paused = Paused(run, crash.DRIVER_AFTER_DECISION)
    paused.wait_reached()
    assert target.prepared(sink_prefix(run.sink_id)), "batch 1 was decided with nothing prepared"
    _restart(local_services, "mariadb", paused)
    log = _rode_it_out(paused)
    assert RECONNECTING in log, "the coordinator never had to reconnect"


@pytest.mark.crash
def test_mariadb_restarted_during_the_tasks_writes(mysql, local_services, workload, fault_run):
    """Tasks paused inside XA START ... with rows written when MariaDB goes
    down: their unprepared XA transactions die with the server, the tasks
    fail and are retried once it is back."""
    if MARIADB_CLIENT is None:
        pytest.skip("the mariadb (or mysql) command-line client is not installed")
    target = MySQLTarget(mysql)
    run = fault_run(target, workload)
    paused = Paused(run, crash.TASK_DURING_WRITE)
    paused.wait_reached()
    assert target.open_transactions() > 0, "no task was inside its transaction at the pause"
    _restart(local_services, "mariadb", paused)
    _rode_it_out(paused)


# -- sessions cut while transactions are prepared -----------------------------

@pytest.mark.crash
@pytest.mark.full
def test_postgres_sessions_ended_after_prepare(postgres, workload, fault_run):
    """A task of batch 1 prepared its transaction; the server then ends
    every session of the job (the executors' cached connections, the
    driver's). The prepared transactions survive; the next tasks and the
    coordinator reconnect, and the batch commits."""
    target = FaultPostgresTarget(postgres)
    run = fault_run(target, workload)
    paused = Paused(run, crash.TASK_AFTER_PREPARE)
    paused.wait_reached()
    prepared = target.prepared(sink_prefix(run.sink_id))
    assert prepared, "nothing was prepared at the pause"
    assert target.end_sessions() > 0, "the job had no session to end"
    assert set(prepared) <= set(target.prepared(sink_prefix(run.sink_id))), \
        "a prepared transaction died with its session"
    _rode_it_out(paused)


@pytest.mark.crash
@pytest.mark.full
def test_mariadb_sessions_killed_after_decision(mysql, workload, fault_run):
    """Batch 1 is decided with its XA transactions prepared; every session
    of the job is KILLed (the coordinator's among them). The prepared XA
    transactions survive, and the coordinator commits them on a new
    session."""
    if MARIADB_CLIENT is None:
        pytest.skip("the mariadb (or mysql) command-line client is not installed")
    target = MySQLTarget(mysql)
    run = fault_run(target, workload)
    paused = Paused(run, crash.DRIVER_AFTER_DECISION)
    paused.wait_reached()
    prepared = target.prepared(sink_prefix(run.sink_id))
    assert prepared, "batch 1 was decided with nothing prepared"
    assert target.end_sessions() > 0, "the job had no session to kill"
    assert target.prepared(sink_prefix(run.sink_id)) == prepared
    _rode_it_out(paused)


# -- the broker killed ----------------------------------------------------------

def _kill_broker_mid_batch(services: LocalServices, paused: Paused) -> None:
    """Tasks of batch 1 are writing: SIGKILL the broker, let the job go on
    against no broker for BROKER_DOWN_S, then bring the broker back as a user
    would, with `eoskit dev up` (same port, its data kept)."""
    services.kill("kafka")
    paused.go()
    time.sleep(BROKER_DOWN_S)
    services.up()


@pytest.mark.crash
def test_broker_killed_mid_batch_kafka_to_postgres(postgres, local_services, workload, fault_run):
    """Every connection of the job (the tasks' consumers, the driver's offset
    queries) dies with the broker while batch 1 is being written; the
    clients reconnect once `eoskit dev up` has brought it back."""
    run = fault_run(PostgresTarget(postgres), workload)
    paused = Paused(run, crash.TASK_DURING_WRITE)
    paused.wait_reached()
    _kill_broker_mid_batch(local_services, paused)
    _rode_it_out(paused)


@pytest.mark.crash
@pytest.mark.full
def test_broker_killed_mid_batch_kafka_to_kafka(kafka, local_services, workload, fault_run):
    """The eoskit-kafka sink writes to the broker it reads from: the kill
    hits the tasks' open transactions too, which the restarted broker's
    transaction coordinator aborts or the tasks' retries fence."""
    run = fault_run(KafkaTarget(kafka), workload)
    run.ordered = False  # checked by the Kafka conformance suite; here: exactly once
    paused = Paused(run, crash.TASK_DURING_WRITE)
    paused.wait_reached()
    _kill_broker_mid_batch(local_services, paused)
    _rode_it_out(paused)


@pytest.mark.crash
@pytest.mark.full
def test_kafka_to_kafka_through_driver_and_broker_kills(kafka, local_services, fault_run):
    """Kafka to Kafka with eoskit's sink over 20 batches: the job SIGKILLed
    after batch 3's commit, restarted; SIGKILLed again after batch 8's
    together with the broker, which `eoskit dev up` brings back; restarted
    to the end. A plain read_committed consumer reads every id once, and no
    transaction is left open."""
    workload = Workload.produce(kafka, records=8_000, partitions=PARTITIONS, batches=20)
    run = fault_run(KafkaTarget(kafka), workload)
    run.ordered = False
    for after, broker_too in ((3, False), (8, True)):
        process = run.start()
        wait_for_file(run.checkpoint / "commits" / str(after), process, run)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if broker_too:
            local_services.kill("kafka")
            time.sleep(BROKER_DOWN_S)
            local_services.up()
    code, log = run.run_job()
    assert code == 0, f"the last run failed (exit {code}):\n{log[-4000:]}"
    run.verify_exactly_once()


# -- a task longer than the Kafka transaction's timeout ------------------------

class ShortTimeoutKafkaTarget(KafkaTarget):
    """The Kafka sink with a 5-second ``transaction.timeout.ms``."""

    TIMEOUT_MS = 5000

    def options(self, table: str) -> dict[str, str]:
        return {**super().options(table), "kafka.transaction.timeout.ms": str(self.TIMEOUT_MS)}


@pytest.mark.crash
@pytest.mark.full
def test_a_kafka_task_longer_than_its_transaction_timeout_is_retried(kafka, workload, fault_run):
    """A task of batch 1 stalls mid-write past its transaction's timeout:
    the broker aborts the transaction, the task's commit fails with a line
    naming the timeout and how to raise it, Spark retries the task in a new
    transaction, and the job ends with every record once."""
    target = ShortTimeoutKafkaTarget(kafka)
    run = fault_run(target, workload)
    run.ordered = False
    run.base_env = {"EOSKIT_VERBOSE": "1"}  # Spark's log of the failed attempt, with its cause
    paused = Paused(run, crash.TASK_DURING_WRITE)
    paused.wait_reached()
    time.sleep(target.TIMEOUT_MS / 1000 + 4)  # past the timeout and the broker's abort sweep
    code, log = paused.finish()
    assert code == 0, f"the job did not recover from the timed-out transaction:\n{log[-4000:]}"
    assert "kafka.transaction.timeout.ms" in log, log[-4000:]
    run.verify_exactly_once()


# -- the SQL servers' own session time limits ---------------------------------

class LimitedPostgresTarget(FaultPostgresTarget):
    """The job's sessions carry the server's time limits a DBA sets: 2 s
    idle inside a transaction, 3 s for one statement."""

    def options(self, table: str) -> dict[str, str]:
        options = super().options(table)
        url = make_url(options["url"]).update_query_dict({"options": (
            "-c idle_in_transaction_session_timeout=2000 -c statement_timeout=3000")})
        return {**options, "url": url.render_as_string(hide_password=False)}


@pytest.mark.crash
@pytest.mark.full
def test_postgres_session_time_limits_spare_prepared_transactions(postgres, workload, fault_run):
    """Batch 1 is decided and its transactions prepared; the coordinator
    stalls 6 s before committing them, past the sessions' idle and statement
    limits. A prepared transaction belongs to no session, so neither limit
    touches it: every one is still there, and the batch commits."""
    target = LimitedPostgresTarget(postgres)
    run = fault_run(target, workload)
    paused = Paused(run, crash.DRIVER_AFTER_DECISION)
    paused.wait_reached()
    prepared = target.prepared(sink_prefix(run.sink_id))
    assert prepared, "batch 1 was decided with nothing prepared"
    time.sleep(6)
    assert target.prepared(sink_prefix(run.sink_id)) == prepared
    _rode_it_out(paused)


class QueryTimeoutPostgresTarget(FaultPostgresTarget):
    """The sink's own limit, as a Spark JDBC job gives it: queryTimeout=3 (s),
    the task transaction's statement_timeout."""

    def options(self, table: str) -> dict[str, str]:
        return {**super().options(table), "queryTimeout": "3"}


@pytest.mark.crash
@pytest.mark.parametrize("target_type", [LimitedPostgresTarget, QueryTimeoutPostgresTarget],
                         ids=["server_statement_timeout", "sink_queryTimeout"])
@pytest.mark.full
def test_postgres_statement_timeout_ends_a_stalled_copy(postgres, workload, fault_run, target_type):
    """Tasks of batch 1 stall mid-COPY for 6 s. A COPY in progress is one
    running statement, not an idle transaction: statement_timeout (3 s),
    set by the server's URL options or by the sink's queryTimeout, is the
    limit that ends it. The tasks fail naming it, Spark retries them, and
    the job ends with every record once."""
    target = target_type(postgres)
    run = fault_run(target, workload)
    run.base_env = {"EOSKIT_VERBOSE": "1"}  # Spark's log of the failed attempts, with their cause
    paused = Paused(run, crash.TASK_DURING_WRITE)
    paused.wait_reached()
    assert target.open_transactions() > 0, "no task was inside its transaction at the pause"
    time.sleep(6)
    log = _rode_it_out(paused)
    assert "statement timeout" in log, log[-4000:]


@pytest.mark.crash
@pytest.mark.full
def test_mariadb_session_idle_timeout_ends_a_stalled_task_and_the_idle_coordinator_session(
        mysql, workload, fault_run):
    """With the sink's sessionIdleTimeout at 3 s (each of its sessions'
    wait_timeout, whatever the server's global one says), tasks of batch 1
    stall mid-write for 8 s: the server closes their sessions (their XA
    transactions, not prepared, roll back) and the coordinator's idle one.
    The tasks fail and are retried, the coordinator reconnects, and the job
    ends exact."""
    if MARIADB_CLIENT is None:
        pytest.skip("the mariadb (or mysql) command-line client is not installed")

    class Impatient(MySQLTarget):
        def options(self, table: str) -> dict[str, str]:
            return {**super().options(table), "sessionIdleTimeout": "3"}

    target = Impatient(mysql)
    run = fault_run(target, workload)
    assert int(target.sql("SELECT @@GLOBAL.wait_timeout", database=target.base.database)[0][0]) > 60, \
        "the server's own wait_timeout would end the sessions without the sink's bound"
    paused = Paused(run, crash.TASK_DURING_WRITE)
    paused.wait_reached()
    assert target.open_transactions() > 0, "no task was inside its transaction at the pause"
    time.sleep(8)
    assert target.open_transactions() == 0, "the server did not close the idle sessions"
    _rode_it_out(paused)
