"""PyFlink 2.x on the Kafka benchmark's topic: KafkaSource -> enrich -> KafkaSink EXACTLY_ONCE.

The Kafka -> Kafka benchmark's peer for PyFlink, run like Quix Streams' peer:
in a virtualenv of its own (PyFlink pins its own pandas, pyarrow and py4j,
older than eoskit's), through ``flink_runner.py`` in a process of its own,
on the same input topic, into the topic ``bench_flink``, read back by the
same read_committed verifier (``kafka_to_kafka.topic_stats``).

``make_flink_venv`` builds that virtualenv: ``apache-flink`` pinned to
PYFLINK_VERSION from PyPI (its wheel of jars, ``apache-flink-libraries``,
brings Flink's runtime: no Flink install is needed) and Flink's Kafka
connector, ``flink-sql-connector-kafka`` (the shaded jar, with its Kafka
client inside), from Maven Central into the virtualenv's ``jars/``, its
SHA-1 checked. ``flink_contender`` is what kafka_to_kafka.py runs (with
``--flink``); ``flink_options`` adds that option, ``--flink-venv`` and
``--make-flink-venv``; ``flink_sql_contender`` the same job in Flink SQL
(with ``--flink-sql``). Make the virtualenv by hand (the path the benchmark
looks in by default) with:

    .venv/bin/python benchmarks/flink_peer.py --make-venv .eoskit/flink-venv
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

from eoskit.runtime.devtools.demo import enrich

from benchlib.harness import Contender, Unavailable, run_peer_process
from benchlib.report import say
from benchlib.results import BaselineResult, Timings

#: PyFlink from PyPI. 2.2.1 is the newest release that Maven Central has a
#: Kafka connector for (2.3.0 is on PyPI; no connector built for 2.3 yet).
PYFLINK_VERSION = "2.2.1"
#: flink-sql-connector-kafka built against Flink 2.2 (Maven Central's
#: versions name the Flink they are for after the dash).
KAFKA_CONNECTOR_VERSION = "5.0.0-2.2"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
#: The CPython versions apache-flink 2.2.1 ships wheels for (none for 3.13);
#: the virtualenv is made with one of them.
PYTHONS = ((3, 9), (3, 10), (3, 11), (3, 12))
FLINK_TABLE = "bench_flink"
FLINK_SQL_TABLE = "bench_flink_sql"
FLINK_RUNNER = Path(__file__).with_name("flink_runner.py")
#: The machine's two cores: one source, map and sink subtask on each (the
#: input has 4 partitions, so each source subtask reads two).
PARALLELISM = 2
#: Flink commits the sink's Kafka transactions when a checkpoint completes,
#: so this is the transaction's length in time; 5 s is Quix Streams' time
#: bound (its commit_every=10,000 records has no Flink counterpart: Flink
#: checkpoints on time only). The job's last transactions are committed by
#: a checkpoint Flink triggers as soon as the input is read, not one interval
#: later (see flink_runner.py), so the interval does not lengthen the run's end.
CHECKPOINT_INTERVAL_MS = 5000
TIMEOUT_S = 3600


def connector_jar_url(version: str = KAFKA_CONNECTOR_VERSION) -> str:
    """Maven Central's address of the shaded Kafka connector jar."""
    name = f"flink-sql-connector-kafka-{version}.jar"
    return f"{MAVEN_CENTRAL}/org/apache/flink/flink-sql-connector-kafka/{version}/{name}"


def connector_jar(venv: Path, version: str = KAFKA_CONNECTOR_VERSION) -> Path:
    return venv / "jars" / f"flink-sql-connector-kafka-{version}.jar"


def make_venv_command(venv: Path) -> str:
    """The one command that makes the virtualenv, for error messages and the README."""
    return f"python benchmarks/flink_peer.py --make-venv {venv}"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def base_python(current: str = sys.executable, version: tuple[int, int] = sys.version_info[:2],
                which=shutil.which) -> str:
    """The interpreter to make the virtualenv with: this one, as Quix
    Streams' peer does, if PyFlink has wheels for it, else the newest
    python3.X on PATH that it has wheels for."""
    if tuple(version) in PYTHONS:
        return current
    for major, minor in reversed(PYTHONS):
        found = which(f"python{major}.{minor}")
        if found:
            return found
    supported = ", ".join(f"{major}.{minor}" for major, minor in PYTHONS)
    raise SystemExit(f"PyFlink {PYFLINK_VERSION} has wheels for CPython {supported} only; this is "
                     f"{version[0]}.{version[1]} and none of those is on PATH")


