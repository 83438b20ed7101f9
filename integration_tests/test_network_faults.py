"""The network fails, not the process: every party on a host of its own
(the ``net`` fixture: a network lab, ``eoskit.runtime.devtools.services.netlab``), and
faults cut between the job's host and a service's host at a step of the
protocol, while the job is paused there (``EOSKIT_PAUSE_AT``). What is
asserted, for each fault: the output is exact (read by an independent
client from the test's own view of the lab, which no fault touches),
nothing is left prepared, no call hangs, and a session whose client
vanished is reaped by the server within the bound the sink set.

The sinks run with short network bounds (``TUNED``) so that a fault past
them costs seconds, not minutes.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from eoskit.testing.conformance import Workload
from eoskit.testing.conformance.harness import Paused, Run, Runs
from eoskit.testing.conformance.kafka import KafkaTopicTarget
from eoskit.testing.conformance.mysql import CLIENT, MySQLTarget
from eoskit.testing.conformance.postgres import PostgresTarget
from eoskit.core import crash
from eoskit.twophase.txn_id import batch_prefix, sink_prefix

pytestmark = [pytest.mark.network, pytest.mark.crash]

#: Bounds small enough for a test: a dead link is noticed in 4 s, a
#: connection attempt gives up after 2 s, and a lost database is waited for
#: a minute (longer than any fault here that is meant to be ridden out).
TUNED = {"networkTimeout": "4", "connectTimeout": "2", "reconnectWithin": "60", "sessionIdleTimeout": "6"}
RECORDS, PARTITIONS, BATCHES = 8_000, 4, 4
LAST = BATCHES - 1


class TunedPostgres(PostgresTarget):
    """PostgreSQL with the tests' bounds, its sessions named so that the
    test can find them in ``pg_stat_activity``."""

    def __init__(self, url: str, commit_mode: str = "twophase", job_url: str | None = None,
                 **bounds: str) -> None:
        super().__init__(url, commit_mode)
        self.application = f"eoskit-net-{uuid.uuid4().hex[:8]}"
        self.bounds = {**TUNED, **bounds}
        #: Where the job reaches the server, if not where the test does.
        self.job_url = job_url or url

    def options(self, table: str) -> dict[str, str]:
        from sqlalchemy.engine import make_url

        url = make_url(self.job_url).update_query_dict({"application_name": self.application})
        return {**super().options(table), **self.bounds, "url": url.render_as_string(hide_password=False)}

    def sessions(self) -> int:
        return int(self.psql("SELECT count(*) FROM pg_stat_activity "
                             f"WHERE application_name = '{self.application}'").strip())


class TunedMySQL(MySQLTarget):
    def options(self, table: str) -> dict[str, str]:
        return {**super().options(table), **TUNED}


@pytest.fixture(scope="module")
def workload(net) -> Workload:
    return Workload.produce(net.endpoints.kafka_bootstrap, records=RECORDS, partitions=PARTITIONS,
                            batches=BATCHES)


@pytest.fixture
def net_run(net, workload, tmp_path, spark):
    """A ``Run`` whose job runs on the lab's job host, its table made and
    dropped; recoveries run in the test's own session (the tester's view)."""
    runs = Runs(tmp_path, spark=spark, launcher=net.launcher())
    yield lambda target: runs.make(target, workload)
    runs.close()


def decided_ids(run: Run, batch: int) -> list[str]:
    path = run.checkpoint / "eoskit" / "sinks" / run.sink_id / "decisions" / f"{batch}.json"
    return json.loads(path.read_text())["commit"]


def wait_until(check, what: str, timeout: float = 60.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


# -- an outcome the client could not see: a commit whose reply was lost ----------

def _reply_lost_on_the_commit(net, run: Run, server: str) -> str:
    """Pause the driver after it decided the last batch, lose every reply
    of ``server`` to the job's host, let the commit go: the server commits
    the first id and nobody hears it. Heal once the client has given up;
    the job must settle the id from its evidence and end exact."""
    paused = Paused(run, crash.DRIVER_AFTER_DECISION, batch=LAST)
    paused.wait_reached()
    ids = decided_ids(run, LAST)
    assert len(ids) == PARTITIONS, ids
    with net.lab.lose_replies(net.hosts[server], net.job) as fault:
        paused.go()
        wait_until(lambda: ids[0] not in run.target.prepared(batch_prefix(run.sink_id, LAST)),
                   f"{server} committing {ids[0]}")
        # The server committed; the client's request is never acknowledged
        # either: its TCP user timeout (networkTimeout) ends the connection,
        # and its reconnects (connectTimeout) fail until the heal.
        time.sleep(int(TUNED["networkTimeout"]) + 3)
        assert paused.process.poll() is None, f"the job ended during the fault:\n{run.last_log()[-3000:]}"
        assert set(run.target.prepared(batch_prefix(run.sink_id, LAST))) == set(ids[1:]), \
            "the client went on without the first commit's reply"
        assert fault.packets() > 0
    code, log = paused.finish()
    assert code == 0, log[-4000:]
    assert f"{ids[0]} was committed by an earlier try whose reply was lost" in log, log[-4000:]
    run.verify_exactly_once()
    return log


def test_postgres_commit_prepared_whose_reply_is_lost_is_settled_by_the_servers_commit_log(net, net_run):
    _reply_lost_on_the_commit(net, net_run(TunedPostgres(net.endpoints.postgres_url)), "postgres")


@pytest.mark.skipif(CLIENT is None, reason="the mariadb (or mysql) command-line client is not installed")
def test_mariadb_xa_commit_whose_reply_is_lost_is_settled_by_its_evidence_row(net, net_run):
    _reply_lost_on_the_commit(net, net_run(TunedMySQL(net.endpoints.mysql_url)), "mariadb")


# -- a half-open session: the job's host vanished while it was inside COPY -------

def test_postgres_reaps_the_session_of_a_job_whose_host_vanished_mid_copy(net, net_run):
    """The job's host is cut off while a task is inside COPY, and the job is
    killed behind the partition: no FIN or reset ever reaches the server.
    The sink's per-session keepalives make the server end that session (and
    drop its locks) within networkTimeout, partition or not; with the
    operating system's defaults it would stay for two hours. Then the job
    restarts and ends exact."""
    target = TunedPostgres(net.endpoints.postgres_url)
    run = net_run(target)
    paused = Paused(run, crash.TASK_DURING_WRITE, batch=1)
    paused.wait_reached()
    assert int(target.psql("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                           f"'{target.application}' AND query LIKE 'COPY%'").strip()) > 0
    with net.lab.isolate(net.job):
        paused.kill()
        cut = time.monotonic()
        assert target.sessions() > 0, "the server lost the sessions before any keepalive"
        wait_until(lambda: target.sessions() == 0, "the server ending the vanished job's sessions",
                   timeout=3 * int(TUNED["networkTimeout"]) + 10, every=0.5)
        print(f"the server ended the vanished job's sessions {time.monotonic() - cut:.1f} s after the cut")
    run.recover()
    run.verify_exactly_once()


@pytest.mark.skipif(CLIENT is None, reason="the mariadb (or mysql) command-line client is not installed")
def test_mariadb_reaps_the_xa_session_of_a_job_whose_host_vanished_mid_write(net, net_run):
    """The same on MariaDB, which has no per-session keepalives: the session
    the sink set ``wait_timeout`` on (sessionIdleTimeout) is ended that long
    after its last statement, and its unprepared XA transaction with it."""
    target = TunedMySQL(net.endpoints.mysql_url)
    run = net_run(target)

    def sessions() -> int:
        return int(target.sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                              f"WHERE HOST LIKE '{net.job.ip}:%'")[0][0])

    paused = Paused(run, crash.TASK_DURING_WRITE, batch=1)
    paused.wait_reached()
    with net.lab.isolate(net.job):
        paused.kill()
        cut = time.monotonic()
        assert sessions() > 0, "the server lost the sessions before its timeout"
        wait_until(lambda: sessions() == 0, "the server ending the vanished job's sessions",
                   timeout=3 * int(TUNED["sessionIdleTimeout"]) + 10, every=0.5)
        print(f"the server ended the vanished job's sessions {time.monotonic() - cut:.1f} s after the cut")
    assert target.prepared(sink_prefix(run.sink_id)) == [], "an unprepared XA transaction outlived its session"
    run.recover()
    run.verify_exactly_once()


# -- a partition during the write, short enough to ride out ------------------------

@pytest.mark.parametrize("server, point", [
    ("postgres", crash.TASK_BEFORE_END),
    pytest.param("mariadb", crash.TASK_BEFORE_END, marks=pytest.mark.full),
    pytest.param("postgres", crash.TASK_DURING_WRITE, marks=pytest.mark.full),
], ids=["postgres-prepare", "mariadb-xa-prepare", "postgres-copy"])
def test_a_partition_at_the_tasks_prepare_fails_the_task_and_its_retry_ends_exact(
        net, net_run, server, point):
    """The job's host and the database cut apart both ways for twice the
    network bound while a task prepares: the task's call fails within
    networkTimeout (no hang), Spark retries the task, whose transaction
    start waits for the database (reconnectWithin); after the heal the job
    finishes by itself, exact, nothing prepared left."""
    target = (TunedPostgres(net.endpoints.postgres_url) if server == "postgres"
              else TunedMySQL(net.endpoints.mysql_url))
    run = net_run(target)
    paused = Paused(run, point, batch=1)
    paused.wait_reached()
    with net.lab.partition(net.job, net.hosts[server]):
        paused.go()
        time.sleep(2 * int(TUNED["networkTimeout"]))
        assert paused.process.poll() is None, f"the job gave up during the fault:\n{run.last_log()[-3000:]}"
    code, log = paused.finish()
    assert code == 0, log[-4000:]
    run.verify_exactly_once()


# -- past every bound: the job stops with one line, and a restart ends exact -------

@pytest.mark.full
def test_a_database_cut_off_past_every_bound_stops_the_job_with_one_line_naming_it(net, net_run):
    """The driver's commit waits reconnectWithin (8 s here) for the database,
    then the batch fails; with no restart left the job ends, its first line
    naming the database's address. Healed, a restart commits what the
    decision named: exact."""
    target = TunedPostgres(net.endpoints.postgres_url, reconnectWithin="8")
    run = net_run(target)
    paused = Paused(run, crash.DRIVER_AFTER_DECISION, batch=1)
    paused.wait_reached()
    with net.lab.partition(net.job, net.hosts["postgres"]):
        paused.go()
        code = paused.process.wait(timeout=300)
    log = run.last_log()
    assert code != 0, log[-3000:]
    failed = [line for line in log.splitlines() if line.startswith("eoskit run:")]
    assert len(failed) == 1, log[-3000:]
    assert (net.hosts["postgres"].ip in failed[0] and "no new one could be made within 8 s" in failed[0]
            and "start the job again" in failed[0]), failed[0]
    run.recover()
    run.verify_exactly_once()


# -- Kafka: the sink's transaction and the source's fetch cut ----------------------

class TunedKafka(KafkaTopicTarget):
    """The Kafka sink with short calls: a call the partition holds up fails
    in 10 s (and 30 s more at most, ``sink_clients.bounded``)."""

    def options(self, table: str) -> dict[str, str]:
        return {**super().options(table), "callTimeout": "10",
                "kafka.socket.timeout.ms": "10000", "kafka.transaction.timeout.ms": "60000"}


class ReadCommittedWatcher:
    """A plain read_committed consumer reading the output topic while the
    job runs, as Kafka's own transactions test has one: it must never see
    a record twice, nor one that is later missing (an aborted one)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.seen: list[bytes] = []
        self._stop = False
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watch-{uuid.uuid4().hex[:8]}",
                                   "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                   "enable.auto.commit": False})
        self._consumer.subscribe([topic])
        import threading

        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop:
            message = self._consumer.poll(0.2)
            if message is not None and message.error() is None:
                self.seen.append(message.key())

    def stop(self, drain_s: float = 3.0) -> list[bytes]:
        time.sleep(drain_s)
        self._stop = True
        self._thread.join(10)
        self._consumer.close()
        return self.seen


