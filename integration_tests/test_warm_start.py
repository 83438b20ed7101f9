"""A Spark user's own script gets the warm start (issue 33, item 6).

The README's script, its format strings switched to eoskit's: plain
``SparkSession.builder`` (no eoskit session helper), run as ``python
job.py``. Through the startup hook (``eoskit-warm-start.pth``) its driver
JVM maps the class archive, Spark's Python is ``eoskit-spark-python`` and
its helpers are forked by the JVM's zygote; turned off, none of it. Both
write every record once, read back with psql. The unit side:
tests/test_warm_start.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from eoskit.runtime.spark import jvm_archive
from eoskit.testing.conformance.postgres import PostgresTarget

RECORDS = 3000

JOB = '''
import json, os, sys
import psutil
from pyspark.sql import SparkSession, functions as F

bootstrap, topic, url, table, checkpoint = sys.argv[1:6]
spark = SparkSession.builder.master("local[2]").appName("warm-start-plain-script") \\
    .config("spark.ui.enabled", "false").getOrCreate()
rows = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1000").load()
        .select(F.from_json(F.col("value").cast("string"), "id BIGINT, amount BIGINT, customer STRING")
                .alias("r")).select("r.*"))
query = (rows.writeStream.format("eoskit-postgres").option("url", url).option("dbtable", table)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
query.awaitTermination()
conf = spark.sparkContext.getConf()
jvm = spark.sparkContext._gateway.proc.pid
zygotes = [p.pid for p in psutil.process_iter(["cmdline"])
           if (p.info["cmdline"] or [])[1:3] == ["-m", "eoskit.runtime.spark.zygote"]
           and p.info["cmdline"][-1] == str(jvm)]
print(json.dumps({"error": str(query.exception()) if query.exception() else None,
                  "python": os.environ.get("PYSPARK_PYTHON"), "prefork": os.environ.get("EOSKIT_PREFORK"),
                  "java_options": conf.get("spark.driver.extraJavaOptions", ""),
                  "daemon": conf.get("spark.python.daemon.module", None), "zygotes": len(zygotes)}))
spark.stop()
'''


# Turned off, the hook and the wrapper do nothing (tests/test_warm_start.py,
# every tier); the whole plain script turned off runs in the full tier.
@pytest.mark.parametrize("warm", [pytest.param(True, id="warm"),
                                  pytest.param(False, id="turned-off", marks=pytest.mark.full)])
def test_a_plain_script_gets_the_warm_start_and_every_record_once(
        warm, kafka, postgres, records_topic, tmp_path):
    target = PostgresTarget(postgres)
    table = f"warm_{uuid.uuid4().hex[:10]}"
    target.create_table(table)
    topic = records_topic([{"id": i, "amount": i, "customer": f"c{i % 7}"} for i in range(RECORDS)])
    (tmp_path / "job.py").write_text(JOB)
    archive = jvm_archive.archive_path()
    assert archive is not None, "no java found for the class archive"
    made = archive.is_file()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "EOSKIT_CHOSEN_PYSPARK_PYTHON", "EOSKIT_PREFORK", "EOSKIT_WARM_START")}
    if not warm:
        # Spark's JVM then runs "python3" from PATH for its helpers, eoskit's discovery
        # among them: as from an activated venv. (Warm, the venv's wrapper is named
        # whether or not it is activated.)
        env["EOSKIT_WARM_START"] = "0"
        env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    job = subprocess.run([sys.executable, str(tmp_path / "job.py"), kafka, topic, postgres, table,
                          str(tmp_path / "checkpoint")], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert job.returncode == 0, job.stderr[-3000:]
    said = json.loads(job.stdout.strip().splitlines()[-1])
    assert said["error"] is None
    wrapper = os.path.join(os.path.dirname(sys.executable), "eoskit-spark-python")
    if warm:
        assert said["python"] == wrapper and said["prefork"] == "1"
        assert said["daemon"] == "eoskit.runtime.spark.worker_daemon"
        assert said["zygotes"] >= 2, "the JVM's helpers were not forked by its zygote"  # it and its children
        if made:  # mapped once it exists
            assert f"-XX:SharedArchiveFile={archive}" in said["java_options"]
        else:  # the first run on a machine starts its maker, in the background
            assert "SharedArchiveFile" not in said["java_options"]
            assert archive.is_file() or archive.with_name(archive.name + ".making").exists()
    else:
        assert said["python"] is None and said["prefork"] is None and said["daemon"] is None
        assert said["zygotes"] == 0 and "SharedArchiveFile" not in said["java_options"]
    assert sorted(target.rows(table)) == [(i, i) for i in range(RECORDS)]  # every record once
