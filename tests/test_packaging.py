"""The folder-to-package mapping in pyproject.toml stays complete."""

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = {v: k for k, v in config["package-dir"].items() if k}
    found = set()
    for folder, package in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]) if rel.parts else package)
    assert found == set(config["packages"])


def test_pyspark_discovery_modules_point_at_real_data_sources():
    import importlib

    from pyspark.sql.datasource import DataSource

    for name in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["py-modules"]:
        module = importlib.import_module(name)
        assert issubclass(module.DefaultSource, DataSource)
        assert module.DefaultSource.name().startswith("eoskit-")


def test_spark_helper_processes_import_the_installed_pyspark_not_the_zip():
    """Spark puts pyspark.zip first on the path of every Python process it
    starts (planners, the streaming source runner, workers); compiled from
    the zip, PySpark costs each of them more than a second. The installed
    .pth file drops the zip when the installed PySpark is the same version."""
    import os
    import subprocess
    import sys

    import pyspark

    zip_path = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    if not zip_path.is_file():
        pytest.skip(f"this PySpark has no {zip_path} (not a pip-installed PySpark)")
    result = subprocess.run(
        [sys.executable, "-c", "import pyspark, sys; print(pyspark.__file__); "
         "print(any(p.endswith('pyspark.zip') for p in sys.path))"],
        env={**os.environ, "PYTHONPATH": str(zip_path)}, capture_output=True, text=True, check=True,
    )
    module_file, zip_still_on_path = result.stdout.split()
    assert Path(module_file) == Path(pyspark.__file__)
    assert zip_still_on_path == "False"