@pytest.mark.parametrize("point", [crash.TASK_BEFORE_END,
                                   pytest.param(crash.TASK_DURING_WRITE, marks=pytest.mark.full)],
                         ids=["commit-transaction", "produce"])
def test_kafka_sink_through_a_partition_from_its_broker(net, net_run, point):
    """The job's host cut from the broker for 15 s while its tasks' Kafka
    transactions are open (about to send the marker and commit, or still
    producing): the calls fail within callTimeout or ride out the heal; a
    failed task's retry fences its producer and reads its marker before
    writing. A read_committed reader watching throughout sees each record
    once; the topic ends exact with no transaction open."""
    target = TunedKafka(net.endpoints.kafka_bootstrap)
    run = net_run(target)
    watcher = ReadCommittedWatcher(net.endpoints.kafka_bootstrap, run.table)
    try:
        paused = Paused(run, point, batch=1)
        paused.wait_reached()
        with net.lab.partition(net.job, net.hosts["kafka"]):
            paused.go()
            time.sleep(15)
        code, log = paused.finish(timeout=400)
    finally:
        seen = watcher.stop()
    assert code == 0, log[-4000:]
    run.verify_exactly_once()
    twice = sorted({k for k in seen if seen.count(k) > 1})
    assert not twice, f"the read_committed reader saw {len(twice)} records twice: {twice[:5]}"
    assert len(seen) == RECORDS, f"the reader saw {len(seen)} records of {RECORDS}"