def _download(url: str, target: Path) -> None:
    """``url`` to ``target``, checked against Maven Central's .sha1; written
    under a temporary name first, so a cut download is never taken for the jar."""
    with urllib.request.urlopen(url + ".sha1", timeout=60) as response:
        expected = response.read().decode().split()[0].strip().lower()
    partial = target.with_name(target.name + ".part")
    digest = hashlib.sha1()
    with urllib.request.urlopen(url, timeout=60) as response, partial.open("wb") as out:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != expected:
        partial.unlink()
        raise SystemExit(f"{url}: SHA-1 {digest.hexdigest()}, Maven Central says {expected}")
    partial.rename(target)


def make_flink_venv(venv: Path) -> None:
    """A virtualenv with PyFlink PYFLINK_VERSION and the Kafka connector jar
    in ``jars/``, apart from eoskit's. Idempotent: what is there already
    (the interpreter, the pinned apache-flink, the jar) is kept."""
    python = venv_python(venv)
    if not python.exists():
        say(f"creating {venv} with PyFlink {PYFLINK_VERSION}")
        subprocess.run([base_python(), "-m", "venv", str(venv)], check=True)
    installed = subprocess.run([str(python), "-c", "import pyflink.version as v; print(v.__version__)"],
                               capture_output=True, text=True)
    if installed.returncode != 0 or installed.stdout.strip() != PYFLINK_VERSION:
        say(f"pip install apache-flink=={PYFLINK_VERSION} into {venv} (about 400 MB, with its jars)")
        subprocess.run([str(python), "-m", "pip", "install", "-q", f"apache-flink=={PYFLINK_VERSION}"],
                       check=True)
    jar = connector_jar(venv)
    if not jar.exists():
        say(f"downloading {connector_jar_url()} into {jar.parent}")
        jar.parent.mkdir(parents=True, exist_ok=True)
        _download(connector_jar_url(), jar)


# ------------------------------------------------------------------ the peer

def runner_command(python: Path, jar: Path, bootstrap: str, topic: str, records: int, enrich: str,
                   parallelism: int = PARALLELISM, checkpoint_ms: int = CHECKPOINT_INTERVAL_MS,
                   sql: bool = False) -> list[str]:
    """flink_runner.py's command: the DataStream job into FLINK_TABLE, or
    with ``sql`` the Flink SQL job into FLINK_SQL_TABLE."""
    return [str(python), str(FLINK_RUNNER), "--bootstrap", bootstrap, "--input", topic,
            "--output", FLINK_SQL_TABLE if sql else FLINK_TABLE, "--records", str(records),
            "--enrich", enrich, "--connector-jar", str(jar), "--parallelism", str(parallelism),
            "--checkpoint-interval-ms", str(checkpoint_ms), *(["--sql"] if sql else [])]


def _run_runner(venv: Path, command: list[str]) -> dict:
    python, jar = venv_python(venv), connector_jar(venv)
    if not python.exists() or not jar.exists():
        raise Unavailable(f"no PyFlink virtualenv with its Kafka connector at {venv}: rerun "
                          f"with --make-flink-venv, or {make_venv_command(venv)}")
    result, wall = run_peer_process("PyFlink", command, timeout=TIMEOUT_S)
    return {**result, "process_wall_s": wall}


def first_record_view(result: BaselineResult) -> list[tuple[str, str, BaselineResult]]:
    """The DataStream run timed from its first record (issue 33: eoskit's
    figures exclude Spark's session start, so this excludes PyFlink's
    mini-cluster and Python workers' start): a line of its own."""
    first = result.extra.get("from_first_record_s")
    if not first:
        return []
    return [("flink_from_first_record", "PyFlink KafkaSink EXACTLY_ONCE, from its first record "
             "(mini-cluster and Python workers' start excluded)",
             BaselineResult(result.rows, first, Timings({"from the first record on": first}), result.extra))]


