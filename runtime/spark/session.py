"""The SparkSession a job runs in, and what eoskit asks of it."""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark import SparkConf
from pyspark.sql import SparkSession

from eoskit.connectors.plugins import register_data_source  # noqa: F401 - re-exported
from eoskit.runtime.spark import jvm_archive
from eoskit.runtime.spark.daemon import DAEMON_MODULE
from eoskit.runtime.spark.python import NAME as SPARK_PYTHON
from eoskit.runtime.spark.zygote import ENV as ZYGOTE_ENV
from eoskit.core.crash import remember_driver_process_group

#: The ``PYSPARK_PYTHON`` that :func:`choose_pyspark_python` set, not the user.
CHOSEN_ENV = "EOSKIT_CHOSEN_PYSPARK_PYTHON"

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
    """The active session, or a new one: ``local[*]`` unless a master is given
    (``spark.master`` in ``conf``, ``MASTER``, ``EOSKIT_SPARK_MASTER``, or
    spark-submit's ``--master``).

    Python workers run the interpreter that runs the job, so that executors
    import the same eoskit and client libraries (Spark's default is whatever
    ``python3`` is on PATH, which outside an activated venv is another one),
    unless ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` names another: e.g.
    ``./environment/bin/python`` inside an environment shipped with
    ``spark.archives`` (``link_shipped_environment``). In local mode that
    interpreter is named through its ``eoskit-spark-python`` wrapper
    (:func:`choose_pyspark_python`).
    """
    conf = dict(conf or {})
    # Under spark-submit (which starts this process with a gateway to its
    # JVM) the master is spark-submit's --master: no default overrides it.
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    if "spark.master" not in conf and not os.environ.get("MASTER") and not submitted:
        conf.setdefault("spark.master", os.environ.get("EOSKIT_SPARK_MASTER", "local[*]"))
    if conf.get("spark.pyspark.python"):
        os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
        os.environ.pop(CHOSEN_ENV, None)
    else:
        # spark-submit's master is not known here, nor can its JVM's
        # environment change: a plain interpreter, as before.
        choose_pyspark_python(None if submitted else conf.get("spark.master") or os.environ.get("MASTER"))
    # The JVM's Python helpers forked warm (eoskit.runtime.spark.zygote); the JVM
    # inherits this environment. EOSKIT_PREFORK=0 turns it off.
    os.environ.setdefault(ZYGOTE_ENV, "1")
    remember_driver_process_group()
    builder = SparkSession.builder.appName(app_name)
    conf.setdefault("spark.ui.showConsoleProgress", "false")
    if not submitted and SparkSession.getActiveSession() is None:
        # The JVM eoskit is about to start maps its classes from an archive
        # (made once, in the background): see eoskit.runtime.spark.jvm_archive.
        jvm_archive.use_or_make(conf)
    # Warm Python workers (see eoskit.runtime.spark.daemon).
    conf.setdefault("spark.python.daemon.module", DAEMON_MODULE)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("EOSKIT_SPARK_LOG_LEVEL", "WARN"))
    link_shipped_environment(spark)
    return spark


def prepare_local_launch(conf: SparkConf) -> bool:
    """For a JVM about to be launched for a local master, what
    :func:`get_session` does before it launches one, on ``conf`` (PySpark's
    ``SparkConf`` of the launch) and this process's environment; for any
    other master nothing. Returns whether it acted.

    Called by the startup hook (``eoskit_warm_start``) from PySpark's
    ``launch_gateway``, so that a user's own ``SparkSession.builder``
    script gets the warm start too (issue 33). Each step keeps what the user
    set, and what ``get_session`` set already:

    1. ``PYSPARK_PYTHON``: ``eoskit-spark-python`` unless the user named a
       Python (:func:`choose_pyspark_python`; ``spark.pyspark.python`` in
       ``conf`` counts as named);
    2. ``EOSKIT_PREFORK=1`` unless set: the helpers handed to the zygote;
    3. the class archive in ``spark.driver.extraJavaOptions``, unless one
       is there already (``jvm_archive.use_or_make``: made in the
       background the first time);
    4. ``spark.python.daemon.module``: eoskit's worker daemon, unless set.
    """
    master = launch_master(conf)
    if not is_local_master(master):
        return False
    if not conf.get("spark.pyspark.python"):
        choose_pyspark_python(master)
    os.environ.setdefault(ZYGOTE_ENV, "1")
    options = conf.get("spark.driver.extraJavaOptions")
    if "-XX:SharedArchiveFile" not in (options or ""):
        given = dict(conf.getAll())
        jvm_archive.use_or_make(given)
        if given.get("spark.driver.extraJavaOptions") != options:
            conf.set("spark.driver.extraJavaOptions", given["spark.driver.extraJavaOptions"])
    conf.setIfMissing("spark.python.daemon.module", DAEMON_MODULE)
    return True