@pytest.mark.full
def test_the_source_rides_out_its_broker_cut_off_mid_fetch(net, net_run):
    """Kafka -> PostgreSQL, the job's host cut from the broker for 15 s
    while a task is reading its range: the consumer reconnects (or the task
    fails and is retried), and the table ends exact."""
    target = TunedPostgres(net.endpoints.postgres_url)
    run = net_run(target)
    paused = Paused(run, crash.TASK_DURING_WRITE, batch=1)
    paused.wait_reached()
    with net.lab.partition(net.job, net.hosts["kafka"]):
        paused.go()
        time.sleep(15)
    code, log = paused.finish(timeout=400)
    assert code == 0, log[-4000:]
    run.verify_exactly_once()


# -- the files sink on S3: the upload and the commit cut ---------------------------

@pytest.mark.parametrize("point, fault", [
    (crash.TASK_DURING_WRITE, "partition"),
    pytest.param(crash.DRIVER_AFTER_DECISION, "lost replies", marks=pytest.mark.full),
], ids=["upload-partitioned", "commit-replies-lost"])
def test_files_sink_on_s3_through_a_network_fault(net, net_run, point, fault):
    """The job's host cut from the S3 server for 10 s while a task uploads
    its staged files, or its replies lost while the driver moves a decided
    transaction's files to their final names and writes the manifests:
    botocore's timeouts (networkTimeout) and retries, the task's retry and
    the idempotent commit end exact; DuckDB and pyarrow read each record once."""
    from eoskit.testing.conformance.files import S3FilesTarget

    import fsspec

    bucket = f"net-{uuid.uuid4().hex[:10]}"
    fsspec.filesystem("s3", skip_instance_cache=True, key="testing", secret="testing",
                      client_kwargs={"endpoint_url": net.endpoints.s3_endpoint}).mkdir(bucket)

    class TunedS3(S3FilesTarget):
        def options(self, table: str) -> dict[str, str]:
            return {**super().options(table), "networkTimeout": "4"}

    target = TunedS3(net.endpoints.s3_endpoint, bucket)
    run = net_run(target)
    paused = Paused(run, point, batch=1)
    paused.wait_reached()
    s3 = net.hosts["s3"]
    cut = net.lab.partition(net.job, s3) if fault == "partition" else net.lab.lose_replies(s3, net.job)
    with cut:
        paused.go()
        time.sleep(10)
    code, log = paused.finish(timeout=400)
    assert code == 0, log[-4000:]
    run.verify_exactly_once()


