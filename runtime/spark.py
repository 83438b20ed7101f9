"""The SparkSession a job runs in, and what eoskit asks of it."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from eoskit.connectors.plugins import register_data_source  # noqa: F401 - re-exported
from eoskit.twophase.crash import remember_driver_process_group

#: The module Spark runs as its Python worker daemon (see eoskit.runtime.worker_daemon).
DAEMON_MODULE = "eoskit.runtime.worker_daemon"

#: Spark's loggers that report a failed task or query, each with the whole
#: Python and Java trace, once per level: the task ("Aborting task",
#: "Exception in task", "Lost task"), the write ("is aborting"), the stage
#: ("aborting job") and the query ("terminated with error").
FAILURE_LOGGERS = (
    "org.apache.spark.util.Utils",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",  # Spark >= 4.1
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",  # Spark 4.0
)


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
    conf.setdefault("spark.python.daemon.module", DAEMON_MODULE)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("EOSKIT_SPARK_LOG_LEVEL", "WARN"))
    return spark


def quiet_failure_logs(spark: SparkSession) -> None:
    """Turn off Spark's own logging of failed tasks and queries.

    For ``eoskit run`` without ``--verbose``, which reports a failure's root
    cause in one line itself: Spark would print the same trace four or five
    times before it. Other warnings stay. Does nothing where the driver's
    log4j cannot be reached.
    """
    try:
        jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
        level = jvm.org.apache.logging.log4j.Level.toLevel("OFF")
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        for name in FAILURE_LOGGERS:
            configurator.setLevel(name, level)
    except Exception:  # noqa: BLE001 - a noisier failure is no reason to fail
        pass
