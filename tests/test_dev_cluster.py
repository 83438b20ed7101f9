"""Unit tests of the Spark cluster harness's parts that start nothing:
CLI wiring, the state file, bad input, a folder with nothing running.

The harness itself starts a real cluster in integration_tests/test_cluster.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from eoskit.runtime.devtools.services import register_cli
from eoskit.runtime.devtools.services.cluster import ClusterState, NodeState, SparkCluster, spark_home


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eoskit")
    register_cli(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cluster_cli_wiring():
    up = _parser().parse_args(["dev", "cluster", "up", "--dir", "/c", "--workers", "3",
                               "--cores", "2", "--memory", "2g", "--bare-worker-python"])
    assert (up.cluster_command, up.dir, up.workers, up.cores, up.memory, up.bare_worker_python) == \
        ("up", "/c", 3, 2, "2g", True)
    for name in ("down", "status", "env"):
        args = _parser().parse_args(["dev", "cluster", name])
        assert args.dir == ".eoskit/cluster" and callable(args.func)
    with pytest.raises(SystemExit):
        _parser().parse_args(["dev", "cluster", "down", "--workers", "2"])


def test_cluster_cli_on_a_folder_with_nothing_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    for name, code in (("status", 1), ("env", 1), ("down", 0)):
        args = _parser().parse_args(["dev", "cluster", name, "--dir", str(tmp_path / "c")])
        assert args.func(args) == code, name
    out, err = capsys.readouterr()
    assert "master" in out and "stopped" in out
    assert "no spark cluster runs in" in err and "eoskit dev cluster up" in err
    assert not (tmp_path / "c").exists()  # down of nothing creates nothing


def test_state_file_round_trip_and_dead_pids(tmp_path: Path):
    cluster = SparkCluster(tmp_path)
    state = ClusterState(master=NodeState("master", 7077, 8080, pid=2 ** 22 + 1, start_time=1),
                         workers=[NodeState("worker-1", 7078, 8081)], worker_python="/x/python3")
    cluster._save(state)
    assert cluster._load() == state
    # A pid that does not run (or runs another program) is not the master.
    assert cluster.master_url() is None
    assert cluster.status() == {"master": "stopped", "worker-1": "stopped"}
    assert cluster.pids() == {}


def test_bad_sizes_are_refused(tmp_path: Path):
    for kwargs in ({"workers": 0}, {"cores": 0}):
        with pytest.raises(ValueError, match="at least one worker with one core"):
            SparkCluster(tmp_path, **kwargs)


def test_spark_home_is_the_installed_pyspark():
    home = spark_home()
    assert (home / "bin" / "spark-class").is_file() and (home / "jars").is_dir()


def test_leftover_processes_are_those_running_in_a_worker_s_work_dir(tmp_path: Path):
    """A process whose working directory is under a worker's work dir (an
    executor's) is left over; one elsewhere, and one that exited unreaped
    (a zombie, holding nothing), are not."""
    import os
    import subprocess
    import sys

    work = tmp_path / "worker-1" / "work" / "app-1" / "0"
    work.mkdir(parents=True)
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    inside, outside = subprocess.Popen(sleep, cwd=work), subprocess.Popen(sleep, cwd=tmp_path)
    exited = subprocess.Popen([sys.executable, "-c", "pass"], cwd=work)
    try:
        os.waitid(os.P_PID, exited.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
        assert SparkCluster(tmp_path).leftover_processes() == [inside.pid]
    finally:
        for process in (inside, outside, exited):
            process.kill()
            process.wait()
    assert SparkCluster(tmp_path).leftover_processes() == []
