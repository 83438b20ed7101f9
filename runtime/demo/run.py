"""The demo, step by step: services, sample orders, the job killed with
SIGKILL mid-stream, the restart, and the proof read back with psql."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

from sqlalchemy.engine import make_url

from eoskit.runtime.demo.orders import produce_orders, recreate_topic
from eoskit.runtime.dev import LocalServices, ServiceEndpoints

JOB = Path(__file__).with_name("orders_job.py")
TOPIC = "orders"
TABLE = "orders"
ORDERS = 20_000
PARTITIONS = 3
KILL_AFTER_BATCH = 1


def _say(text: str) -> None:
    print(f"==> {text}", flush=True)


def _psql(postgres_url: str, query: str) -> str:
    uri = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    result = subprocess.run(["psql", uri, "-X", "-q", "-A", "-t", "-F", " ", "-c", query],
                            capture_output=True, text=True, check=True)
    return result.stdout.strip()


def main(work_dir: str = ".eoskit/demo", services_dir: str = ".eoskit/dev",
         endpoints: ServiceEndpoints | None = None) -> int:
    work = Path(work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if endpoints is None:
        _say(f"starting local Kafka, PostgreSQL and MariaDB under {services_dir}")
        endpoints = LocalServices(services_dir).up()
    _psql(endpoints.postgres_url, f"DROP TABLE IF EXISTS {TABLE}")
    _say(f"producing {ORDERS} JSON orders to topic '{TOPIC}' ({PARTITIONS} partitions)")
    recreate_topic(endpoints.kafka_bootstrap, TOPIC, PARTITIONS)
    expected = produce_orders(endpoints.kafka_bootstrap, TOPIC, ORDERS, PARTITIONS)
    env = {**os.environ, **endpoints.as_env(), "EOSKIT_DEMO_TOPIC": TOPIC,
           "EOSKIT_DEMO_TABLE": TABLE, "PYSPARK_PYTHON": sys.executable}
    command = [sys.executable, "-m", "eoskit.runtime.cli", "run", str(JOB),
               "--checkpoint-dir", str((work / "checkpoint").resolve())]

    _say("running: eoskit run orders_job.py   (Kafka -> parse -> PostgreSQL upsert)")
    job = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert job.stderr is not None
    for line in job.stderr:
        if line.startswith("[orders_demo]"):
            print("    " + line.rstrip(), flush=True)
        if line.startswith(f"[orders_demo] batch {KILL_AFTER_BATCH}:"):
            break
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    rows_at_kill = _psql(endpoints.postgres_url, f"SELECT count(*) FROM {TABLE}")
    in_doubt = _psql(endpoints.postgres_url, "SELECT count(*) FROM pg_prepared_xacts")
    _say(f"killed the job with SIGKILL mid-stream: {rows_at_kill} orders in the table, "
         f"{in_doubt} prepared transaction(s) in doubt")

    _say("restarting it from its checkpoint: eoskit run orders_job.py --until-caught-up")
    restarted = subprocess.run(command + ["--until-caught-up"], env=env, stderr=subprocess.PIPE, text=True)
    for line in restarted.stderr.splitlines():
        if line.startswith("[orders_demo]"):
            print("    " + line, flush=True)
    if restarted.returncode != 0:
        print(restarted.stderr[-4000:], file=sys.stderr)
        return restarted.returncode

    _say("verifying with psql")
    count, ids, total = _psql(
        endpoints.postgres_url, f"SELECT count(*), count(DISTINCT order_id), sum(amount) FROM {TABLE}"
    ).split()
    prepared = int(_psql(endpoints.postgres_url, "SELECT count(*) FROM pg_prepared_xacts"))
    print(f"    produced: {expected.count} orders, total amount {expected.amount}")
    print(f"    table:    {count} rows, {ids} distinct orders, total amount {total}, "
          f"{prepared} prepared transactions left")
    if int(count) == int(ids) == expected.count and Decimal(total) == expected.amount and prepared == 0:
        _say("every order is in PostgreSQL exactly once, despite the kill -9")
        return 0
    print("MISMATCH: the table does not hold every order exactly once", file=sys.stderr)
    return 1
