"""``eoskit chaos`` on a user's job (examples/chaos_orders.py), against the
real services: exact under driver and worker kills into PostgreSQL (two
phase, through the pytest helper), Kafka and files; duplicates found in the
at-least-once mode; ``rand()`` found non-deterministic. Every verdict is
checked against what an independent client reads, and the job's own target
is never written."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from eoskit.runtime.devtools.chaos.plan import FaultPlan
from eoskit.runtime.devtools.demo.orders import recreate_topic
from eoskit.runtime.devtools.services.produce import produce_records
from eoskit.testing.chaos import assert_exactly_once, run_chaos

JOB = Path(__file__).resolve().parents[1] / "examples" / "chaos_orders.py"
RECORDS = 1_000
#: Eight batches of 125 (ORDERS_BATCH): room for four faults a batch apart.
BATCH = "125"


def orders(count: int):
    for i in range(count):
        yield i % 2, str(i).encode(), json.dumps({"id": i, "amount": (i * 7) % 100,
                                                  "customer": f"c{i % 9}"}).encode()


@pytest.fixture(scope="module")
def topic(kafka: str) -> str:
    name = f"chaos-orders-{uuid.uuid4().hex[:8]}"
    recreate_topic(kafka, name, 2)
    produce_records(kafka, name, orders(RECORDS))
    return name


def pg(url: str) -> psycopg.Connection:
    u = make_url(url)
    return psycopg.connect(host=u.host, port=u.port, user=u.username, password=u.password,
                           dbname=u.database, autocommit=True)


def tables_like(url: str, prefix: str) -> list[str]:
    with pg(url) as conn:
        return [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_name LIKE %s", (prefix + "%",))]


def fault_kinds(report: dict) -> list[str]:
    """The kinds of the faults injected, in order (a fault that found nothing to kill is a note)."""
    return [e["fault"]["kind"] for e in report["timeline"] if e["kind"] == "fault"]


def job_env(kafka: str, topic: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "ORDERS_KAFKA": kafka, "ORDERS_TOPIC": topic, "ORDERS_BATCH": BATCH, **extra}


@pytest.mark.crash
@pytest.mark.full
def test_two_phase_postgres_survives_driver_kills_exactly(kafka, postgres, topic, tmp_path):
    """Four driver kills, one after each of the first batches (each at a
    protocol step or a moment the seed drew): exact against the reference
    run, through the pytest helper (the replay run is the rand() test's); the scratch tables are gone and
    the job's own table was never made."""
    table = f"chaos_{uuid.uuid4().hex[:8]}"
    report = tmp_path / "report.json"
    text = assert_exactly_once(JOB, seed=3, faults="driver", kills=4,
                               args=["--faults-every", "1,1", "--no-check-determinism", "--report", str(report),
                                     "--html", str(tmp_path / "report.html")],
                               env=job_env(kafka, topic, ORDERS_PG_URL=postgres, ORDERS_TABLE=table))
    found = json.loads(report.read_text())
    faults = [e for e in found["timeline"] if e["kind"] == "fault"]
    restarts = [e for e in found["timeline"] if e["kind"] == "restart"]
    assert len(faults) == 4 and len(restarts) == 4, found["timeline"]
    (output,) = found["outputs"]
    assert output["comparison"]["reference_rows"] == RECORDS, output
    assert "exact" in text and "<svg" in (tmp_path / "report.html").read_text()
    assert tables_like(postgres, table) == []  # neither the scratch copies nor the job's own


@pytest.mark.crash
@pytest.mark.full
def test_two_phase_postgres_rides_out_its_database_and_broker_restarted(kafka, postgres, topic, local_services,
                                                                       tmp_path):
    """The dev services' PostgreSQL stopped and started after batch 1, their
    broker after batch 3 (seed 1): the job's clients and restart strategy
    ride both out, and the output is exact."""
    table = f"chaos_{uuid.uuid4().hex[:8]}"
    report = tmp_path / "report.json"
    done = run_chaos(JOB, seed=1, faults="database,broker", kills=2,
                     args=["--faults-every", "2,2", "--no-check-determinism", "--dev-dir",
                           str(local_services.root), "--report", str(report)],
                     env=job_env(kafka, topic, ORDERS_PG_URL=postgres, ORDERS_TABLE=table))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    found = json.loads(report.read_text())
    assert fault_kinds(found) == ["database", "broker"], found["timeline"]
    assert "postgres stopped, started again" in done.stderr and "kafka stopped, started again" in done.stderr
    (output,) = found["outputs"]
    assert output["comparison"]["reference_rows"] == RECORDS, output


def test_database_faults_are_skipped_for_a_server_that_is_no_dev_service(kafka, postgres, topic, tmp_path):
    """No --dev-dir whose services are the job's: nothing may be stopped, so
    the plan is empty and the command refuses, saying why."""
    done = run_chaos(JOB, seed=1, faults="database", kills=1,
                     args=["--no-check-determinism", "--dev-dir", str(tmp_path)],
                     env=job_env(kafka, topic, ORDERS_PG_URL=postgres, ORDERS_TABLE=f"chaos_{uuid.uuid4().hex[:8]}"))
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    assert "database faults skipped: the sink's database is not eoskit's dev service" in done.stderr


@pytest.mark.crash
@pytest.mark.cluster
@pytest.mark.full
def test_two_phase_postgres_on_a_cluster_survives_executor_kills(kafka, postgres, topic, spark_cluster, tmp_path):
    """Two executors of a standalone cluster killed (one of them after batch
    1, then after batch 3): Spark runs their tasks again elsewhere, the
    cluster starts new executors, and the output is exact."""
    table = f"chaos_{uuid.uuid4().hex[:8]}"
    report = tmp_path / "report.json"
    done = run_chaos(JOB, seed=1, faults="executor", kills=2,
                     args=["--faults-every", "2,2", "--no-check-determinism", "--master", spark_cluster,
                           "--conf", "spark.executor.memory=768m", "--conf", "spark.task.maxFailures=4",
                           "--conf", "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
                           "--report", str(report)],
                     env=job_env(kafka, topic, ORDERS_PG_URL=postgres, ORDERS_TABLE=table,
                                 PYSPARK_PYTHON=sys.executable))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    found = json.loads(report.read_text())
    assert fault_kinds(found) == ["executor", "executor"], (found["timeline"], found["notes"])
    (output,) = found["outputs"]
    assert output["comparison"]["reference_rows"] == RECORDS, output


@pytest.mark.crash
@pytest.mark.full
def test_at_least_once_postgres_is_reported_with_its_duplicates(kafka, postgres, topic, tmp_path):
    """A driver killed after a task committed by itself: the replayed batch
    writes its rows again, and chaos counts them."""
    seed = next(s for s in range(100) if FaultPlan.draw(s, ["driver"], 1).faults[0].step
                == "driver_after_task_commit")
    table = f"chaos_{uuid.uuid4().hex[:8]}"
    report = tmp_path / "report.json"
    done = run_chaos(JOB, seed=seed, faults="driver", kills=1,
                     args=["--no-check-determinism", "--report", str(report)],
                     env=job_env(kafka, topic, ORDERS_PG_URL=postgres, ORDERS_TABLE=table,
                                 ORDERS_COMMIT_MODE="at_least_once"))
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    (output,) = json.loads(report.read_text())["outputs"]
    duplicated = output["comparison"]["duplicated"]["count"]
    assert 0 < duplicated <= RECORDS and output["comparison"]["missing"]["count"] == 0, output
    assert "duplicated" in done.stdout
    # Located: by the batch the driver died in, after that fault (read after each commit).
    found = json.loads(report.read_text())
    assert found["first_difference_after"]["index"] == 1, found
    assert found["first_difference_batch"] >= found["first_difference_after"]["after_batch"] + 1, found
    assert "first difference by batch" in done.stdout


@pytest.mark.crash
@pytest.mark.full
def test_rand_in_the_idempotent_mode_is_found_non_deterministic(kafka, postgres, topic, tmp_path):
    table = f"chaos_{uuid.uuid4().hex[:8]}"
    report = tmp_path / "report.json"
    done = run_chaos(JOB, seed=1, faults="driver", kills=1, args=["--report", str(report)],
                     env=job_env(kafka, topic, ORDERS_PG_URL=postgres, ORDERS_TABLE=table,
                                 ORDERS_COMMIT_MODE="idempotent", ORDERS_STAMP="rand"))
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    (output,) = json.loads(report.read_text())["outputs"]
    assert output["determinism"]["verdict"] == "different", output
    assert output["nondeterministic_columns"] == ["sample"], output
    assert "not deterministic" in done.stdout and "sample" in done.stdout
    # The sink itself lost and doubled nothing: apart from the rand() column, exact.
    assert "without sample: the chaos run's rows are exact" in done.stdout, done.stdout


@pytest.mark.crash
def test_kafka_sink_survives_driver_and_worker_kills_exactly(kafka, topic, tmp_path):
    out = f"chaos-out-{uuid.uuid4().hex[:8]}"
    recreate_topic(kafka, out, 2)
    report = tmp_path / "report.json"
    done = run_chaos(JOB, seed=5, faults="driver,worker", kills=3,
                     args=["--faults-every", "1,2", "--no-check-determinism", "--report", str(report)],
                     env=job_env(kafka, topic, ORDERS_SINK="kafka", ORDERS_OUT_TOPIC=out))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    found = json.loads(report.read_text())
    # Each worker fault killed one of the run's task workers (none was missing).
    assert fault_kinds(found) == ["worker", "worker", "driver"], (found["timeline"], found["notes"])
    (output,) = found["outputs"]
    assert output["comparison"]["reference_rows"] == RECORDS, output
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": kafka}).list_topics(timeout=30).topics
    assert [t for t in topics if t.startswith(out + "-")] == []  # scratch topics deleted


@pytest.mark.crash
@pytest.mark.full
def test_files_sink_survives_driver_and_worker_kills_exactly_on_generated_input(kafka, topic, tmp_path):
    """The input made by the user's generator (--records, --generator) into
    a scratch copy of the job's topic, not read from the topic itself."""
    path = tmp_path / "out"
    report = tmp_path / "report.json"
    generator = tmp_path / "orders_gen.py"
    generator.write_text(
        "import json\n"
        "def orders(n):\n"
        "    for i in range(n):\n"
        "        yield {'key': str(i), 'partition': i % 2, 'value': json.dumps(\n"
        "            {'id': 10_000 + i, 'amount': (i * 7) % 100, 'customer': f'c{i % 9}'})}\n")
    done = run_chaos(JOB, seed=8, faults="driver,worker", kills=3,
                     args=["--faults-every", "1,2", "--no-check-determinism", "--report", str(report),
                           "--records", str(RECORDS), "--generator", f"{generator}:orders"],
                     env=job_env(kafka, topic, ORDERS_SINK="files", ORDERS_PATH=str(path)))
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"input: {RECORDS:,} records generated by" in done.stderr, done.stderr[-3000:]
    found = json.loads(report.read_text())
    assert fault_kinds(found) == ["worker", "driver", "driver"], (found["timeline"], found["notes"])
    (output,) = found["outputs"]
    assert output["comparison"]["reference_rows"] == RECORDS, output
    assert not path.exists() and list(tmp_path.glob("out-*")) == []


def test_a_sink_that_cannot_be_redirected_is_refused_before_anything_runs(kafka, topic, tmp_path):
    job = tmp_path / "console_job.py"
    job.write_text(
        "from eoskit.connectors.kafka import KafkaSource\n"
        "from eoskit.runtime import Pipeline\n"
        "class Console:\n"
        "    def write_stream(self, df):\n"
        "        return df.writeStream.format('console')\n"
        "    def describe(self):\n"
        "        return 'console'\n"
        f"pipeline = Pipeline('console_job', KafkaSource({kafka!r}, {{'subscribe': {topic!r}}}), Console())\n")
    done = run_chaos(job, kills=1)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        "eoskit chaos: the sink console cannot be redirected to a scratch target")


