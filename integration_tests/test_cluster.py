"""The cluster tier: jobs on a Spark standalone cluster (one master, two
workers started from the installed PySpark by the ``spark_cluster``
fixture), where executors are other processes, in other working
directories, with their own Python.

Run alone with ``pytest -m cluster``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eoskit.runtime.dev.cluster import SparkCluster, master_info
from eoskit.runtime.dev.processes import ProcessRef, is_alive

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
