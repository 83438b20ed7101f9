"""benchmarks/flink_peer.py, the PyFlink peer of the Kafka benchmark: the
connector jar's address and check, the virtualenv's interpreter, the
runner's command line against the runner's own options, and what the
contender says when its virtualenv is missing. Nothing here installs
PyFlink, starts a JVM or needs a broker."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

# benchmarks/ is no package: its modules import each other by name
# (benchlib), so the folder goes on the path and the module is loaded by path.
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
_spec = importlib.util.spec_from_file_location("flink_peer", BENCHMARKS / "flink_peer.py")
flink_peer = importlib.util.module_from_spec(_spec)
sys.modules["flink_peer"] = flink_peer
_spec.loader.exec_module(flink_peer)  # type: ignore[union-attr]


def test_the_connector_jar_is_the_one_built_for_the_pinned_flink():
    url = flink_peer.connector_jar_url()
    assert url == ("https://repo1.maven.org/maven2/org/apache/flink/flink-sql-connector-kafka/"
                   "5.0.0-2.2/flink-sql-connector-kafka-5.0.0-2.2.jar")
    # Maven Central's connector versions end in the Flink minor they are built for.
    flink_minor = ".".join(flink_peer.PYFLINK_VERSION.split(".")[:2])
    assert flink_peer.KAFKA_CONNECTOR_VERSION.endswith(f"-{flink_minor}")
    assert flink_peer.connector_jar(Path("/v")) == Path("/v/jars/flink-sql-connector-kafka-5.0.0-2.2.jar")


def test_a_download_is_kept_only_when_its_sha1_matches(tmp_path: Path):
    served = tmp_path / "served.jar"
    served.write_bytes(b"jar bytes" * 1000)
    Path(f"{served}.sha1").write_text(hashlib.sha1(served.read_bytes()).hexdigest() + "  served.jar\n")
    target = tmp_path / "jars" / "got.jar"
    target.parent.mkdir()
    flink_peer._download(served.as_uri(), target)
    assert target.read_bytes() == served.read_bytes()

    Path(f"{served}.sha1").write_text("0" * 40)
    other = tmp_path / "jars" / "other.jar"
    with pytest.raises(SystemExit, match="SHA-1"):
        flink_peer._download(served.as_uri(), other)
    assert sorted(p.name for p in other.parent.iterdir()) == ["got.jar"]  # no partial file left


def test_the_virtualenv_is_made_with_a_python_pyflink_has_wheels_for():
    assert flink_peer.base_python("/venv/bin/python", (3, 11), which=lambda name: None) == "/venv/bin/python"
    found = {"python3.12": "/usr/bin/python3.12", "python3.10": "/usr/bin/python3.10"}
    assert flink_peer.base_python("/x/python3.13", (3, 13), which=found.get) == "/usr/bin/python3.12"
    with pytest.raises(SystemExit, match="3.9, 3.10, 3.11, 3.12 only"):
        flink_peer.base_python("/x/python3.13", (3, 13), which=lambda name: None)


def test_making_the_virtualenv_again_keeps_what_is_there(tmp_path: Path, monkeypatch):
    venv = tmp_path / "flink-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    flink_peer.connector_jar(venv).parent.mkdir()
    flink_peer.connector_jar(venv).touch()
    calls: list[list[str]] = []

    def run(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 0, stdout=f"{flink_peer.PYFLINK_VERSION}\n")

    monkeypatch.setattr(flink_peer.subprocess, "run", run)
    monkeypatch.setattr(flink_peer, "_download", lambda url, target: pytest.fail("downloaded again"))
    flink_peer.make_flink_venv(venv)
    assert len(calls) == 1 and "pyflink.version" in calls[0][-1]  # only asked what is installed


def test_the_runner_command_uses_only_options_the_runner_has():
    command = flink_peer.runner_command(Path("/v/bin/python"), Path("/v/jars/c.jar"), "h:1", "in",
                                       20_000, "/e/enrich.py", parallelism=2, checkpoint_ms=5000)
    assert command[:2] == ["/v/bin/python", str(flink_peer.FLINK_RUNNER)]
    options = dict(zip(command[2::2], command[3::2]))
    assert options == {"--bootstrap": "h:1", "--input": "in", "--output": "bench_flink",
                       "--records": "20000", "--enrich": "/e/enrich.py",
                       "--connector-jar": "/v/jars/c.jar", "--parallelism": "2",
                       "--checkpoint-interval-ms": "5000"}
    # The runner parses its options before it imports PyFlink: --help runs here.
    shown = subprocess.run([sys.executable, str(flink_peer.FLINK_RUNNER), "--help"],
                           capture_output=True, text=True, check=True).stdout
    assert all(option in shown for option in options)


def test_a_missing_virtualenv_names_the_command_that_makes_it(tmp_path: Path):
    venv = tmp_path / "no-venv"
    contender = flink_peer.flink_contender(venv, 1000)
    assert contender.table == "bench_flink"
    with pytest.raises(flink_peer.Unavailable) as error:
        contender.run("127.0.0.1:1", "127.0.0.1:1", "topic", 4)
    assert "--make-flink-venv" in str(error.value)
    assert f"python benchmarks/flink_peer.py --make-venv {venv}" in str(error.value)


def test_the_options_default_to_the_virtualenv_the_benchmark_looks_in():
    parser = argparse.ArgumentParser()
    flink_peer.flink_options(parser)
    assert vars(parser.parse_args([])) == {"flink_venv": ".eoskit/flink-venv", "make_flink_venv": False,
                                           "flink": False, "flink_sql": False}
    args = parser.parse_args(["--flink", "--make-flink-venv", "--flink-venv", "/tmp/v"])
    assert (args.flink, args.make_flink_venv, args.flink_venv) == (True, True, "/tmp/v")


def fake_venv(tmp_path: Path, script: str) -> Path:
    """A virtualenv whose python is a shell script: the runner's stand-in."""
    venv = tmp_path / "flink-venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/sh\n{script}\n")
    python.chmod(0o755)
    flink_peer.connector_jar(venv).parent.mkdir()
    flink_peer.connector_jar(venv).touch()
    return venv


def test_the_runners_line_becomes_the_peers_result_and_phases(tmp_path: Path):
    line = ('{"rows": 20000, "run_s": 14.0, "from_first_record_s": 4.0, "job_net_runtime_s": 11.0, '
            '"start_and_import_s": 9.0, "pyflink": "2.2.1", "kafka_connector": "5.0.0-2.2", '
            '"parallelism": 2, "checkpoint_interval_ms": 5000}')
    venv = fake_venv(tmp_path, f"echo 'some log line'; echo '{line}'")
    result = flink_peer.flink_contender(venv, 20_000).run("h:1", "h:1", "topic", 4)
    assert (result.rows, result.wall_s, result.extra["pyflink"]) == (20_000, 14.0, "2.2.1")
    phases = result.phases.seconds
    assert phases["mini-cluster + Python workers start, before the first record"] == pytest.approx(10.0)
    assert phases["from the first record on"] == 4.0
    assert "the job, env.execute()" not in phases


def test_a_failed_runner_is_not_run_with_the_end_of_its_error(tmp_path: Path):
    venv = fake_venv(tmp_path, "echo 'py4j.protocol.Py4JJavaError: boom' >&2; exit 3")
    with pytest.raises(flink_peer.Unavailable,
                       match=r"exited with 3:\n    py4j.protocol.Py4JJavaError: boom"):
        flink_peer.flink_contender(venv, 10).run("h:1", "h:1", "topic", 4)
