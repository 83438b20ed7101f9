"""The warm start for a user's own script (issue 33, item 6): the startup
hook (``eoskit_warm_start``, run by ``eoskit-warm-start.pth``) and what it
calls before PySpark launches a JVM (``session.prepare_local_launch``).
A real plain script's session: integration_tests/test_warm_start.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark import SparkConf

import eoskit_warm_start
from eoskit.runtime.spark import jvm_archive
from eoskit.runtime.spark import session as spark_session
from eoskit.runtime.spark.daemon import DAEMON_MODULE


@pytest.fixture
def local_env(interpreter, tmp_path, monkeypatch) -> Path:
    """No Python named, no master in the environment, an archive of our own
    already made, and a stand-in interpreter with the wrapper beside it
    (``interpreter``, tests/conftest.py); returns the archive."""
    for name in ("EOSKIT_PREFORK", "MASTER", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR",
                 "PYSPARK_GATEWAY_PORT", eoskit_warm_start.ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(jvm_archive.DIR_ENV, str(tmp_path / "archives"))
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "no-spark-home"))  # no spark-defaults.conf
    archive = jvm_archive.archive_path()
    assert archive is not None
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"made")
    return archive


def conf_of(**given: str) -> SparkConf:
    conf = SparkConf(loadDefaults=False)
    for key, value in given.items():
        conf.set(key.replace("_", "."), value)
    return conf


def test_a_local_launch_gets_what_get_session_gives(local_env, tmp_path):
    conf = conf_of(spark_master="local[2]", spark_driver_extraJavaOptions="-Xmx1g")
    assert spark_session.prepare_local_launch(conf)
    assert os.environ["PYSPARK_PYTHON"] == str(tmp_path / "venv" / "bin" / "eoskit-spark-python")
    assert os.environ["EOSKIT_PREFORK"] == "1"
    assert conf.get("spark.driver.extraJavaOptions").startswith(f"-Xmx1g -XX:SharedArchiveFile={local_env}")
    assert conf.get("spark.python.daemon.module") == DAEMON_MODULE


def test_a_second_preparation_adds_nothing(local_env):
    conf = conf_of(spark_master="local[*]")
    spark_session.prepare_local_launch(conf)
    first = dict(conf.getAll())
    assert spark_session.prepare_local_launch(conf)
    assert dict(conf.getAll()) == first
    assert first["spark.driver.extraJavaOptions"].count("-XX:SharedArchiveFile") == 1


def test_what_the_user_set_stays(local_env, monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")
    monkeypatch.setenv("EOSKIT_PREFORK", "0")
    conf = conf_of(spark_master="local[2]", spark_python_daemon_module="my.daemon")
    assert spark_session.prepare_local_launch(conf)
    assert os.environ["PYSPARK_PYTHON"] == "/usr/bin/python3" and os.environ["EOSKIT_PREFORK"] == "0"
    assert conf.get("spark.python.daemon.module") == "my.daemon"
    monkeypatch.delenv("PYSPARK_PYTHON")
    named = conf_of(spark_master="local[2]", spark_pyspark_python="/opt/py/bin/python")
    spark_session.prepare_local_launch(named)
    assert "PYSPARK_PYTHON" not in os.environ  # the conf's own Python is the user's


@pytest.mark.parametrize("master", ["spark://host:7077", "yarn", "k8s://https://host:6443",
                                    "local-cluster[2,1,1024]"])
def test_any_other_master_is_left_as_the_user_made_it(local_env, master):
    conf = conf_of(spark_master=master)
    assert not spark_session.prepare_local_launch(conf)
    assert dict(conf.getAll()) == {"spark.master": master}
    assert "PYSPARK_PYTHON" not in os.environ and "EOSKIT_PREFORK" not in os.environ


def test_the_master_is_the_one_spark_submit_will_use(local_env, tmp_path, monkeypatch):
    conf = conf_of()
    assert spark_session.launch_master(conf) == "local[*]"  # Spark's own default
    monkeypatch.setenv("MASTER", "spark://from-env:7077")
    assert spark_session.launch_master(conf) == "spark://from-env:7077"
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text(
        "# a comment\nspark.master   yarn\nspark.executor.memory 2g\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    assert spark_session.launch_master(conf) == "yarn"
    conf.set("spark.master", "local[3]")
    assert spark_session.launch_master(conf) == "local[3]"
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--master spark://args:7077 pyspark-shell")
    assert spark_session.launch_master(conf) == "spark://args:7077"


# -- the hook ------------------------------------------------------------------------------

def test_the_wrapper_prepares_then_launches(local_env):
    launched: list[SparkConf] = []
    launch = eoskit_warm_start.wrap(lambda conf, popen_kwargs: launched.append(conf) or "gateway")
    conf = conf_of(spark_master="local[2]")
    assert launch(conf) == "gateway" and launched == [conf]
    assert conf.get("spark.python.daemon.module") == DAEMON_MODULE


@pytest.mark.parametrize("setting", [("PYSPARK_GATEWAY_PORT", "41234"), (eoskit_warm_start.ENV, "0"),
                                     (eoskit_warm_start.ENV, "off")])
def test_under_spark_submit_or_turned_off_the_wrapper_only_launches(local_env, monkeypatch, setting):
    monkeypatch.setenv(*setting)
    launched: list[SparkConf] = []
    conf = conf_of(spark_master="local[2]")
    eoskit_warm_start.wrap(lambda c, _: launched.append(c))(conf)
    assert launched == [conf] and dict(conf.getAll()) == {"spark.master": "local[2]"}
    assert "PYSPARK_PYTHON" not in os.environ


def test_a_failed_preparation_says_so_in_one_line_and_launches_anyway(local_env, monkeypatch, capsys):
    def fail(conf: SparkConf) -> bool:
        raise OSError("archive folder is read-only")

    monkeypatch.setattr(spark_session, "prepare_local_launch", fail)
    launched: list[SparkConf] = []
    eoskit_warm_start.wrap(lambda c, _: launched.append(c))(conf_of(spark_master="local[2]"))
    assert len(launched) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warm start skipped: OSError: archive folder is read-only" in err
    assert "EOSKIT_WARM_START=0" in err


def run_plain(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != eoskit_warm_start.ENV}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_the_installed_hook_wraps_pyspark_s_launch_and_leaves_the_path():
    """Through the installed ``.pth``, in a plain interpreter: the finder is
    first on the meta path, loads nothing but its own module, and once
    ``pyspark.core.context`` is imported its ``launch_gateway`` is the
    wrapper, and the finder is gone."""
    out = run_plain(
        "import sys\n"
        "print([type(f).__name__ for f in sys.meta_path][0])\n"
        "print(sorted(m for m in sys.modules if 'eoskit' in m))\n"
        "from pyspark.core import context\n"
        "print(context.launch_gateway.__module__, context.launch_gateway.__wrapped__.__module__)\n"
        "print(any(type(f).__name__ == 'GatewayFinder' for f in sys.meta_path))\n")
    assert out.split("\n") == ["GatewayFinder", "['eoskit_warm_start']",
                               "eoskit_warm_start pyspark.java_gateway", "False"]


def test_pyspark_from_its_zip_is_wrapped_and_its_other_modules_untouched(tmp_path):
    """PySpark from ``pyspark.zip``, as under ``spark-submit``: one
    ``zipimporter`` loads every module of the zip, and only the gateway
    module's ``launch_gateway`` is wrapped (a patch on the shared loader
    once reached ``pyspark.find_spark_home`` and broke every
    ``spark-submit``)."""
    import pyspark

    zip_path = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    out = run_plain("from pyspark.core import context\n"
                    "import pyspark.java_gateway as g, pyspark.find_spark_home as h\n"
                    "print(g.__file__.split('pyspark.zip')[0] != g.__file__, type(g.__loader__).__name__)\n"
                    "print(context.launch_gateway.__module__, callable(h._find_spark_home))\n",
                    PYTHONPATH=str(zip_path))
    assert out.split("\n") == ["True WrappingLoader", "eoskit_warm_start True"]


def test_turned_off_the_hook_installs_nothing():
    out = run_plain("import sys\nfrom pyspark.core import context\n"
                    "print(context.launch_gateway.__module__, "
                    "any(type(f).__name__ == 'GatewayFinder' for f in sys.meta_path))",
                    **{eoskit_warm_start.ENV: "0"})
    assert out == "pyspark.java_gateway False"


def test_the_hook_ships_as_one_line_that_imports_the_top_level_module():
    import site

    found = [p for folder in site.getsitepackages() for p in Path(folder).glob("*.pth")
             if "eoskit" in p.read_text(errors="replace")]
    assert [p.name for p in found] == ["eoskit-warm-start.pth"]
    assert found[0].read_text() == "import eoskit_warm_start; eoskit_warm_start.install()\n"
