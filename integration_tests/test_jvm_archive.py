"""The driver JVM's class-sharing archive, made for real and mapped strictly:
a JVM started with ``-Xshare:on`` fails unless it maps the archive, so a
session that starts proves the archive whole and fitting."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from eoskit.runtime.spark import jvm_archive

STRICT_SESSION = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.extraJavaOptions", f"-XX:SharedArchiveFile={sys.argv[1]} -Xshare:on")
         .getOrCreate())
jvm = spark.sparkContext._jvm
flags = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
assert f"-XX:SharedArchiveFile={sys.argv[1]}" in flags and "-Xshare:on" in flags, flags
assert spark.range(10).selectExpr("sum(id)").collect()[0][0] == 45
spark.stop()
print("mapped")
"""


def wait_for_maker(archive: Path) -> None:
    """A maker started by this session's first get_session may be at work."""
    lock = archive.with_name(archive.name + ".making")
    deadline = time.monotonic() + jvm_archive.MAKE_TIMEOUT_S
    while lock.exists() and not archive.exists() and time.monotonic() < deadline:
        time.sleep(1)


def test_the_archive_of_this_jvm_and_spark_maps_in_the_next_driver(spark):
    """The archive the session's get_session had made in the background (or
    made now, if it was not), mapped by a driver that cannot start without it."""
    archive = jvm_archive.archive_path()
    assert archive is not None, "no java found for Spark: JAVA_HOME or PATH"
    wait_for_maker(archive)
    if not archive.exists():
        assert jvm_archive.make(archive), "the maker's spark-submit run did not finish"
    assert archive.is_file() and archive.stat().st_size > 10 << 20
    leftovers = [p.name for p in archive.parent.glob(archive.name + ".*")]
    assert leftovers == [], leftovers  # no partial file, no lock
    env = {**os.environ, jvm_archive.ENV: "0"}
    started = subprocess.run([sys.executable, "-c", STRICT_SESSION, str(archive)], env=env,
                             capture_output=True, text=True, timeout=300)
    assert started.returncode == 0 and "mapped" in started.stdout, started.stderr[-3000:]
