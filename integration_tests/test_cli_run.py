"""`eoskit run`: a job file run to completion, stopped by signal, restarted,
and failing the eoskit way (one line naming the root cause, a documented exit
code, no trace)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

JOB = '''
import os
from pyspark.sql import functions as F
from eoskit.connectors.kafka import KafkaSource
from eoskit.connectors.spark_sinks import SparkSink
from eoskit.runtime import Pipeline

pipeline = Pipeline(
    name="cli_test",
    source=KafkaSource(os.environ["TEST_KAFKA"], {{
        "subscribe": os.environ["TEST_TOPIC"], "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "{max_offsets}"}}),
    transform=lambda df: df.select(F.col("value").cast("string").alias("v"), "partition", "offset"),
    sink=SparkSink("parquet", {{"path": os.environ["TEST_OUT"]}}),
    checkpoint_interval="1 second",
    spark_conf={{"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
                "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}},
)
'''


#: A job whose sink is chosen by TEST_SINK: the PostgreSQL sink, or Spark's
#: `eoskit-postgres` format with TEST_OPTION added to its options.
FAILING_JOB = '''
import os
from pyspark.sql import functions as F
from eoskit.connectors.kafka import KafkaSource
from eoskit.connectors.postgres import PostgresSink
from eoskit.connectors.spark_sinks import SparkSink
from eoskit.runtime import Pipeline

url, table = os.environ["TEST_PG"], os.environ["TEST_TABLE"]
if os.environ["TEST_SINK"] == "postgres":
    sink = PostgresSink(url, table)
else:
    sink = SparkSink("eoskit-postgres", {"url": url, "dbtable": table, os.environ["TEST_OPTION"]: "1"})
pipeline = Pipeline(
    name="cli_fail",
    source=KafkaSource(os.environ["TEST_KAFKA"], {"subscribe": os.environ["TEST_TOPIC"],
                                                  "startingOffsets": "earliest"}),
    transform=lambda df: df.select(F.col("value").cast("string").alias("v")),
    sink=sink,
    spark_conf={"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
                "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"},
)
'''

#: What every run printed before eoskit stopped causing it: Spark's warning
#: when a data source it found by itself is registered again, and runpy's
#: when the worker daemon module was imported before it ran.
UNACTIONABLE = ("replaced a statically registered data source", "found in sys.modules after import of package")


def eoskit_cmd() -> list[str]:
    return [str(Path(sys.executable).parent / "eoskit")]


def job_env(kafka: str, topic: str, out: Path) -> dict[str, str]:
    # Spark's Python: the job's get_session's choice (eoskit-spark-python in local mode).
    return {**{k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}, "TEST_KAFKA": kafka,
            "TEST_TOPIC": topic, "TEST_OUT": str(out)}


def values(spark, out: Path) -> list[int]:
    return sorted(int(r.v) for r in spark.read.parquet(str(out)).select("v").collect())


def test_run_until_caught_up_prints_progress_and_summary(
    spark, kafka, new_topic, produce_to, numbered_records, tmp_path
):
    topic = new_topic(2)
    produce_to(topic, numbered_records(2, 30))
    job = tmp_path / "job.py"
    job.write_text(JOB.format(max_offsets=20))
    result = subprocess.run(
        eoskit_cmd() + ["run", str(job), "--checkpoint-dir", str(tmp_path / "ck"), "--until-caught-up"],
        env=job_env(kafka, topic, tmp_path / "out"), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[cli_test] batch 0: 20 rows" in result.stderr
    assert "[cli_test] done: 3 batches (batches 0..2), 60 rows" in result.stderr
    for warning in UNACTIONABLE:
        assert warning not in result.stderr, result.stderr[-3000:]
    assert values(spark, tmp_path / "out") == list(range(60))
    # The run kept its status beside the checkpoint: eoskit status reads it.
    status = subprocess.run(eoskit_cmd() + ["status", "--checkpoint-dir", str(tmp_path / "ck"), "--json"],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert (shown["state"], shown["job"], shown["batches"], shown["last_batch"], shown["live"]) == (
        "finished", "cli_test", 3, 2, False)


def test_sigterm_stops_at_a_batch_boundary_and_restart_continues(
    spark, kafka, new_topic, produce_to, numbered_records, tmp_path
):
    topic = new_topic(2)
    produce_to(topic, numbered_records(2, 100))
    job = tmp_path / "job.py"
    job.write_text(JOB.format(max_offsets=10))
    env = job_env(kafka, topic, tmp_path / "out")
    args = ["run", str(job), "--checkpoint-dir", str(tmp_path / "ck")]
    proc = subprocess.Popen(eoskit_cmd() + args, env=env, stderr=subprocess.PIPE, text=True)
    lines = []
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        if "[cli_test] batch 1:" in line:
            break
    # While it runs: eoskit list names it, eoskit status says it is running.
    listed = subprocess.run(eoskit_cmd() + ["list", "--json"], capture_output=True, text=True,
                            timeout=60, env=env)
    assert any(r["pid"] == proc.pid and r["job"] == "cli_test" for r in json.loads(listed.stdout)), listed.stdout
    status = subprocess.run(eoskit_cmd() + ["status", "--checkpoint-dir", str(tmp_path / "ck")],
                            capture_output=True, text=True, timeout=60)
    assert status.stdout.startswith("job cli_test on ") and ": running (pid " in status.stdout, status.stdout
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=120)
    lines.append(rest)
    assert proc.returncode == 0, "".join(lines)[-3000:]
    assert "[cli_test] done:" in rest
    stopped_at = len(values(spark, tmp_path / "out"))
    assert 0 < stopped_at < 200

    result = subprocess.run(eoskit_cmd() + args + ["--until-caught-up"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert values(spark, tmp_path / "out") == list(range(200))


def test_job_file_without_pipeline_is_refused(tmp_path):
    job = tmp_path / "job.py"
    job.write_text("x = 1\n")
    result = subprocess.run(
        eoskit_cmd() + ["run", str(job), "--checkpoint-dir", str(tmp_path / "ck")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr == (f"eoskit run: job file {str(job)!r} must define a module-level "
                             "`pipeline = Pipeline(...)`\n")


def run_failing_job(tmp_path: Path, kafka: str, topic: str, postgres: str, table: str,
                    **env: str) -> subprocess.CompletedProcess[str]:
    job = tmp_path / "job.py"
    job.write_text(FAILING_JOB)
    return subprocess.run(
        eoskit_cmd() + ["run", str(job), "--checkpoint-dir", str(tmp_path / "ck"), "--until-caught-up"],
        env={**job_env(kafka, topic, tmp_path / "out"), "TEST_PG": postgres, "TEST_TABLE": table, **env},
        capture_output=True, text=True, timeout=300,
    )


def assert_one_line_failure(result: subprocess.CompletedProcess[str], postgres: str) -> str:
    """The failure is the last line, and nothing before it is a trace."""
    from sqlalchemy.engine import make_url

    lines = result.stderr.rstrip("\n").splitlines()
    assert lines and lines[-1].startswith("eoskit run: pipeline cli_fail failed: "), result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "\tat org.apache" not in result.stderr, result.stderr[-3000:]
    assert "Writing job" not in result.stderr and "Job aborted" not in result.stderr
    assert f":{make_url(postgres).password}@" not in result.stderr  # the dev password is a common word
    return lines[-1]


def test_a_sink_error_in_a_task_is_the_one_line_of_the_failure(
    kafka, postgres, new_topic, produce_to, numbered_records, tmp_path
):
    import psycopg
    from psycopg import sql
    from sqlalchemy.engine import make_url

    from eoskit.connectors.postgres.connection import connect_kwargs

    table = f"cli_check_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(**connect_kwargs(make_url(postgres)), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
        conn.execute(sql.SQL("CREATE TABLE {} (v text CONSTRAINT not_three CHECK (v <> '3'))")
                     .format(sql.Identifier(table)))
    topic = new_topic(2)
    produce_to(topic, numbered_records(2, 5))
    result = run_failing_job(tmp_path, kafka, topic, postgres, table, TEST_SINK="postgres")
    assert result.returncode == 1, result.stderr[-3000:]
    line = assert_one_line_failure(result, postgres)
    assert line.startswith(f"eoskit run: pipeline cli_fail failed: PostgreSQL refused a row for table "
                           f"{table}, column 'v': new row for relation \"{table}\" violates check "
                           'constraint "not_three"'), line


def test_an_option_error_raised_inside_spark_is_bad_input(
    kafka, postgres, new_topic, produce_to, numbered_records, tmp_path
):
    topic = new_topic(1)
    produce_to(topic, numbered_records(1, 2))
    result = run_failing_job(tmp_path, kafka, topic, postgres, "never_written",
                             TEST_SINK="spark", TEST_OPTION="bogusOption")
    assert result.returncode == 2, result.stderr[-3000:]
    line = assert_one_line_failure(result, postgres)
    assert line.startswith("eoskit run: pipeline cli_fail failed: unknown option 'bogusoption' for "), line


@pytest.fixture(scope="module")
def stop_workload(kafka: str):
    from eoskit.testing.conformance import Workload

    return Workload.produce(kafka, records=6_000, partitions=2, batches=6)


@pytest.mark.crash
@pytest.mark.parametrize("how", [pytest.param("ctrl_c_to_the_process_group", marks=pytest.mark.full),
                                 "sigterm_to_the_driver"])
def test_a_stop_signal_lets_the_batch_in_flight_commit(postgres, stop_workload, tmp_path, how):
    """As documented (docs/runtime.md): SIGINT or SIGTERM while batch 2's
    offsets are logged and its tasks hold prepared transactions lets batch 2
    finish and commit, then the run exits 0 without starting batch 3. Ctrl-C
    in a terminal signals the whole foreground process group (the JVM and
    the Python workers too); a container runtime signals the driver alone."""
    from eoskit.core import crash
    from eoskit.testing.conformance.harness import Paused, Run
    from eoskit.testing.conformance.postgres import PostgresTarget
    from eoskit.twophase.txn_id import sink_prefix

    target = PostgresTarget(postgres)
    run = Run(target, stop_workload, tmp_path)
    target.create_table(run.table)
    try:
        paused = Paused(run, crash.TASK_AFTER_PREPARE, batch=2)
        paused.wait_reached()
        if how == "ctrl_c_to_the_process_group":
            os.killpg(paused.process.pid, signal.SIGINT)
        else:
            paused.process.send_signal(signal.SIGTERM)
        time.sleep(3)
        assert paused.process.poll() is None, (
            f"the run ended (exit {paused.process.returncode}) with batch 2 in flight:\n"
            f"{run.last_log()[-3000:]}")
        code, log = paused.finish()
        assert code == 0, log[-3000:]
        committed = sorted(int(p.name) for p in (run.checkpoint / "commits").iterdir() if p.name.isdigit())
        assert committed == [0, 1, 2], f"committed batches {committed}:\n{log[-3000:]}"
        assert len(target.rows(run.table)) == 3 * stop_workload.batch_offsets
        run.assert_nothing_prepared()
        run.recover()
        run.verify_exactly_once()
    finally:
        for txn in target.prepared(sink_prefix(run.sink_id)):
            target.rollback(txn)
        target.drop_table(run.table)
