"""``eoskit-spark-python``, the Python eoskit's local sessions give Spark
(``PYSPARK_PYTHON``): ``-m MODULE ARGS...`` runs the module as ``python -m``
does, anything else is the plain interpreter; and how ``get_session``
chooses it. The ``spark_python`` fixture (tests/conftest.py) is the console
script as pip writes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPORT = textwrap.dedent('''
    import json, os, sys
    print(json.dumps({"name": __name__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
                      "main": sys.modules["__main__"].__dict__ is globals(),
                      "spec": __spec__.name if __spec__ else None,
                      "zip": any(p.endswith("pyspark.zip") for p in sys.path)}))
''')


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "EOSKIT_PREFORK"}
    return subprocess.run(command, cwd=cwd, env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A working directory with a module and a package of its own."""
    (tmp_path / "mymod.py").write_text(REPORT)
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "__main__.py").write_text(REPORT)
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(int(sys.argv[1]) if sys.argv[1].isdigit() else sys.argv[1])\n")
    (tmp_path / "fails.py").write_text("raise ValueError('a failure of the module')\n")
    return tmp_path


@pytest.mark.parametrize("module", ["mymod", "mypkg"])
def test_dash_m_runs_the_module_as_python_dash_m_does(spark_python, work, module):
    wrapped = run([*spark_python, "-m", module, "a", "b"], work)
    plain = run([sys.executable, "-m", module, "a", "b"], work)
    assert wrapped.returncode == 0, wrapped.stderr
    assert wrapped.stderr == "", wrapped.stderr  # no runpy warning, nothing of the wrapper's
    report = json.loads(wrapped.stdout)
    assert report == json.loads(plain.stdout)
    assert report["name"] == "__main__" and report["main"]
    assert report["spec"] == ("mypkg.__main__" if module == "mypkg" else "mymod")
    assert report["argv"][1:] == ["a", "b"] and Path(report["argv"][0]).parent in (work, work / "mypkg")
    # The working directory first on the path, absolute; not the script's folder.
    assert Path(report["path0"]) == work and os.path.isabs(report["path0"])


def test_the_module_s_exit_code_is_the_process_s(spark_python, work):
    assert run([*spark_python, "-m", "exits", "0"], work).returncode == 0
    assert run([*spark_python, "-m", "exits", "3"], work).returncode == 3
    said = run([*spark_python, "-m", "exits", "a message"], work)
    assert said.returncode == 1 and said.stderr.strip() == "a message"
    failed = run([*spark_python, "-m", "fails"], work)
    assert failed.returncode == 1
    assert failed.stderr.rstrip().endswith("ValueError: a failure of the module"), failed.stderr


def test_anything_but_dash_m_is_the_plain_interpreter(spark_python, work):
    code = "import sys; print(sys.argv, sorted(m for m in sys.modules if m.startswith('eoskit.runtime.spark_')))"
    done = run([*spark_python, "-c", code, "x"], work)
    assert done.returncode == 0, done.stderr
    # The interpreter itself took over: none of the wrapper's modules is loaded.
    assert done.stdout.strip() == "['-c', 'x'] []"
    assert run([*spark_python, "-c", "raise SystemExit(4)"], work).returncode == 4
    script = run([*spark_python, str(work / "exits.py"), "5"], work)
    assert script.returncode == 5
    # Python's own answers to a bad command line.
    for args in (["-m"], ["-m", "no_such_module_here"]):
        wrapped, plain = run([*spark_python, *args], work), run([sys.executable, *args], work)
        assert wrapped.returncode == plain.returncode != 0, (args, wrapped.stderr)


def test_spark_s_zip_is_dropped_for_the_installed_pyspark(spark_python, work):
    """Spark puts pyspark.zip first on the path of every Python process it
    starts (planners, the streaming source runner, workers); compiled from
    the zip, PySpark costs each of them more than a second. The wrapper
    drops the zip when the installed PySpark is the same version."""
    import pyspark

    zip_path = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    if not zip_path.is_file():
        pytest.skip(f"this PySpark has no {zip_path} (not a pip-installed PySpark)")
    (work / "where.py").write_text("import pyspark, sys\nprint(pyspark.__file__)\n"
                                   "print(any(p.endswith('pyspark.zip') for p in sys.path))\n")
    env = {"PYTHONPATH": os.pathsep.join([str(zip_path), os.environ.get("PYTHONPATH", "")])}
    done = run([*spark_python, "-m", "where"], work, env)
    assert done.returncode == 0, done.stderr
    module_file, zip_still_on_path = done.stdout.split()
    assert Path(module_file) == Path(pyspark.__file__)
    assert zip_still_on_path == "False"


# -- how get_session chooses PYSPARK_PYTHON ---------------------------------------------

def test_a_local_session_runs_spark_s_python_through_the_wrapper(interpreter):
    from eoskit.runtime.spark.session import choose_pyspark_python

    wrapper = str(interpreter / "eoskit-spark-python")
    for master in ("local", "local[*]", "local[2,3]"):
        assert choose_pyspark_python(master) == wrapper == os.environ["PYSPARK_PYTHON"]


def test_a_cluster_or_an_unknown_master_gets_the_interpreter(interpreter):
    from eoskit.runtime.spark.session import choose_pyspark_python

    for master in ("spark://host:7077", "yarn", "k8s://https://host", "local-cluster[2,1,1024]", None):
        assert choose_pyspark_python(master) == str(interpreter / "python") == os.environ["PYSPARK_PYTHON"]


def test_a_later_session_chooses_again_and_the_user_s_choice_stays(interpreter, monkeypatch):
    from eoskit.runtime.spark.session import CHOSEN_ENV, choose_pyspark_python

    wrapper, python = str(interpreter / "eoskit-spark-python"), str(interpreter / "python")
    assert choose_pyspark_python("local[2]") == wrapper
    # The same process (or a child with its environment) then on a cluster: not the wrapper.
    assert choose_pyspark_python("spark://host:7077") == python
    assert choose_pyspark_python("local[2]") == wrapper
    # The user's own, even after eoskit chose one.
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")
    assert choose_pyspark_python("local[2]") == "/usr/bin/python3" == os.environ["PYSPARK_PYTHON"]
    assert CHOSEN_ENV not in os.environ
    assert choose_pyspark_python("spark://host:7077") == "/usr/bin/python3"


def test_without_the_wrapper_beside_the_interpreter_the_helpers_start_cold(interpreter):
    from eoskit.runtime.spark.session import choose_pyspark_python

    (interpreter / "eoskit-spark-python").unlink()
    assert choose_pyspark_python("local[*]") == str(interpreter / "python")
