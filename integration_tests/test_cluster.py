"""The cluster tier: jobs on a Spark standalone cluster (one master, two
workers started from the installed PySpark by the ``spark_cluster``
fixture), where executors are other processes, in other working
directories, with their own Python.

Run alone with ``pytest -m cluster``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from eoskit.runtime.devtools.services.cluster import SparkCluster, master_info
from eoskit.runtime.devtools.services.processes import ProcessRef, is_alive
from eoskit.testing.conformance import Scenario, Workload, run_scenario, scenarios_for
from eoskit.testing.conformance.cluster import cluster_env

pytestmark = pytest.mark.cluster


def test_harness_starts_reuses_and_stops_a_cluster(tmp_path: Path):
    cluster = SparkCluster(tmp_path / "c", workers=1, bare_worker_python=True)
    url = cluster.up()
    try:
        status = cluster.status()
        assert set(status) == {"master", "worker-1"}, status
        assert all(text.startswith("running") for text in status.values()), status
        assert cluster.up() == url  # a running cluster is reused
        state = cluster._load()
        assert master_info(state.master.webui_port)["aliveworkers"] == 1
        assert all((tmp_path / "c" / "worker-1" / sub).is_dir() for sub in ("work", "local"))
        assert state.worker_python and Path(state.worker_python).parent.parent == tmp_path / "c" / "bare-python"
        refs = [ProcessRef(n.pid, n.start_time) for n in state.nodes()]
    finally:
        cluster.down()
    assert not any(is_alive(ref) for ref in refs)
    assert cluster.leftover_processes() == []
    assert cluster.master_url() is None


# -- the PostgreSQL sink's crash scenarios on the cluster, checked with psql --

@pytest.fixture(scope="module")
def cluster_workload(kafka: str) -> Workload:
    return Workload.produce(kafka, records=3_000, partitions=2, batches=3)


CLUSTER = scenarios_for("twophase", cluster=True)


@pytest.mark.parametrize("scenario", CLUSTER, ids=[s.name for s in CLUSTER])
def test_postgres_on_cluster(spark_cluster, postgres_target, cluster_workload, scenario, tmp_path):
    run_scenario(postgres_target(), cluster_workload, scenario, tmp_path, env=cluster_env(spark_cluster))


# -- nodes without eoskit: the start-up check, and the packed environment ------

# The fixture's workers find a bare virtualenv as their own python3.


def _fails_naming_the_node(run) -> None:
    error = run.expect_failure(PYSPARK_PYTHON="python3")
    assert "could not start" in error and "executor" in error and "on host" in error, error[-3000:]
    assert "No module named 'eoskit'" in error and "eoskit package" in error, error[-3000:]
    assert run.target.rows(run.table) == []  # refused before any transaction


def test_start_fails_naming_a_node_without_eoskit(spark_cluster, postgres_target, cluster_workload,
                                                 tmp_path):
    run_scenario(postgres_target(), cluster_workload, Scenario("no_eoskit", _fails_naming_the_node),
                 tmp_path, env=cluster_env(spark_cluster))


def test_packed_environment_runs_on_workers_without_eoskit(spark_cluster, postgres_target,
                                                           cluster_workload, tmp_path):
    archive = tmp_path / "env.tar.gz"
    started = time.monotonic()
    packed = subprocess.run([str(Path(sys.executable).with_name("eoskit")), "package", "-o", str(archive)],
                            capture_output=True, text=True, timeout=600)
    assert packed.returncode == 0, packed.stderr
    print(f"eoskit package: {time.monotonic() - started:.1f} s, {archive.stat().st_size >> 20} MB")

    def scenario(run) -> None:
        # Spark's own recipe: the archive unpacked as ./environment in each
        # executor's working directory, its Python named relative to it.
        code, log = run.run_job(PYSPARK_PYTHON="./environment/bin/python",
                                **run.spark_conf(**{"spark.archives": f"{archive}#environment"}))
        assert code == 0, f"the job failed (exit {code}):\n{log[-3000:]}"
        run.verify_exactly_once()
        assert not (run.workdir / "environment").exists()  # the driver's link is gone with it

    run_scenario(postgres_target(), cluster_workload, Scenario("packed", scenario), tmp_path / "job",
                 env=cluster_env(spark_cluster))
