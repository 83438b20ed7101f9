"""``eoskit package``: which distributions are packed, and the archive's
layout, checked by running the unpacked environment's own Python."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import pytest

from eoskit.runtime.cli.main import build_parser
from eoskit.runtime.spark.package import PackageError, base_python, closure, normalize, pack, requirements


def _names(dists) -> set[str]:
    return {normalize(d.metadata["Name"]) for d in dists}


def test_closure_follows_requirements_and_extras_and_leaves_out_pyspark():
    names = _names(closure(["eoskit[kafka,postgres,mysql]"]))
    # eoskit's requirements, and theirs (pandas -> numpy), and an extra's (psycopg[binary]).
    assert {"eoskit", "pyarrow", "pandas", "numpy", "confluent-kafka", "psycopg", "psycopg-binary",
            "sqlalchemy", "fsspec", "pymysql"} <= names, names
    # The nodes' Spark provides PySpark; eoskit's test extra is not asked for.
    assert not names & {"pyspark", "py4j", "pytest", "moto", "pip"}, names
    assert "pyspark" in _names(closure(["eoskit", "pyspark"]))
    # eoskit alone is the runtime, without any connector's library.
    assert not _names(closure(["eoskit"])) & {"confluent-kafka", "psycopg", "pymysql", "sqlalchemy"}


def test_the_archive_packs_the_connectors_installed_here():
    from eoskit.runtime.spark.package import default_roots, installed_connector_extras

    # This environment has every connector's extra (eoskit[test] asks for all).
    assert installed_connector_extras() == ("files", "kafka", "mysql", "postgres", "s3")
    assert default_roots() == ("eoskit[files,kafka,mysql,postgres,s3]",)


def test_requirement_markers_are_applied():
    pandas = metadata.distribution("pandas")
    needs = dict(requirements(pandas, frozenset()))
    assert "numpy" in needs and "pytest" not in needs and "hypothesis" not in needs
    assert "pytest" in dict(requirements(pandas, frozenset({"test"})))


def test_a_distribution_not_installed_is_named():
    with pytest.raises(PackageError, match="'no-such-dist-eoskit' is not installed"):
        closure(["no-such-dist-eoskit"])


def test_archive_is_a_relocatable_environment(tmp_path: Path):
    packed = pack(tmp_path / "env.tar.gz", roots=["fsspec"])
    assert [d.split()[0] for d in packed.distributions] == ["fsspec"]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    with tarfile.open(packed.path) as archive:
        python = archive.getmember("bin/python")
        assert python.issym() and python.linkname == base_python()
        assert archive.getmember(f"bin/python{version}").linkname == "python"
        assert f"lib/python{version}/site-packages/fsspec/__init__.py" in archive.getnames()
        archive.extractall(tmp_path / "environment", filter="fully_trusted")
    config = (tmp_path / "environment" / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in config
    # The unpacked environment's own Python sees what was packed, and nothing else.
    probe = ("import json, sys, importlib.util as u; print(json.dumps([sys.prefix, "
             "bool(u.find_spec('fsspec')), bool(u.find_spec('eoskit'))]))")
    out = subprocess.run(["./environment/bin/python", "-c", probe], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout
    prefix, has_fsspec, has_eoskit = json.loads(out)
    assert Path(prefix).resolve() == (tmp_path / "environment").resolve()
    assert (has_fsspec, has_eoskit) == (True, False)


def test_python_must_be_absolute(tmp_path: Path):
    with pytest.raises(PackageError, match="must be an absolute path"):
        pack(tmp_path / "env.tar.gz", python="python3", roots=["fsspec"])


def test_cli_wiring():
    args = build_parser().parse_args(["package", "-o", "x.tar.gz", "--with", "requests",
                                      "--with", "attrs", "--python", "/usr/bin/python3.11"])
    assert (args.output, args.with_, args.python) == ("x.tar.gz", ["requests", "attrs"], "/usr/bin/python3.11")
    assert build_parser().parse_args(["package"]).output == "eoskit-env.tar.gz"


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _Session:
    def __init__(self, archives: str) -> None:
        self.conf = _Conf({"spark.archives": archives})


def test_archive_aliases():
    from eoskit.runtime.spark.session import archive_aliases

    assert archive_aliases("hdfs:///envs/env.tar.gz#environment, other.zip") == {"environment", "other.zip"}
    assert archive_aliases("") == set()


def test_client_mode_driver_links_the_shipped_environment_to_its_own(tmp_path: Path, monkeypatch):
    from eoskit.runtime.spark.session import link_shipped_environment

    monkeypatch.setenv("PYSPARK_PYTHON", "./environment/bin/python")
    # Not shipped (no such alias), or already there: nothing is done.
    assert link_shipped_environment(_Session("env.tar.gz#other"), tmp_path) is None
    link = link_shipped_environment(_Session("/x/env.tar.gz#environment"), tmp_path)
    assert link == tmp_path / "environment" and link.resolve() == Path(sys.prefix).resolve()
    out = subprocess.run(["./environment/bin/python", "-c", "import sys; print(sys.prefix)"],
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert Path(out.strip()).resolve() == Path(sys.prefix).resolve()
    assert link_shipped_environment(_Session("/x/env.tar.gz#environment"), tmp_path) is None
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")  # absolute: the nodes have it
    link.unlink()
    assert link_shipped_environment(_Session("/x/env.tar.gz#environment"), tmp_path) is None
