"""The driver JVM's classes shared from an archive: a cold start without
parsing and verifying Spark's classes again.

A Spark driver JVM loads some twelve thousand classes before its first
micro-batch; the JDK can map the ones an earlier run loaded from a
class-data-sharing archive instead (dynamic AppCDS, ``-XX:SharedArchiveFile``,
Java 13+). Measured here (2 cores, Java 17, PySpark 4.3, local[2]): a session
in 5.0 s instead of 7.3 s and its first job in 2.5 s instead of 3.6 s. Nothing
else changes: the same classes run, compiled by the same JIT.

The archive, top to bottom:

1. Its name carries a key of the JVM it was made by (the ``java`` binary
   Spark will start, resolved, and its modification time) and of the Spark
   installation (PySpark's version, its jars' folder, and each jar's name,
   size and modification time: the JVM maps an archive only for the class
   path it was made with, and checks each jar's size and time): another
   Java, Spark, environment or reinstall of the same environment makes
   another archive.
2. It is made once per key, in the background: ``get_session`` finds no
   archive and starts ``python -m eoskit.runtime.spark.jvm_archive <path>``
   detached, which runs a small streaming query (a Python data source into
   ``noop``, the classes a job's first batch loads) under
   ``spark-submit`` with ``-XX:ArchiveClassesAtExit`` and a temporary name.
   A lock file (``<path>.making``, created exclusively) lets one maker run
   per key; a lock older than ``MAKE_TIMEOUT_S`` is stale.
3. Only a whole archive is ever mapped: the JVM writes it as it exits; the
   maker renames it to its final name after ``spark-submit`` exited 0 (a
   truncated archive makes the JDK abort the start, which a partial write
   killed mid-way would leave). Until then sessions start without one.
4. The maker then removes the archives it replaces: those made for the
   same jars' folder (an earlier install of this environment) or for a
   folder that is gone, known by the ``spark-<key>.json`` written beside
   each archive (an archive without one is an older eoskit's, removed too).
   An archive is some 170 MB; without this a folder of them would grow
   with every reinstall.
5. A session that finds it adds ``-XX:SharedArchiveFile`` (with
   ``-Xshare:auto``: a JVM that cannot map it starts without it) to
   ``spark.driver.extraJavaOptions``, after any the job gives.

Only for a driver JVM eoskit starts itself (not under ``spark-submit``,
whose JVM is already running); executors on a cluster start their own JVMs.
``EOSKIT_JVM_ARCHIVE=0`` turns it off; ``EOSKIT_JVM_ARCHIVE_DIR`` moves it
(default ``~/.cache/eoskit/jvm``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ENV = "EOSKIT_JVM_ARCHIVE"
DIR_ENV = "EOSKIT_JVM_ARCHIVE_DIR"
#: A maker that has not finished in this long is taken for dead.
MAKE_TIMEOUT_S = 600.0
#: What the JVM maps the archive with, and keeps quiet about.
_QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def enabled(env: os._Environ[str] | dict[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return env.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def java_binary(env: os._Environ[str] | dict[str, str] | None = None) -> str | None:
    """The ``java`` Spark's launcher starts: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.realpath(os.path.join(home, "bin", "java"))
    found = shutil.which("java", path=env.get("PATH"))
    return os.path.realpath(found) if found else None


def _jars() -> Path:
    import pyspark

    return (Path(pyspark.__file__).parent / "jars").resolve()


def key(java: str) -> str:
    """What the archive depends on: the JVM build and Spark's jars."""
    import pyspark

    jars = _jars()
    # The JVM maps an archive only for the class path it was made with: the
    # jars' folder itself (another venv is another key), and each jar as the
    # JVM checks it, its size and modification time (a venv made again at
    # the same path, as a CI clone is, is another key too).
    found = sorted(jars.glob("*.jar")) if jars.is_dir() else []
    names = [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in found]
    parts = [java, str(os.stat(java).st_mtime_ns), pyspark.__version__, str(jars), *names]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def archive_path(env: os._Environ[str] | dict[str, str] | None = None) -> Path | None:
    """Where the archive for this Java and Spark is (or will be); None when off
    or no ``java`` is found."""
    env = os.environ if env is None else env
    if not enabled(env):
        return None
    java = java_binary(env)
    if java is None:
        return None
    folder = Path(env.get(DIR_ENV) or Path.home() / ".cache" / "eoskit" / "jvm")
    return folder / f"spark-{key(java)}.jsa"


def java_options(given: str | None, archive: Path) -> str:
    """``spark.driver.extraJavaOptions`` with the archive mapped, after ``given``."""
    return " ".join(filter(None, [(given or "").strip(), f"-XX:SharedArchiveFile={archive}", _QUIET]))


