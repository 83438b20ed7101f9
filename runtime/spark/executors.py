"""What eoskit asks of a cluster's executors, checked once per query start.

On a cluster, executor tasks read the decision log beside the checkpoint,
import eoskit and the job's client libraries, and run Python the driver
named. When one of these fails in the middle of a batch, Spark reports it
five levels deep, after transactions were prepared, and without saying
which node is at fault. :func:`check_executors` asks first, with one small
Spark job (a few tasks, spread over the executors registered by then) that
runs :mod:`eoskit.runtime.spark.executor_probe` on each, and raises
:class:`ExecutorCheckError` naming the node and the cause:

- the checkpoint's storage: the executor cannot open it (the fsspec
  implementation for ``s3a://``, ``gs://``, ``abfss://``, ``hdfs://`` is not
  installed there), cannot see the file the driver wrote (a local path on a
  multi-node cluster), or cannot write or read back (credentials);
- a Python or eoskit version other than the driver's, eoskit or a
  connector's client library missing, a Python executable that does not
  start.

The driver runs the same probe in its own process first. In local mode
(``local[*]``) executors are the driver's own threads: nothing is checked.
"""

from __future__ import annotations

import json
import platform
import re
import threading
import uuid
from collections.abc import Iterable
from functools import partial
from typing import Any

from eoskit.connectors.plugins import plugins
from eoskit.runtime.job.components import Formatted
from eoskit.core.fs import fs_path
from eoskit.runtime.spark.errors import messages, root_cause
from eoskit.twophase.identity import qualified_location

#: How long the check waits for executors to run it (they may still be starting).
TIMEOUT_S = 120.0
#: fsspec implementation package per scheme (Hadoop's names and fsspec's).
PACKAGES = {
    "s3": "s3fs", "s3a": "s3fs", "s3n": "s3fs", "gs": "gcsfs", "gcs": "gcsfs",
    "abfs": "adlfs", "abfss": "adlfs", "az": "adlfs",
    "hdfs": "pyarrow with libhdfs (HADOOP_HOME, JAVA_HOME and the Hadoop CLASSPATH on the node)",
}
#: Where a node's credentials for a scheme come from, for the error message.
CREDENTIALS = {
    "s3": "AWS credentials (an instance profile, ~/.aws on the node, or AWS_ACCESS_KEY_ID and "
          "AWS_SECRET_ACCESS_KEY passed to executors with spark.executorEnv.*)",
    "gs": "Google credentials (the node's service account, or GOOGLE_APPLICATION_CREDENTIALS "
          "passed to executors with spark.executorEnv.*)",
    "abfs": "Azure credentials (AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY, or "
            "AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and AZURE_TENANT_ID, passed to executors with "
            "spark.executorEnv.*)",
    "hdfs": "HDFS access (a Kerberos ticket, or HADOOP_USER_NAME)",
}
_FAMILY = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "abfss": "abfs", "az": "abfs"}
_AUTH = re.compile(r"credential|denied|forbidden|unauthori[sz]ed|authenticat|permission|"
                   r"signature|invalidaccesskey|expiredtoken", re.IGNORECASE)
# "Lost task 0.3 in stage 1.0 (TID 7) (10.0.0.5 executor 2): ..."
_LOST_TASK = re.compile(r"\(TID \d+\) \((?P<host>[^ ()]+) executor (?P<executor>[^ ()]+)\)")
_PYTHON_MISMATCH = re.compile(r"Python in worker has different version:? \(?(?P<worker>[\d., ]+)\)?"
                              r" than that in driver:? (?P<driver>[\d.]+)")
_WORKER_ERROR = re.compile(r"Error from python worker:\s*\n\s*(?P<detail>[^\n]+)")
_CANNOT_RUN = re.compile(r"Cannot run program \"(?P<program>[^\"]+)\"[^:]*: (?P<why>[^\n]+)")


class ExecutorCheckError(RuntimeError):
    """A node cannot run the job's tasks; the message names it and the cause."""


def is_local(spark: Any) -> bool:
    return str(spark.sparkContext.master).startswith("local")


def scheme_of(location: str) -> str:
    return location.split("://", 1)[0].lower() if "://" in location else "file"