# -- a lossy link, a distant database ---------------------------------------------

@pytest.mark.full
def test_a_lossy_link_to_the_database_changes_nothing_but_speed(net, net_run):
    """Every packet between the job's host and PostgreSQL dropped with a
    one-in-ten chance, both ways, for the whole run: TCP retransmits, slow
    but exact (a connection needs the default connectTimeout, as a lost SYN
    is sent again after 1 s, then 2 s, then 4 s)."""
    # A lost SYN is sent again after 1 s, then 2 s more: connections need the default 10 s.
    target = TunedPostgres(net.endpoints.postgres_url, networkTimeout="20", connectTimeout="20",
                           sessionIdleTimeout="120")
    run = net_run(target)
    pg = net.hosts["postgres"]
    with net.lab.packet_loss(net.job, pg, 0.1) as there, net.lab.packet_loss(pg, net.job, 0.1) as back:
        code, log = run.run_job(timeout=600)
        dropped = there.packets() + back.packets()
    assert code == 0, log[-4000:]
    assert dropped > 0, "no packet was dropped"
    print(f"{dropped} packets dropped between the job and PostgreSQL")
    run.verify_exactly_once()


@pytest.mark.full
def test_latency_to_the_database_changes_nothing_but_speed(net, net_run):
    """PostgreSQL 150 ms away each way (a delaying proxy on the job's host:
    the kernel has no netem), for the whole run: exact."""
    from eoskit.runtime.devtools.services.netlab import DelayProxy
    from sqlalchemy.engine import make_url

    pg = make_url(net.endpoints.postgres_url)
    with DelayProxy(net.job, 0, net.hosts["postgres"].ip, pg.port, 0.15) as proxy:
        far = pg.set(host=proxy.address[0], port=proxy.address[1]).render_as_string(hide_password=False)
        run = net_run(TunedPostgres(net.endpoints.postgres_url, job_url=far))
        code, log = run.run_job(timeout=600)
    assert code == 0, log[-4000:]
    run.verify_exactly_once()