def use_or_make(conf: dict[str, str]) -> Path | None:
    """The archive added to ``conf``'s driver options if it exists, else its
    making started in the background (once per key); the archive or None."""
    archive = archive_path()
    if archive is None or _defaults_set_driver_options(conf):
        return None
    if archive.is_file():
        conf["spark.driver.extraJavaOptions"] = java_options(conf.get("spark.driver.extraJavaOptions"), archive)
        return archive
    start_maker(archive)
    return None


def _defaults_set_driver_options(conf: dict[str, str]) -> bool:
    """Whether ``spark-defaults.conf`` gives driver Java options the job's
    conf does not: setting ours would replace them, so the archive is left out."""
    return "spark.driver.extraJavaOptions" not in conf and "spark.driver.extraJavaOptions" in spark_defaults()


def spark_defaults() -> dict[str, str]:
    """The settings of the ``spark-defaults.conf`` files a launch would read
    (``$SPARK_CONF_DIR``, ``$SPARK_HOME/conf``; without ``SPARK_HOME``, the
    installed PySpark's folder, as for a pip install), the first file's value winning: key,
    whitespace, value per line, ``#`` comments skipped."""
    import pyspark

    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    folders = [os.environ.get("SPARK_CONF_DIR"), os.path.join(home, "conf") if home else None]
    found: dict[str, str] = {}
    for folder in filter(None, folders):
        try:
            lines = Path(folder, "spark-defaults.conf").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.strip().split(None, 1)
            if parts and not parts[0].startswith("#"):
                found.setdefault(parts[0], parts[1].strip() if len(parts) > 1 else "")
    return found


def _lock(archive: Path) -> Path:
    return archive.with_name(archive.name + ".making")


def start_maker(archive: Path) -> bool:
    """Start the background maker unless one is at work; True if started."""
    lock = _lock(archive)
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
        if lock.exists() and time.time() - lock.stat().st_mtime > MAKE_TIMEOUT_S:
            lock.unlink(missing_ok=True)  # its maker died
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError:
        return False  # another maker holds it, or the folder cannot be written
    os.close(fd)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    try:
        subprocess.Popen([sys.executable, "-m", "eoskit.runtime.spark.jvm_archive", str(archive)],
                         env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        lock.unlink(missing_ok=True)
        return False
    return True


#: What the maker's JVM runs: a job's first batch's path, without services
#: (eoskit.runtime.spark.warmup).
_WARM_JOB = """
import sys

from pyspark.sql import SparkSession

from eoskit.runtime.spark.warmup import warm_up

spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
warm_up(spark, sys.argv[1])
spark.stop()
"""


def make(archive: Path) -> bool:
    """Run the warm-up query under ``spark-submit`` with the archive dumped at
    its JVM's exit, then move it into place; True if made."""
    import tempfile

    import pyspark

    lock = _lock(archive)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    try:
        with tempfile.TemporaryDirectory(prefix="eoskit-jvm-archive-") as work:
            script = Path(work) / "warm_job.py"
            script.write_text(_WARM_JOB)
            submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
            env = {**os.environ, "PYSPARK_PYTHON": sys.executable, ENV: "0"}
            done = subprocess.run(
                [str(submit), "--master", "local[1]",
                 "--driver-java-options", f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=off "
                 "-Xlog:cds+dynamic=off",
                 str(script), str(Path(work) / "checkpoint")],
                env=env, cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, timeout=MAKE_TIMEOUT_S)
        if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            return False
        os.replace(partial, archive)  # whole, or not there at all
        forget_replaced(archive, _jars())
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        partial.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)


def _about(archive: Path) -> Path:
    return archive.with_suffix(".json")


def forget_replaced(archive: Path, jars: Path) -> list[Path]:
    """Record which jars' folder ``archive`` was made for, and remove the
    archives it replaces (step 4); the archives removed."""
    import json

    _about(archive).write_text(json.dumps({"jars": str(jars)}))
    removed = []
    for other in archive.parent.glob("spark-*.jsa"):
        if other == archive:
            continue
        try:
            made_for = json.loads(_about(other).read_text())["jars"]
        except (OSError, ValueError, KeyError, TypeError):
            made_for = None  # an older eoskit's: it keeps no record
        if made_for is None or made_for == str(jars) or not os.path.isdir(made_for):
            other.unlink(missing_ok=True)  # a JVM mapping it keeps its pages
            _about(other).unlink(missing_ok=True)
            removed.append(other)
    return removed


if __name__ == "__main__":
    sys.exit(0 if make(Path(sys.argv[1])) else 1)