def launch_master(conf: SparkConf) -> str:
    """The master ``spark-submit`` will give the JVM PySpark launches with
    ``conf``: ``--master`` in ``PYSPARK_SUBMIT_ARGS``, else ``spark.master``
    (``conf``, then ``spark-defaults.conf``), else ``MASTER``, else
    Spark's default, ``local[*]``."""
    args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", ""))
    given = [v for k, v in zip(args, args[1:]) if k == "--master"]
    given += [a.partition("=")[2] for a in args if a.startswith("--master=")]
    return (given[-1] if given else None) or conf.get("spark.master") \
        or jvm_archive.spark_defaults().get("spark.master") or os.environ.get("MASTER") or "local[*]"


def is_local_master(master: str | None) -> bool:
    """``local`` or ``local[...]``: the driver's JVM runs the tasks, and every
    Python process Spark starts inherits the driver's environment."""
    return master is not None and (master == "local" or master.startswith("local["))


def spark_python_wrapper() -> str | None:
    """``eoskit-spark-python`` installed beside this interpreter (a venv's
    ``bin``, where pip puts the console scripts of the interpreter it
    installs for), or None."""
    if not sys.executable:
        return None
    folder = Path(sys.executable).parent
    wrapper = folder / SPARK_PYTHON
    if wrapper.is_file() and os.access(wrapper, os.X_OK):
        return str(wrapper)
    return shutil.which(SPARK_PYTHON, path=str(folder))  # e.g. with an .exe suffix


def choose_pyspark_python(master: str | None) -> str:
    """Set ``PYSPARK_PYTHON`` for a new session unless the user named one,
    and return it.

    - Local master: ``eoskit-spark-python`` beside this interpreter
      (:mod:`eoskit.runtime.spark.python`), so that the Python processes
      Spark starts for the session (planners, the source runner, the task
      workers' daemon) import the installed PySpark rather than Spark's
      zip and are handed to the warm zygote (``EOSKIT_PREFORK``); and no
      other interpreter of the environment runs any of it. Without the
      wrapper (eoskit installed elsewhere than this interpreter's
      folder) this interpreter: the helpers start cold.
    - Any other master (a cluster; or unknown, under spark-submit): this
      interpreter, as before: the zygote is for local mode, and executors
      keep eoskit's worker daemon (``spark.python.daemon.module``).

    The value chosen is recorded in ``EOSKIT_CHOSEN_PYSPARK_PYTHON``, so
    that a later session of this process (or of a child that inherits the
    environment) chooses again for its own master instead of taking the
    last choice for the user's: a wrapper chosen for a local session does
    not reach a cluster's executors. A ``PYSPARK_PYTHON`` that differs from
    the record is the user's and stays as it is. (One limit: Spark's JVM
    names the Python of the data sources it discovers by itself, eoskit's
    formats among them, from its own environment, fixed when PySpark
    launched it; a later session of the same process reuses that JVM.)
    """
    current = os.environ.get("PYSPARK_PYTHON")
    if current and current != os.environ.get(CHOSEN_ENV):
        os.environ.pop(CHOSEN_ENV, None)
        return current
    chosen = (spark_python_wrapper() if is_local_master(master) else None) or sys.executable
    os.environ["PYSPARK_PYTHON"] = chosen
    os.environ[CHOSEN_ENV] = chosen
    return chosen


def archive_aliases(archives: str) -> set[str]:
    """The names ``spark.archives`` unpacks its archives under
    (``env.tar.gz#environment`` -> ``environment``; no ``#``: the file name)."""
    out = set()
    for entry in filter(None, (a.strip() for a in archives.split(","))):
        path, _, alias = entry.partition("#")
        out.add(alias or path.rstrip("/").rsplit("/", 1)[-1])
    return out


def link_shipped_environment(spark: SparkSession, cwd: str | os.PathLike[str] | None = None) -> Path | None:
    """Make a shipped environment's Python run on the driver too, in client mode.

    Spark's Python package management ships an environment to executors
    (``spark.archives=env.tar.gz#environment``) and names its Python
    relative to their working directory (``PYSPARK_PYTHON=./environment/bin/python``).
    Executors unpack the archive there, and so does the driver in YARN and
    Kubernetes cluster mode; a client-mode driver does not, yet eoskit's data
    sources run Python on the driver too (planning each micro-batch,
    committing it), with that same relative path. The driver runs in the
    environment that was packed, so ``./environment`` in its working
    directory becomes a symlink to it (``sys.prefix``), removed at exit.
    Nothing is done when the path already resolves, is absolute, or names no
    shipped archive. Returns the link made, if any.
    """
    python = os.environ.get("PYSPARK_PYTHON", "")
    if not python or os.path.isabs(python):
        return None
    first, _, rest = os.path.normpath(python).partition(os.sep)
    if not rest or first not in archive_aliases(spark.conf.get("spark.archives", "") or ""):
        return None
    base = Path(cwd or os.getcwd())
    link = base / first
    if link.exists() or link.is_symlink() or not (Path(sys.prefix) / rest).exists():
        return None
    try:
        link.symlink_to(sys.prefix, target_is_directory=True)
    except OSError:
        return None  # a read-only working directory: the first Python task will say so
    target = os.readlink(link)

    def remove() -> None:
        if link.is_symlink() and os.readlink(link) == target:
            link.unlink()

    atexit.register(remove)
    return link


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