# -- the three-broker cluster: a leader and a transaction coordinator partitioned ---

@pytest.fixture(scope="module")
def net_cluster(tmp_path_factory):
    """A three-node Kafka cluster (replication factor 3, min.insync.replicas
    2) with each node on a host of its own, and a job host, in a lab of its
    own (another subnet than ``net``'s)."""
    from eoskit.testing.pytest_plugin import services_on_lab_hosts

    with services_on_lab_hosts(tmp_path_factory.mktemp("net-cluster"), ("kafka", "kafka-2", "kafka-3"),
                               subnet="10.215.0.0/24", kafka_brokers=3, kafka_only=True) as (lab, hosts, services):
        services.start()
        bootstrap = services.kafka_bootstrap()
        assert bootstrap is not None
        yield lab, hosts, bootstrap


def _cluster_run(lab, hosts, bootstrap, tmp_path, spark) -> Run:
    from eoskit.runtime.devtools.services.produce import produce_records
    from eoskit.testing.conformance.kafka import create_replicated_topic

    class Replicated(TunedKafka):
        def create_table(self, table: str) -> None:
            create_replicated_topic(self.bootstrap, table, self.partitions)

    topic = f"net-cluster-in-{uuid.uuid4().hex[:8]}"
    create_replicated_topic(bootstrap, topic, PARTITIONS)
    produce_records(bootstrap, topic, (Workload.record(i, PARTITIONS) for i in range(RECORDS)))
    workload = Workload(bootstrap, topic, RECORDS, PARTITIONS, max(1, RECORDS // BATCHES))
    run = Run(Replicated(bootstrap), workload, tmp_path / "run", spark, launcher=tuple(hosts["job"].argv([])))
    run.workdir.mkdir(parents=True)
    run.target.create_table(run.table)
    run.ordered = False
    return run


def _broker_host(hosts, broker_id: int):
    return hosts["kafka" if broker_id == 1 else f"kafka-{broker_id}"]


@pytest.mark.full
@pytest.mark.parametrize("victim", ["partition leader", "transaction coordinator"])
def test_a_kafka_broker_partitioned_from_everyone_while_the_job_writes_through_the_cluster(
        net_cluster, tmp_path, spark, victim):
    """The leader of an output partition (while a task's transaction is
    open), or the broker coordinating most of the tasks' transactional ids
    (right after a task's commit), cut from every other host for 15 s: not
    killed, so it may go on believing it leads. The other two elect new
    leaders and coordinators (min.insync.replicas 2 holds); the job goes on
    or fails and is restarted; a read_committed reader watching the output
    sees each record once; exact, nothing open."""
    from eoskit.connectors.kafka.sink_markers import transactional_id
    from eoskit.testing.conformance.kafka import leader_of, transaction_coordinator, wait_for_full_isr

    lab, hosts, bootstrap = net_cluster
    run = _cluster_run(lab, hosts, bootstrap, tmp_path, spark)
    watcher = ReadCommittedWatcher(bootstrap, run.table)
    try:
        point = crash.TASK_DURING_WRITE if victim == "partition leader" else crash.DRIVER_AFTER_TASK_COMMIT
        paused = Paused(run, point, batch=1)
        paused.wait_reached()
        if victim == "partition leader":
            broker = leader_of(bootstrap, run.table, 0)
        else:
            coordinators = [transaction_coordinator(bootstrap, transactional_id(run.sink_id, p))
                            for p in range(PARTITIONS)]
            broker = max(set(coordinators), key=coordinators.count)
        assert broker in (1, 2, 3)
        with lab.isolate(_broker_host(hosts, broker)):
            paused.go()
            time.sleep(15)
        code, log = paused.finish(timeout=400)
        if code != 0:  # the fault's other accepted outcome: a restart converges
            code, log = run.run_job()
        assert code == 0, log[-4000:]
        run.verify_exactly_once()
    finally:
        seen = watcher.stop()
    twice = sorted({k for k in seen if seen.count(k) > 1})
    assert not twice, f"the read_committed reader saw {len(twice)} records twice: {twice[:5]}"
    wait_for_full_isr(bootstrap, [run.table, run.workload.topic])
    print(f"{victim}: broker {broker} partitioned from everyone for 15 s")
