"""The demo, step by step: services, sample orders, then three jobs on them,
each killed with SIGKILL mid-stream, restarted, and proven exact: Kafka to
PostgreSQL (read back with psql), a stateful job keeping running totals per
customer in Spark's state store and upserting them into PostgreSQL (read
back with psql, checked against the totals of the produced orders), then
Kafka to Kafka (read back from the topic's log with eoskit's read_committed
verifier)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

from sqlalchemy.engine import make_url

from eoskit.runtime.devtools.demo.enrich import check_enriched
from eoskit.runtime.devtools.demo.orders import OrderTotals, produce_orders, recreate_topic
from eoskit.runtime.devtools.services import LocalServices, ServiceEndpoints
from eoskit.runtime.devtools.services.kafka_topic import TopicLog, read_topic

JOB = Path(__file__).with_name("orders_job.py")
ENRICH_JOB = Path(__file__).with_name("enrich_job.py")
TOTALS_JOB = Path(__file__).with_name("totals_job.py")
TOTALS_TABLE = "customer_totals"
TOPIC = "orders"
ENRICHED_TOPIC = "orders-enriched"
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


def _job_command(job: Path, checkpoint: Path) -> list[str]:
    return [sys.executable, "-m", "eoskit.runtime.cli", "run", str(job),
            "--checkpoint-dir", str(checkpoint.resolve())]


def _run_until_killed(command: list[str], env: dict[str, str], name: str) -> bool:
    """Start the job, echo its progress, and SIGKILL its whole process group
    (driver, Python workers) once batch KILL_AFTER_BATCH is done; False if
    the job ended before that."""
    job = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    assert job.stderr is not None
    tail: list[str] = []
    for line in job.stderr:
        tail = (tail + [line])[-40:]
        if line.startswith(f"[{name}]"):
            print("    " + line.rstrip(), flush=True)
        if line.startswith(f"[{name}] batch {KILL_AFTER_BATCH}:"):
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            return True
    job.wait()
    print("".join(tail), file=sys.stderr)
    print(f"the job ended (exit code {job.returncode}) before its batch {KILL_AFTER_BATCH}",
          file=sys.stderr)
    return False


def _restart(command: list[str], env: dict[str, str], name: str, job: str) -> bool:
    _say(f"restarting it from its checkpoint: eoskit run {job} --until-caught-up")
    restarted = subprocess.run(command + ["--until-caught-up"], env=env, stderr=subprocess.PIPE,
                               text=True)
    for line in restarted.stderr.splitlines():
        if line.startswith(f"[{name}]"):
            print("    " + line, flush=True)
    if restarted.returncode != 0:
        print(restarted.stderr[-4000:], file=sys.stderr)
    return restarted.returncode == 0


def _postgres_leg(endpoints: ServiceEndpoints, work: Path, env: dict[str, str],
                  expected: OrderTotals) -> bool:
    env = {**env, "EOSKIT_DEMO_TABLE": TABLE}
    command = _job_command(JOB, work / "checkpoint")
    _say("running: eoskit run orders_job.py   (Kafka -> parse -> PostgreSQL upsert)")
    if not _run_until_killed(command, env, "orders_demo"):
        return False
    rows_at_kill = _psql(endpoints.postgres_url, f"SELECT count(*) FROM {TABLE}")
    in_doubt = _psql(endpoints.postgres_url, "SELECT count(*) FROM pg_prepared_xacts")
    _say(f"killed the job with SIGKILL mid-stream: {rows_at_kill} orders in the table, "
         f"{in_doubt} prepared transaction(s) in doubt")
    if not _restart(command, env, "orders_demo", JOB.name):
        return False

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
        return True
    print("MISMATCH: the table does not hold every order exactly once", file=sys.stderr)
    return False


def _totals_leg(endpoints: ServiceEndpoints, work: Path, env: dict[str, str],
                expected: OrderTotals) -> bool:
    env = {**env, "EOSKIT_DEMO_TOTALS_TABLE": TOTALS_TABLE}
    command = _job_command(TOTALS_JOB, work / "checkpoint-totals")
    _say("running: eoskit run totals_job.py   (Kafka -> running totals per customer in Spark's "
         "state store -> PostgreSQL upsert, update mode)")
    if not _run_until_killed(command, env, "totals_demo"):
        return False
    customers = _psql(endpoints.postgres_url, f"SELECT count(*) FROM {TOTALS_TABLE}")
    _say(f"killed the job with SIGKILL mid-stream: {customers} customers' totals in the table")
    if not _restart(command, env, "totals_demo", TOTALS_JOB.name):
        return False

    _say("verifying with psql: each customer's total and order count against the produced orders")
    table = {}
    for line in _psql(endpoints.postgres_url,
                      f"SELECT customer, total, orders FROM {TOTALS_TABLE}").splitlines():
        customer, total, orders = line.split()
        table[customer] = (Decimal(total), int(orders))
    wrong = sorted(c for c in expected.by_customer.keys() | table.keys()
                   if table.get(c) != expected.by_customer.get(c))
    prepared = int(_psql(endpoints.postgres_url, "SELECT count(*) FROM pg_prepared_xacts"))
    print(f"    produced: {expected.count} orders of {len(expected.by_customer)} customers")
    print(f"    table:    {len(table)} customers, {sum(n for _, n in table.values())} orders counted, "
          f"{len(wrong)} wrong totals, {prepared} prepared transactions left")
    for customer in wrong[:5]:
        print(f"    {customer}: table {table.get(customer)}, orders "
              f"{expected.by_customer.get(customer)}", file=sys.stderr)
    if not wrong and prepared == 0:
        _say("every customer's running total counts each order exactly once, despite the kill -9")
        return True
    print("MISMATCH: the running totals do not count every order exactly once", file=sys.stderr)
    return False


def _open_transactions(log: TopicLog) -> int:
    """Partitions a transaction is still open on."""
    return len(log.open_transactions)


def _kafka_leg(endpoints: ServiceEndpoints, work: Path, env: dict[str, str],
               expected: OrderTotals) -> bool:
    bootstrap = endpoints.kafka_bootstrap
    _say(f"creating topic '{ENRICHED_TOPIC}' ({PARTITIONS} partitions)")
    recreate_topic(bootstrap, ENRICHED_TOPIC, PARTITIONS)
    # One sink id per demo run: the sink's progress markers live in Kafka,
    # and a rerun of the demo starts from a new checkpoint.
    env = {**env, "EOSKIT_DEMO_ENRICHED_TOPIC": ENRICHED_TOPIC,
           "EOSKIT_DEMO_SINK_ID": f"demo-{secrets.token_hex(4)}"}
    command = _job_command(ENRICH_JOB, work / "checkpoint-enrich")
    _say("running: eoskit run enrich_job.py   (Kafka -> parse -> enrich -> Kafka, "
         "one transaction per task)")
    if not _run_until_killed(command, env, "enrich_demo"):
        return False
    at_kill = read_topic(bootstrap, ENRICHED_TOPIC)
    _say(f"killed the job with SIGKILL mid-stream: {len(at_kill.records())} orders committed to "
         f"topic '{ENRICHED_TOPIC}', a transaction left open on {_open_transactions(at_kill)} "
         "partition(s)")
    if not _restart(command, env, "enrich_demo", ENRICH_JOB.name):
        return False

    _say(f"verifying: topic '{ENRICHED_TOPIC}' read by a plain read_committed consumer")
    log = read_topic(bootstrap, ENRICHED_TOPIC)
    records = log.records()
    ids: set[int] = set()
    total = Decimal("0")
    problems: list[str] = []
    for record in records:
        try:
            order = check_enriched(record.value or b"")
        except (ValueError, ArithmeticError, KeyError) as exc:
            problems.append(f"partition {record.partition} offset {record.offset}: {exc}")
            continue
        if record.key != str(order.order_id).encode():
            problems.append(f"order {order.order_id} has key {record.key!r}")
        ids.add(order.order_id)
        total += order.amount
    open_txns = _open_transactions(log)
    print(f"    produced: {expected.count} orders, total amount {expected.amount}")
    print(f"    topic:    {len(records)} records, {len(ids)} distinct orders, total amount "
          f"{total}, open transactions on {open_txns} partition(s)")
    for problem in problems[:5]:
        print(f"    {problem}", file=sys.stderr)
    if (len(records) == len(ids) == expected.count and total == expected.amount
            and open_txns == 0 and not problems):
        _say(f"every order is in topic {ENRICHED_TOPIC} exactly once, despite the kill -9")
        return True
    print(f"MISMATCH: topic {ENRICHED_TOPIC} does not hold every order exactly once",
          file=sys.stderr)
    return False


def main(work_dir: str = ".eoskit/demo", services_dir: str = ".eoskit/dev",
         endpoints: ServiceEndpoints | None = None) -> int:
    """The demo; on services at ``endpoints``, or else local ones under
    ``services_dir``, of which it stops at the end those it started."""
    if endpoints is not None:
        return _demo(work_dir, endpoints)
    services = LocalServices(services_dir)
    running_before = set(services.pids())
    _say(f"starting local Kafka, PostgreSQL and MariaDB under {services_dir}")
    try:
        return _demo(work_dir, services.up())
    finally:
        started = [s.name for s in services.services if s.name not in running_before]
        if started:
            services.down(started)
        _say(stop_line(services_dir, started, sorted(running_before)))


def stop_line(services_dir: str, stopped: list[str], left: list[str]) -> str:
    """What the demo did with the local services at its end."""
    parts = []
    if stopped:
        parts.append(f"stopped the local services it started ({', '.join(stopped)}; their data "
                     f"is kept: `eoskit dev up --dir {services_dir}` starts them again)")
    if left:
        parts.append(f"left running the ones that ran before it ({', '.join(left)}; "
                     f"`eoskit dev down --dir {services_dir}` stops them)")
    return "; ".join(parts) or "no local service to stop"


def _demo(work_dir: str, endpoints: ServiceEndpoints) -> int:
    work = Path(work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    _psql(endpoints.postgres_url, f"DROP TABLE IF EXISTS {TABLE}, {TOTALS_TABLE}")
    _say(f"producing {ORDERS} JSON orders to topic '{TOPIC}' ({PARTITIONS} partitions)")
    recreate_topic(endpoints.kafka_bootstrap, TOPIC, PARTITIONS)
    expected = produce_orders(endpoints.kafka_bootstrap, TOPIC, ORDERS, PARTITIONS)
    # Spark's Python is the jobs' get_session's choice (eoskit-spark-python
    # in local mode), not the shell's.
    env = {**{k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}, **endpoints.as_env(),
           "EOSKIT_DEMO_TOPIC": TOPIC}
    if not _postgres_leg(endpoints, work, env, expected):
        return 1
    if not _totals_leg(endpoints, work, env, expected):
        return 1
    return 0 if _kafka_leg(endpoints, work, env, expected) else 1
