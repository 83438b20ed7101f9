"""`eoskit run`: a job file run to completion, stopped by signal, and restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

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


def eoskit_cmd() -> list[str]:
    return [str(Path(sys.executable).parent / "eoskit")]


def job_env(kafka: str, topic: str, out: Path) -> dict[str, str]:
    return {**os.environ, "TEST_KAFKA": kafka, "TEST_TOPIC": topic, "TEST_OUT": str(out),
            "PYSPARK_PYTHON": sys.executable}


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
    assert values(spark, tmp_path / "out") == list(range(60))


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
    assert result.returncode == 1
    assert "must define a module-level `pipeline = Pipeline(...)`" in result.stderr
