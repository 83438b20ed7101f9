"""What setup.py derives from the tree is installed: every package, the
pyspark_* discovery modules, and the eoskit.plugins registry."""

import importlib
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
FOLDERS = {"connectors": "eoskit.connectors", "twophase": "eoskit.twophase", "runtime": "eoskit.runtime"}


def test_every_package_folder_is_installed():
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            name = ".".join([package, *rel.parts])
            module = importlib.import_module(name)
            assert "site-packages" in module.__file__, f"{name} is not imported from the install"


def test_pyspark_discovery_modules_point_at_registered_data_sources():
    from pyspark.sql.datasource import DataSource

    from eoskit.connectors.plugins import plugins

    names = sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_eoskit"))
    formats = {p.format for p in plugins()}
    # Written by setup.py from the declarations: one per format, none in the tree.
    assert names == sorted("pyspark_" + f.replace("-", "_") for f in formats)
    assert not list((ROOT / "connectors/pyspark_modules").glob("pyspark_*.py"))
    for name in names:
        source = importlib.import_module(name).DefaultSource
        assert issubclass(source, DataSource)
        assert source.name() in formats, f"{name} serves {source.name()}, which no plugin registers"


def test_every_connector_folder_with_a_plugin_is_registered():
    from importlib.metadata import entry_points

    from eoskit.connectors.plugins import GROUP, plugins

    folders = sorted(p.parent.name for p in (ROOT / "connectors").glob("*/plugin.py"))
    # One entry point per folder; a folder may serve several formats (files: parquet, json).
    assert sorted(e.name for e in entry_points(group=GROUP)) == folders
    assert len(plugins()) >= len(folders) >= 3
    for plugin in plugins():
        assert plugin.data_source_class().name() == plugin.format
        for module in plugin.modules_to_preload():
            importlib.import_module(module)


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