def job_start_view(result: BaselineResult) -> list[tuple[str, str, BaselineResult]]:
    """The SQL run timed from the job's start (Flink's net runtime: the
    mini-cluster's start excluded, the deployment in): a line of its own."""
    net = result.extra.get("from_job_start_s")
    if not net:
        return []
    return [("flink_sql_from_job_start", "PyFlink SQL, enrichment in SQL, KafkaSink EXACTLY_ONCE, from the "
             "job's start (mini-cluster start excluded)",
             BaselineResult(result.rows, net, Timings({"the job, Flink's net runtime": net}), result.extra))]


def flink_contender(venv: Path, records: int, parallelism: int = PARALLELISM,
                    checkpoint_ms: int = CHECKPOINT_INTERVAL_MS) -> Contender:
    """PyFlink's run on the benchmark's topic, into FLINK_TABLE (which the
    benchmark recreates before, with the input's partition count); timed
    whole, and from its first record as a line of its own."""

    def run(bootstrap: str, url: str, topic: str, partitions: int) -> BaselineResult:
        result = _run_runner(venv, runner_command(venv_python(venv), connector_jar(venv), bootstrap, topic,
                                                  records, enrich.__file__, parallelism, checkpoint_ms))
        first = result.get("from_first_record_s")
        say(f"  PyFlink {result['pyflink']}, parallelism {result['parallelism']}, checkpoint every "
            f"{result['checkpoint_interval_ms']:,} ms: {result['rows']:,} records in {result['run_s']:.1f} s"
            + ("" if first is None else f", {first:.1f} s from the first record on"))
        phases = Timings({"interpreter start + JVM + job build (not in results)":
                          result["process_wall_s"] - result["run_s"]})
        if first is None:
            phases.seconds["the job, env.execute()"] = result["run_s"]
        else:
            phases.seconds["mini-cluster + Python workers start, before the first record"] = (
                result["run_s"] - first)
            phases.seconds["from the first record on"] = first
        return BaselineResult(result["rows"], result["run_s"], phases, result)

    return Contender("PyFlink KafkaSource -> enrich -> KafkaSink EXACTLY_ONCE", FLINK_TABLE, run,
                     views=first_record_view)


def flink_sql_contender(venv: Path, records: int, parallelism: int = PARALLELISM,
                        checkpoint_ms: int = CHECKPOINT_INTERVAL_MS) -> Contender:
    """The same job in Flink SQL (flink_runner.py --sql), into
    FLINK_SQL_TABLE; timed whole, and from the job's start as a line of its own."""

    def run(bootstrap: str, url: str, topic: str, partitions: int) -> BaselineResult:
        result = _run_runner(venv, runner_command(venv_python(venv), connector_jar(venv), bootstrap, topic,
                                                  records, enrich.__file__, parallelism, checkpoint_ms,
                                                  sql=True))
        say(f"  PyFlink {result['pyflink']} SQL, parallelism {result['parallelism']}: {result['rows']:,} "
            f"records in {result['run_s']:.1f} s, {result['from_job_start_s']:.1f} s from the job's start")
        phases = Timings({
            "interpreter start + JVM + tables' build (not in results)": result["process_wall_s"] - result["run_s"],
            "mini-cluster start + job submission": result["submit_s"],
            "from the submission to the job's end": result["run_s"] - result["submit_s"]})
        return BaselineResult(result["rows"], result["run_s"], phases, result)

    return Contender("PyFlink SQL: Kafka table -> INSERT ... SELECT enrich -> Kafka table EXACTLY_ONCE",
                     FLINK_SQL_TABLE, run, views=job_start_view)


def flink_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flink-venv", default=".eoskit/flink-venv",
                        help="virtualenv with PyFlink and its Kafka connector jar "
                             "(default .eoskit/flink-venv)")
    parser.add_argument("--make-flink-venv", action="store_true",
                        help=f"create --flink-venv (pip install apache-flink=={PYFLINK_VERSION}, the "
                             "connector jar from Maven Central) if it is missing")
    parser.add_argument("--flink", action="store_true",
                        help="also run PyFlink's KafkaSource -> enrich -> KafkaSink EXACTLY_ONCE, "
                             "in a process of its own")
    parser.add_argument("--flink-sql", action="store_true",
                        help="also run the same job in Flink SQL (Kafka tables, the enrichment an "
                             "INSERT ... SELECT), in a process of its own")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--make-venv", metavar="DIR", required=True,
                        help="make (or complete) the PyFlink virtualenv in DIR")
    args = parser.parse_args(argv)
    make_flink_venv(Path(args.make_venv))
    say(f"PyFlink virtualenv ready: {args.make_venv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
