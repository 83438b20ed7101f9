"""The driver JVM's class-sharing archive (eoskit.runtime.spark.jvm_archive):
where it is, when it is used, and that one maker runs per key. Making one
runs a JVM: integration_tests/test_jvm_archive.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from eoskit.runtime.spark import jvm_archive

@pytest.fixture
def java(tmp_path: Path) -> Path:
    """A stand-in ``java`` under a JAVA_HOME of our own."""
    binary = tmp_path / "jdk" / "bin" / "java"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return binary


def env_for(java: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"JAVA_HOME": str(java.parent.parent), "PATH": "/nonexistent",
            jvm_archive.DIR_ENV: str(tmp_path / "archives"), **extra}


def test_the_archive_is_keyed_by_the_jvm_build(java, tmp_path):
    first = jvm_archive.archive_path(env_for(java, tmp_path))
    assert first is not None and first.parent == tmp_path / "archives" and first.suffix == ".jsa"
    assert jvm_archive.archive_path(env_for(java, tmp_path)) == first
    os.utime(java, ns=(time.time_ns(), time.time_ns() + 10**9))  # another build of the JVM
    assert jvm_archive.archive_path(env_for(java, tmp_path)) != first


@pytest.mark.parametrize("off", ["0", "false", "off"])
def test_it_can_be_turned_off(java, tmp_path, off):
    assert jvm_archive.archive_path(env_for(java, tmp_path, **{jvm_archive.ENV: off})) is None


def test_no_java_no_archive(tmp_path):
    assert jvm_archive.archive_path({"PATH": "/nonexistent", jvm_archive.DIR_ENV: str(tmp_path)}) is None


def test_the_job_s_own_java_options_come_first(tmp_path):
    archive = tmp_path / "a.jsa"
    options = jvm_archive.java_options("-Xmx2g -Dx=1", archive)
    assert options.startswith("-Xmx2g -Dx=1 -XX:SharedArchiveFile=") and str(archive) in options
    assert "-Xshare:auto" in options  # a JVM that cannot map it starts without it
    assert jvm_archive.java_options(None, archive).startswith("-XX:SharedArchiveFile=")


def test_a_session_uses_an_archive_that_exists_and_starts_one_maker_otherwise(java, tmp_path, monkeypatch):
    for key, value in env_for(java, tmp_path).items():
        monkeypatch.setenv(key, value)
    started: list[list[str]] = []
    monkeypatch.setattr(jvm_archive.subprocess, "Popen", lambda argv, **_: started.append(argv))
    conf: dict[str, str] = {"spark.driver.extraJavaOptions": "-Xmx1g"}
    assert jvm_archive.use_or_make(conf) is None and conf == {"spark.driver.extraJavaOptions": "-Xmx1g"}
    assert jvm_archive.use_or_make({}) is None  # its maker is at work: not a second one
    assert len(started) == 1 and started[0][1:3] == ["-m", "eoskit.runtime.spark.jvm_archive"]

    archive = Path(started[0][3])
    archive.write_bytes(b"made")  # what the maker moves into place when done
    assert jvm_archive.use_or_make(conf) == archive
    assert conf["spark.driver.extraJavaOptions"].startswith(f"-Xmx1g -XX:SharedArchiveFile={archive}")


def test_a_maker_that_died_does_not_hold_its_key_for_good(java, tmp_path, monkeypatch):
    for key, value in env_for(java, tmp_path).items():
        monkeypatch.setenv(key, value)
    started: list[list[str]] = []
    monkeypatch.setattr(jvm_archive.subprocess, "Popen", lambda argv, **_: started.append(argv))
    archive = jvm_archive.archive_path()
    assert archive is not None
    assert jvm_archive.start_maker(archive) and not jvm_archive.start_maker(archive)
    lock = archive.with_name(archive.name + ".making")
    stale = time.time() - jvm_archive.MAKE_TIMEOUT_S - 1
    os.utime(lock, (stale, stale))
    assert jvm_archive.start_maker(archive) and len(started) == 2


def test_another_environment_of_the_same_spark_is_another_key(java, tmp_path, monkeypatch):
    """The JVM maps an archive only for the class path it was made with: a
    venv elsewhere (a CI clone) must not share the archive of this one."""
    import pyspark

    first = jvm_archive.key(str(java))
    other = tmp_path / "venv2" / "pyspark"
    (other / "jars").mkdir(parents=True)
    monkeypatch.setattr(pyspark, "__file__", str(other / "__init__.py"))
    assert jvm_archive.key(str(java)) != first


def test_a_reinstalled_jar_is_another_key(java, tmp_path, monkeypatch):
    """The JVM refuses an archive when a jar's size or modification time is
    not what it was made with (a venv made again at the same path, as a CI
    clone's is): such an archive would never be mapped again."""
    import pyspark

    spark_dir = tmp_path / "venv" / "pyspark"
    jar = spark_dir / "jars" / "slf4j-api.jar"
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"classes")
    monkeypatch.setattr(pyspark, "__file__", str(spark_dir / "__init__.py"))
    first = jvm_archive.key(str(java))
    assert jvm_archive.key(str(java)) == first
    os.utime(jar, ns=(time.time_ns(), jar.stat().st_mtime_ns + 10**9))  # the same jar installed again
    second = jvm_archive.key(str(java))
    assert second != first
    jar.write_bytes(b"classes, another build")
    os.utime(jar, ns=(time.time_ns(), jar.stat().st_mtime_ns))
    assert jvm_archive.key(str(java)) != second


def test_a_new_archive_removes_those_it_replaces(tmp_path):
    """Those of the same jars' folder (an earlier install), of a folder that
    is gone and of an older eoskit (no record) go; another environment's stays."""
    import json

    folder, here, elsewhere = tmp_path / "archives", tmp_path / "venv" / "jars", tmp_path / "venv2" / "jars"
    here.mkdir(parents=True)
    elsewhere.mkdir(parents=True)
    folder.mkdir()

    def made(name: str, jars: Path | None) -> Path:
        archive = folder / f"spark-{name}.jsa"
        archive.write_bytes(b"classes")
        if jars is not None:
            archive.with_suffix(".json").write_text(json.dumps({"jars": str(jars)}))
        return archive

    earlier, other, gone, older = (made("earlier", here), made("other", elsewhere),
                                   made("gone", tmp_path / "removed" / "jars"), made("older", None))
    new = made("new", None)
    removed = jvm_archive.forget_replaced(new, here)
    assert sorted(removed) == sorted([earlier, gone, older])
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [other.name, other.with_suffix(".json").name, new.name, new.with_suffix(".json").name])
    assert json.loads(new.with_suffix(".json").read_text()) == {"jars": str(here)}


def test_driver_options_from_spark_defaults_are_not_replaced(java, tmp_path, monkeypatch):
    for key, value in env_for(java, tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(jvm_archive.subprocess, "Popen", lambda argv, **_: None)
    archive = jvm_archive.archive_path()
    assert archive is not None
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"made")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Dsite=1\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    conf: dict[str, str] = {}
    assert jvm_archive.use_or_make(conf) is None and conf == {}  # the site's options stay
    given = {"spark.driver.extraJavaOptions": "-Xmx1g"}  # the job's own: ours go after them
    assert jvm_archive.use_or_make(given) == archive
