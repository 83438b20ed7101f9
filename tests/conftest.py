"""The unit tier runs without Spark's JVM."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_reported: list[str] = []


@pytest.fixture(autouse=True)
def _no_jvm(request: pytest.FixtureRequest):
    """A unit test that starts Spark fails, naming itself: a unit test should
    not need a JVM, and the session it leaves behind would be the one the
    integration tests' ``getOrCreate`` hands back, without their settings
    (Spark's Kafka connector among them)."""
    yield
    context = sys.modules.get("pyspark.core.context") or sys.modules.get("pyspark.context")
    if context is not None and context.SparkContext._gateway is not None and not _reported:
        _reported.append(request.node.nodeid)
        pytest.fail(f"{request.node.nodeid} started Spark's JVM: a unit test must not "
                    "(check its arguments before the session, or move it to integration_tests)")


#: What pip writes as the ``eoskit-spark-python`` console script.
_SPARK_PYTHON_SCRIPT = """import re
import sys
from eoskit.runtime.spark.python import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""


@pytest.fixture
def spark_python(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command that starts ``eoskit-spark-python``, as pip installs it,
    in a folder of its own (wherever this eoskit is installed, the tests
    run its module): the interpreter and the console script. The script
    runs by itself too (its first line names the interpreter), as Spark
    runs it."""
    folder = tmp_path_factory.mktemp("bin")
    script = folder / "eoskit-spark-python"
    script.write_text(f"#!{sys.executable}\n{_SPARK_PYTHON_SCRIPT}")
    script.chmod(0o755)
    return [sys.executable, str(script)]


@pytest.fixture
def interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for this interpreter in a venv's bin, with the wrapper beside it."""
    from eoskit.runtime.spark import session as spark

    folder = tmp_path / "venv" / "bin"
    folder.mkdir(parents=True)
    for name in ("python", "eoskit-spark-python"):
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    monkeypatch.setattr(spark.sys, "executable", str(folder / "python"))
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv(spark.CHOSEN_ENV, raising=False)
    return folder
