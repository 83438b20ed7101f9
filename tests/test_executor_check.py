"""The start-up check of executors (``eoskit.runtime.spark.executors``): the probe
run in this process, and the one-line errors it turns reports and Spark
failures into. The check on a real cluster is in integration_tests/test_cluster.py."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

from eoskit.runtime.spark import executor_probe
from eoskit.runtime.spark.executors import connector_modules, explain, explain_failure, format_of

DRIVER = {"python": platform.python_version(), "eoskit": "0.1.0", "host": "driver-host"}
NODE = {"host": "node-7", "pid": 42, "cwd": "/work/app-1/3", "executable": "/opt/py/bin/python",
        "python": platform.python_version(), "eoskit": "0.1.0"}


def _request(directory: Path, token: str = "t0k3n", modules=()) -> dict:
    return {"directory": str(directory), "token": token, "modules": list(modules)}


def test_probe_reads_the_drivers_file_and_writes_its_own(tmp_path: Path):
    (tmp_path / executor_probe.DRIVER_FILE).write_text(json.dumps({"token": "t0k3n"}))
    report = executor_probe.probe(_request(tmp_path, modules=["json"]))
    assert report["executable"] == sys.executable and report["eoskit"]
    assert "storage_error" not in report and "module_error" not in report, report
    assert json.loads(Path(report["wrote"]).read_text())["token"] == "t0k3n"


def test_probe_reports_what_it_cannot_do(tmp_path: Path):
    # The driver's file is not there: a node that does not share the storage.
    report = executor_probe.probe(_request(tmp_path))
    assert report["storage_error"]["step"] == "read" and "FileNotFound" in report["storage_error"]["type"]
    message = explain(report, DRIVER, "/data/ckpt")
    assert "on host" in message and "cannot read eoskit's metadata under /data/ckpt/eoskit" in message
    assert "storage every node shares" in message
    # A client library that is not installed.
    (tmp_path / executor_probe.DRIVER_FILE).write_text(json.dumps({"token": "t0k3n"}))
    report = executor_probe.probe(_request(tmp_path, modules=["no_such_client_lib"]))
    message = explain(report, DRIVER, "/data/ckpt")
    assert "cannot import no_such_client_lib" in message and "eoskit package" in message


def test_explain_names_the_node_and_the_cause():
    assert explain(NODE, DRIVER, "/ckpt") is None
    missing = explain({**NODE, "eoskit_error": {"type": "ModuleNotFoundError",
                                                "message": "No module named 'eoskit'"}}, DRIVER, "/c")
    assert missing.startswith("executor on host node-7 (Python /opt/py/bin/python, working directory /work/app-1/3)")
    assert "cannot import eoskit" in missing and "eoskit package" in missing
    assert "runs Python 2.7.18, the driver" in explain({**NODE, "python": "2.7.18"}, DRIVER, "/c")
    assert "has eoskit 0.0.9, the driver 0.1.0" in explain({**NODE, "eoskit": "0.0.9"}, DRIVER, "/c")


def test_object_store_errors_name_the_package_or_the_credentials():
    no_s3fs = {**NODE, "storage_error": {"step": "open", "type": "ImportError",
                                         "message": "Install s3fs to access S3"}}
    message = explain(no_s3fs, DRIVER, "s3a://bucket/ckpt")
    assert "cannot open eoskit's metadata under s3a://bucket/ckpt/eoskit" in message
    assert "install s3fs in the Python of every node" in message
    assert "install gcsfs" in explain(no_s3fs, DRIVER, "gs://b/c")
    assert "install adlfs" in explain(no_s3fs, DRIVER, "abfss://c@a.dfs.core.windows.net/x")
    assert "libhdfs" in explain(no_s3fs, DRIVER, "hdfs://nn/x")
    denied = {**NODE, "storage_error": {"step": "write", "type": "PermissionError",
                                        "message": "Access Denied"}}
    assert "AWS credentials" in explain(denied, DRIVER, "s3a://bucket/ckpt")
    assert "Google credentials" in explain(denied, DRIVER, "gs://b/c")
    assert "Azure credentials" in explain(denied, DRIVER, "abfss://c@a.dfs.core.windows.net/x")
    assert "Kerberos" in explain(denied, DRIVER, "hdfs://nn/x")


def _spark_error(text: str) -> Exception:
    return RuntimeError("An error occurred while calling z:PythonRDD.collectAndServe.\n: "
                        "org.apache.spark.SparkException: Job aborted due to stage failure: Task 2 "
                        "in stage 0.0 failed 4 times, most recent failure: Lost task 2.3 in stage "
                        f"0.0 (TID 8) (10.0.0.5 executor 1): {text}")


def test_failures_before_the_probe_ran_name_the_executor():
    no_eoskit = _spark_error("org.apache.spark.SparkException: \nError from python worker:\n  "
                             "/usr/bin/python3: Error while finding module specification for "
                             "'eoskit.runtime.spark.worker_daemon' (ModuleNotFoundError: No module named 'eoskit')\n"
                             "PYTHONPATH was:\n  /spark/python/lib/pyspark.zip")
    message = explain_failure(no_eoskit, "python3")
    assert message.startswith("executor 1 on host 10.0.0.5 cannot start its Python worker")
    assert "No module named 'eoskit'" in message and "eoskit package" in message
    no_python = _spark_error('java.io.IOException: Cannot run program "./environment/bin/python": '
                             "error=2, No such file or directory")
    message = explain_failure(no_python, "./environment/bin/python")
    assert "executor 1 on host 10.0.0.5 cannot start Python ./environment/bin/python" in message
    other = _spark_error("org.apache.spark.api.python.PythonException: [PYTHON_VERSION_MISMATCH] "
                         "Python in worker has different version: 3.10 than that in driver: 3.11, "
                         "PySpark cannot run with different minor versions.")
    assert "executor 1 on host 10.0.0.5 runs Python 3.10, the driver 3.11" in explain_failure(other, "python3")


def test_connector_modules_of_pipeline_components():
    from eoskit.connectors.kafka import KafkaSource
    from eoskit.connectors.spark_sinks import SparkSink

    source = KafkaSource("127.0.0.1:9092", {"subscribe": "t"})
    sink = SparkSink("eoskit-postgres", {})
    assert (format_of(source), format_of(sink), format_of(object())) == ("eoskit-kafka", "eoskit-postgres", None)
    modules = connector_modules(source, sink, SparkSink("memory"))
    assert "eoskit.connectors.postgres.datasource" in modules
    assert all(m.startswith("eoskit.connectors.") for m in modules) and len(modules) == 2


def test_a_component_says_its_format_through_the_typed_protocol():
    """runtime.components.Formatted: spark_format and all_options(), or nothing
    (no probing for other attribute names such as ``format``)."""
    from eoskit.connectors.kafka.pipeline_source import KafkaSource
    from eoskit.runtime.job.components import Formatted, Pausable
    from eoskit.runtime.job.fingerprint import component

    class Users:
        spark_format = "delta"

        def all_options(self) -> dict[str, str]:
            return {"path": "/t"}

    class Bare:
        format = "delta"  # not the protocol: not read

    source = KafkaSource("127.0.0.1:9092", {"subscribe": "orders"})
    assert isinstance(Users(), Formatted) and not isinstance(Bare(), Formatted)
    assert (format_of(Users()), format_of(Bare())) == ("delta", None)
    assert component(Users()) == ("delta", {"path": "/t"}) and component(Bare()) is None
    assert isinstance(source, Pausable) and not isinstance(Users(), Pausable)
