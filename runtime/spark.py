"""The SparkSession a job runs in."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from eoskit.twophase.crash import remember_driver_process_group


def get_session(app_name: str, conf: Mapping[str, str] | None = None) -> SparkSession:
    """The active session, or a new one: ``local[*]`` unless a master is given.

    Python workers run the interpreter that runs the job, so that executors
    import the same eoskit and client libraries (Spark's default is whatever
    ``python3`` is on PATH, which outside an activated venv is another one).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    remember_driver_process_group()
    builder = SparkSession.builder.appName(app_name)
    conf = dict(conf or {})
    if "spark.master" not in conf and not os.environ.get("MASTER"):
        conf.setdefault("spark.master", os.environ.get("EOSKIT_SPARK_MASTER", "local[*]"))
    conf.setdefault("spark.ui.showConsoleProgress", "false")
    # Warm Python workers (see eoskit.runtime.spark_daemon).
    conf.setdefault("spark.python.daemon.module", "eoskit.runtime.spark_daemon")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("EOSKIT_SPARK_LOG_LEVEL", "WARN"))
    return spark