# -- the network cut between the job's host and its database ----------------------

DEMO_JOB = Path(__file__).resolve().parents[1] / "runtime" / "devtools" / "demo" / "orders_job.py"
#: Ten of the demo job's batches (maxOffsetsPerTrigger 4,000): room for three
#: cuts of up to 8 s a batch apart.
ORDERS = 40_000


@pytest.mark.crash
@pytest.mark.network
@pytest.mark.full
def test_the_demos_job_is_exact_through_network_faults_on_dev_services_of_their_own_hosts(tmp_path):
    """As a user would: `eoskit dev up --network` (each service on a host of
    its own), the demo's orders job, `eoskit chaos --faults network`: every
    run on the lab's job host, the network to PostgreSQL cut (partitions,
    lost replies, resets) while it runs; exact. `eoskit dev down` leaves no
    namespace, link or rule."""
    import subprocess

    from eoskit.runtime.devtools.demo.orders import produce_orders
    from eoskit.runtime.devtools.services.netlab import Lab

    if Lab.available() is not None:
        pytest.skip(f"the network lab cannot run here: {Lab.available()}")
    root = tmp_path / "net"
    eoskit = [sys.executable, "-m", "eoskit.runtime.cli"]
    before = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    up = subprocess.run([*eoskit, "dev", "up", "--network", "--dir", str(root)], capture_output=True,
                        text=True, timeout=300)
    prefix = None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert "run jobs under test on the job host: ip netns exec" in up.stdout
        prefix = json.loads((root / "network.json").read_text())["prefix"]
        exported = subprocess.run([*eoskit, "dev", "env", "--dir", str(root)], capture_output=True, text=True,
                                  timeout=60).stdout
        env = dict(os.environ)
        for line in exported.splitlines():
            if line.startswith("export "):
                name, _, value = line[len("export "):].partition("=")
                env[name] = value.strip("'")
        assert env["EOSKIT_POSTGRES_URL"].split("@")[1].startswith("10.214."), exported
        topic, table = f"orders-{uuid.uuid4().hex[:6]}", f"orders_{uuid.uuid4().hex[:6]}"
        recreate_topic(env["EOSKIT_KAFKA_BOOTSTRAP"], topic, 2)
        produce_orders(env["EOSKIT_KAFKA_BOOTSTRAP"], topic, ORDERS, partitions=2)  # ten batches
        env.update(EOSKIT_DEMO_TOPIC=topic, EOSKIT_DEMO_TABLE=table)
        report = tmp_path / "report.json"
        done = run_chaos(DEMO_JOB, seed=3, faults="network", kills=3,
                         args=["--faults-every", "2,2", "--no-check-determinism", "--dev-dir", str(root),
                               "--report", str(report)], env=env)
        assert done.returncode == 0, done.stdout + done.stderr[-3000:]
        found = json.loads(report.read_text())
        assert fault_kinds(found) == ["network"] * 3, (found["timeline"], found["notes"])
        assert all(w.startswith("the network to the sink's server cut") for w in found["windows"]), found
        (output,) = found["outputs"]
        assert output["comparison"]["verdict"] == "exact" and output["comparison"]["reference_rows"] == ORDERS
        assert done.stdout.strip().splitlines()[-1].startswith("exact:"), done.stdout
        print(done.stdout)
    finally:
        down = subprocess.run([*eoskit, "dev", "down", "--purge", "--dir", str(root)], capture_output=True,
                              text=True, timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert prefix is not None and prefix not in listed, listed
    assert subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout == before