def _node(report: dict[str, Any]) -> str:
    where = report.get("where") or "executor"
    return (f"{where} on host {report.get('host', '?')} (Python {report.get('executable', '?')}, "
            f"working directory {report.get('cwd', '?')})")


def _storage_hint(location: str, error: dict[str, str]) -> str:
    scheme = scheme_of(location)
    text = f"{error.get('type', '')} {error.get('message', '')}"
    if error.get("step") == "open" and ("ImportError" in text or "ModuleNotFound" in text
                                        or "Install" in text or "not known" in text):
        package = PACKAGES.get(scheme)
        return (f"; install {package} in the Python of every node (or ship it: eoskit package)"
                if package else "")
    if error.get("step") == "read" and "FileNotFound" in text:
        return ("; the checkpoint must be on storage every node shares (HDFS, an object store, a "
                "shared mount): a local path is the disk of the node that reads it")
    if _AUTH.search(text):
        credentials = CREDENTIALS.get(_FAMILY.get(scheme, scheme))
        return f"; the node needs {credentials}" if credentials else \
            "; the node's user needs the right to read and write there"
    return ""


def explain(report: dict[str, Any], driver: dict[str, Any], location: str) -> str | None:
    """What is wrong with one node's report, in one line, or None."""
    node = _node(report)
    if "eoskit_error" in report:
        error = report["eoskit_error"]
        return (f"{node} cannot import eoskit ({error['type']}: {error['message']}): install "
                "eoskit in the Python of every node, or ship the driver's environment with "
                "`eoskit package` and spark.archives (docs/deploy.md)")
    if report.get("python", "").split(".")[:2] != driver["python"].split(".")[:2]:
        return (f"{node} runs Python {report.get('python')}, the driver {driver['python']}: "
                "every node must run the driver's Python minor version")
    if report.get("eoskit") != driver["eoskit"]:
        return (f"{node} has eoskit {report.get('eoskit')}, the driver {driver['eoskit']}: "
                "install the driver's version on every node, or ship the driver's environment "
                "with `eoskit package`")
    if "module_error" in report:
        error = report["module_error"]
        return (f"{node} cannot import {error['module']} ({error['type']}: {error['message']}): "
                "install the connector's client library in the Python of every node, or ship "
                "the driver's environment with `eoskit package`")
    if "storage_error" in report:
        error = report["storage_error"]
        directory = f"{location.rstrip('/')}/eoskit"
        return (f"{node} cannot {error['step']} eoskit's metadata under {directory} "
                f"({error['type']}: {error['message']}){_storage_hint(location, error)}")
    return None


def explain_failure(error: BaseException, python: str) -> str:
    """A probe job that failed before the probe ran (Python did not start,
    or Spark refused its version), in one line naming the node."""
    texts = list(messages(error))
    lost = next((m for t in texts if (m := _LOST_TASK.search(t))), None)
    node = f"executor {lost['executor']} on host {lost['host']}" if lost else "an executor"
    for text in texts:
        mismatch = _PYTHON_MISMATCH.search(text)
        if mismatch:
            worker = ".".join(p.strip() for p in mismatch["worker"].split(",") if p.strip())
            return (f"{node} runs Python {worker}, the driver {mismatch['driver']}: every node "
                    f"must run the driver's Python minor version (PYSPARK_PYTHON={python})")
        cannot = _CANNOT_RUN.search(text)
        if cannot:
            return (f"{node} cannot start Python {cannot['program']} ({cannot['why'].strip()}): "
                    "PYSPARK_PYTHON must name a Python every node has, or one inside an "
                    "environment shipped with spark.archives (docs/deploy.md)")
        worker = _WORKER_ERROR.search(text)
        if worker:
            detail = worker["detail"].strip()
            hint = ("install eoskit in the Python of every node, or ship the driver's environment "
                    "with `eoskit package` and spark.archives (docs/deploy.md)"
                    if "No module named" in detail else "its Python worker does not start")
            return f"{node} cannot start its Python worker ({detail}): {hint}"
    return f"{node} failed the start-up check: {root_cause(error)}"


