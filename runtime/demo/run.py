"""The demo, step by step: services, sample data, the job, the proof."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from eoskit.runtime.demo.orders import produce_orders, recreate_topic
from eoskit.runtime.dev import LocalServices

JOB = Path(__file__).with_name("orders_job.py")
TOPIC = "orders"
ORDERS = 20_000
PARTITIONS = 3


def _say(text: str) -> None:
    print(f"==> {text}", flush=True)


def main(work_dir: str = ".eoskit/demo", services_dir: str = ".eoskit/dev") -> int:
    work = Path(work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    _say(f"starting local Kafka, PostgreSQL and MariaDB under {services_dir}")
    endpoints = LocalServices(services_dir).up()
    _say(f"producing {ORDERS} JSON orders to topic '{TOPIC}' ({PARTITIONS} partitions)")
    recreate_topic(endpoints.kafka_bootstrap, TOPIC, PARTITIONS)
    expected = produce_orders(endpoints.kafka_bootstrap, TOPIC, ORDERS, PARTITIONS)
    output = work / "orders"
    env = {
        **os.environ,
        **endpoints.as_env(),
        "EOSKIT_DEMO_TOPIC": TOPIC,
        "EOSKIT_DEMO_OUTPUT": str(output.resolve()),
        "PYSPARK_PYTHON": sys.executable,
    }
    command = [sys.executable, "-m", "eoskit.runtime.cli", "run", str(JOB),
               "--checkpoint-dir", str((work / "checkpoint").resolve()), "--until-caught-up"]
    _say("running: eoskit run orders_job.py --until-caught-up")
    result = subprocess.run(command, env=env)
    if result.returncode != 0:
        print("demo job failed", file=sys.stderr)
        return result.returncode
    _say("verifying the output against what was produced")
    return _verify(output, expected.count, expected.amount)


def _verify(output: Path, count: int, amount) -> int:
    from eoskit.runtime.spark import get_session

    spark = get_session("eoskit-demo-verify", {"spark.master": "local[1]", "spark.ui.enabled": "false"})
    row = spark.read.parquet(str(output)).selectExpr(
        "count(*) AS n", "count(DISTINCT order_id) AS ids", "sum(amount) AS total"
    ).collect()[0]
    spark.stop()
    print(f"    produced: {count} orders, total {amount}")
    print(f"    written:  {row.n} rows, {row.ids} distinct orders, total {row.total}")
    if row.n == count and row.ids == count and row.total == amount:
        _say("every order is in the output exactly once")
        return 0
    print("MISMATCH: the output does not hold every order exactly once", file=sys.stderr)
    return 1
