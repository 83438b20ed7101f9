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