def format_of(component: Any) -> str | None:
    """The Spark format a Pipeline source or sink reads or writes, where it
    says (``runtime.components.Formatted``)."""
    return component.spark_format if isinstance(component, Formatted) else None


def connector_modules(*components: Any) -> list[str]:
    """The data source modules of eoskit's connectors among ``components``:
    importing one imports its client library."""
    formats = {format_of(c) for c in components}
    return sorted({p.data_source.partition(":")[0] for p in plugins() if p.format in formats})


def _run_probe_job(spark: Any, request: dict[str, Any], tasks: int, timeout: float) -> list[dict]:
    from pyspark import cloudpickle

    from eoskit.runtime.spark import executor_probe  # Shipped by value: executors need not have eoskit to run it.
    cloudpickle.register_pickle_by_value(executor_probe)
    sc = spark.sparkContext
    group = f"eoskit-executor-check-{uuid.uuid4().hex[:8]}"
    result: dict[str, Any] = {}

    def run() -> None:
        sc.setJobGroup(group, "eoskit: can executors run this job?", interruptOnCancel=True)
        try:
            rdd = sc.parallelize(range(tasks), tasks)
            result["reports"] = rdd.mapPartitions(partial(executor_probe.probe_partition, request)).collect()
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            result["error"] = exc

    worker = threading.Thread(target=run, name="eoskit-executor-check", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        sc.cancelJobGroup(group)
        worker.join(10)
        raise ExecutorCheckError(
            f"no executor ran eoskit's start-up check within {timeout:.0f} s: does the cluster "
            f"({sc.master}) have free cores and memory for this application?")
    if "error" in result:
        raise ExecutorCheckError(explain_failure(result["error"], sc.pythonExec)) from result["error"]
    return result["reports"]


def check_executors(spark: Any, checkpoint_location: str, modules: Iterable[str] = (),
                    timeout: float = TIMEOUT_S) -> list[dict[str, Any]]:
    """Raise :class:`ExecutorCheckError` unless the driver and the executors
    can run the job (see the module doc); the nodes' reports otherwise."""
    from eoskit.runtime.spark import executor_probe  # shipped by value (see _run_probe_job)

    if is_local(spark):
        return []
    location = qualified_location(checkpoint_location)
    directory = fs_path(location).rstrip("/") + f"/{executor_probe.PROBE_DIR}/{uuid.uuid4().hex[:12]}"
    request = {"directory": directory, "token": uuid.uuid4().hex, "modules": sorted(set(modules))}
    driver = {**executor_probe.identity(), "where": "the driver", "python": platform.python_version(),
              "eoskit": executor_probe._eoskit_version()}
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(directory)
        fs.makedirs(root, exist_ok=True)
        fs.pipe_file(f"{root}/{executor_probe.DRIVER_FILE}", json.dumps({"token": request["token"]}).encode())
    except Exception as exc:  # noqa: BLE001 - told with the node-side hint
        error = {"step": "open" if isinstance(exc, (ImportError, ValueError)) else "write",
                 "type": type(exc).__name__, "message": str(exc).splitlines()[0] if str(exc) else ""}
        raise ExecutorCheckError(explain({**driver, "storage_error": error}, driver, location)) from exc
    try:
        mine = executor_probe.probe(request)
        problem = explain({**mine, "where": "the driver"}, driver, location)
        if problem:
            raise ExecutorCheckError(problem)
        tasks = max(2, 2 * spark.sparkContext.defaultParallelism)
        reports = _run_probe_job(spark, request, tasks, timeout)
        for report in reports:
            problem = explain(report, driver, location)
            if problem:
                raise ExecutorCheckError(problem)
        # What executors wrote, the driver must see too (the same storage both ways).
        for report in reports:
            if not fs.exists(report["wrote"]):
                raise ExecutorCheckError(
                    f"the driver does not see {report['wrote']}, which the {_node(report)} wrote: "
                    "the checkpoint must be on storage every node shares (HDFS, an object store, "
                    "a shared mount)")
        return reports
    finally:
        try:
            fs.rm(root, recursive=True)
        except Exception:  # noqa: BLE001 - a leftover probe folder harms nothing
            pass
