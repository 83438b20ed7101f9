"""The job image (docker/Dockerfile) built and run here (containers tier).

The image is built on the local Spark base with the demo's orders job as its
job file. docker/docker-compose.yml brings the services up with
podman-compose (the local images, through the same variables a Docker user
leaves at their official defaults). The job runs in its container on the
compose network and reaches the services by name. It is killed with SIGKILL
(`podman kill`: the container's whole process tree, driver and Python
workers) after its second batch. Once the killed driver's run record is
stale, it is restarted from the same checkpoint in a new container with
--until-caught-up. Then psql, from the host,
sees every order exactly once and nothing left prepared.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from decimal import Decimal
from pathlib import Path

import pytest

from eoskit.runtime.devtools.demo.orders import produce_orders, recreate_topic
from eoskit.runtime.job.control import STALE_AFTER_S, ControlDir
from eoskit.runtime.devtools.podman import PodmanHost
from eoskit.runtime.devtools.podman.images import build_job_image
from eoskit.runtime.devtools.services.kafka import list_topics
from eoskit.runtime.devtools.services.ports import pick_free_port
from eoskit.testing.pytest_plugin import uses_containers

pytestmark = pytest.mark.containers

PROJECT = "eoskit-jobtest"
NETWORK = f"{PROJECT}_default"
ORDERS, PARTITIONS = 20_000, 3
JOB_ENV = {"EOSKIT_KAFKA_BOOTSTRAP": "kafka:19092",
           "EOSKIT_POSTGRES_URL": "postgresql+psycopg://eoskit:eoskit@postgres:5432/eoskit"}


@pytest.fixture(scope="module")
def host(service_endpoints) -> PodmanHost:
    """The session's Podman (the plugin set it up; it undoes it at the end)."""
    if uses_containers(os.environ) != "podman":
        pytest.skip("the job image runs on Podman: the containers tier (`--tier containers`) sets it up")
    return PodmanHost(Path(os.environ["EOSKIT_DEV_DIR"]) / "podman")


def _compose(host: PodmanHost, root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    compose = shutil.which("podman-compose")
    assert compose, "podman-compose is not installed: `bash scripts/containers.sh install` installs it"
    return subprocess.run([compose, "-p", PROJECT, "-f", str(root / "docker" / "docker-compose.yml"), *args],
                          env={**os.environ, **host.env(), **env}, capture_output=True, text=True, timeout=600)


def _psql(port: int, query: str) -> str:
    return subprocess.run(["psql", f"postgresql://eoskit:eoskit@127.0.0.1:{port}/eoskit", "-X", "-A", "-t",
                           "-F", " ", "-c", query], capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def _wait(ready, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ready():
                return
            error = "not yet"
        except Exception as exc:  # noqa: BLE001 - a service still starting
            error = str(exc)
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not ready after {timeout:.0f}s: {error}")
        time.sleep(1)


def _run_job(host: PodmanHost, image: str, name: str, checkpoint: Path, *extra: str, detach: bool) -> str:
    env = [arg for key, value in JOB_ENV.items() for arg in ("-e", f"{key}={value}")]
    done = host.podman("run", *(["-d"] if detach else ["--rm"]), "--name", name, "--network", NETWORK,
                       "-v", f"{checkpoint}:/ckpt", *env, image, "python3", "/opt/eoskit/jobs/run_job.py",
                       "run", "/opt/eoskit/jobs/job.py", "--checkpoint-dir", "/ckpt", *extra, check=False)
    assert done.returncode == 0, f"the job in {name} failed ({done.returncode}):\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def test_the_demo_job_in_the_job_image_is_exact_through_a_kill(host, request, tmp_path):
    root = Path(request.config.rootpath)
    image = build_job_image(host, root, "runtime/devtools/demo/orders_job.py")
    ports = {f"EOSKIT_COMPOSE_{name}_PORT": str(pick_free_port()) for name in ("KAFKA", "POSTGRES", "MYSQL", "S3")}
    kafka, postgres = f"127.0.0.1:{ports['EOSKIT_COMPOSE_KAFKA_PORT']}", int(ports["EOSKIT_COMPOSE_POSTGRES_PORT"])
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    checkpoint.chmod(0o777)  # the image's user is spark (uid 185)
    try:
        up = _compose(host, root, ports, "up", "-d")
        assert up.returncode == 0, f"podman-compose up failed:\n{up.stdout[-2000:]}{up.stderr[-2000:]}"
        _wait(lambda: list_topics(kafka) or True, "kafka")  # raises until the broker answers
        _wait(lambda: _psql(postgres, "SELECT 1") == "1", "postgres")
        recreate_topic(kafka, "orders", PARTITIONS)
        expected = produce_orders(kafka, "orders", ORDERS, PARTITIONS)

        _run_job(host, image, "eoskit-job-1", checkpoint, detach=True)
        _wait(lambda: "[orders_demo] batch 1:" in host.podman("logs", "eoskit-job-1", check=False).stderr,
              "the job's batch 1", timeout=300)
        host.podman("kill", "-s", "KILL", "eoskit-job-1")
        code = host.podman("wait", "eoskit-job-1").stdout.strip()
        assert code == "137", f"the job container ended with {code}, not by SIGKILL"
        at_kill = int(_psql(postgres, "SELECT count(*) FROM orders"))
        assert 0 < at_kill < ORDERS, f"{at_kill} orders at the kill: it was not mid-stream"
        # The killed driver ran on another host (its container): its run record
        # fences the checkpoint until its heartbeat is STALE_AFTER_S old, as for
        # any driver whose pid this host cannot check. A restart waits that out.
        _wait(lambda: ControlDir(str(checkpoint)).live_run() is None, "the killed job's run record to go stale",
              timeout=STALE_AFTER_S * 4)

        log = _run_job(host, image, "eoskit-job-2", checkpoint, "--until-caught-up", detach=False)
        count, distinct, total = _psql(postgres, "SELECT count(*), count(DISTINCT order_id), sum(amount) "
                                                 "FROM orders").split()
        assert (int(count), int(distinct)) == (ORDERS, ORDERS), f"after the restart:\n{log[-2000:]}"
        assert Decimal(total) == expected.amount
        assert _psql(postgres, "SELECT count(*) FROM pg_prepared_xacts") == "0"
    finally:
        for name in ("eoskit-job-1", "eoskit-job-2"):
            host.podman("rm", "-f", name, check=False)
        _compose(host, root, ports, "down", "-v")
        host.podman("network", "rm", "-f", NETWORK, check=False)
