"""The containers tier (``--tier containers``, ``EOSKIT_SERVICES=podman``):
the services as containers of the local images on this machine's Podman,
through the same testcontainers backend a Docker user's tests take, and one
crash scenario per sink against them.

The session's services come from the pytest plugin: it sets Podman up,
builds the local images (``eoskit dev podman``), starts the four containers
through ``DockerServices`` and, at the session's end, removes them and
restores the host's network, checking that nothing it made is left.
Each sink is killed (driver SIGKILL at a point of the protocol), restarted,
and read by its independent reader, as in the conformance suites.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eoskit.runtime.devtools.services import DockerServices
from eoskit.runtime.devtools.services.docker import images
from eoskit.testing.conformance import Workload, run_scenario, scenarios_for
from eoskit.testing.conformance.files import S3FilesTarget
from eoskit.testing.conformance.kafka import KafkaTopicTarget
from eoskit.testing.conformance.mysql import CLIENT, MySQLTarget
from eoskit.testing.conformance.postgres import PostgresTarget

pytestmark = pytest.mark.containers


def _scenario(mode: str, name: str, target: type | None = None):
    return next(s for s in scenarios_for(mode, target) if s.name == name)


@pytest.fixture(scope="module")
def workload(kafka: str) -> Workload:
    return Workload.produce(kafka, records=12_000, partitions=4, batches=4)


@pytest.fixture(scope="module")
def containers(service_endpoints) -> dict[str, str]:
    """Service -> the id of the container it runs in."""
    if os.environ.get("EOSKIT_SERVICES", "").strip().lower() != "podman":
        pytest.skip("the containers tier runs with EOSKIT_SERVICES=podman (`--tier containers` sets it)")
    return DockerServices(os.environ["EOSKIT_DEV_DIR"]).containers()


def test_each_service_runs_in_a_container_of_its_local_image(containers):
    import docker

    client = docker.from_env()
    wanted = images()
    assert set(containers) == {"kafka", "postgres", "mysql", "s3"}
    for service, container_id in containers.items():
        container = client.containers.get(container_id)
        assert container.status == "running", f"{service}: {container.status}"
        assert container.attrs["Config"]["Image"] == wanted[service], service
        assert wanted[service].startswith("localhost/eoskit-"), f"{service} runs {wanted[service]}"


def test_postgres_exact_through_a_driver_kill(containers, spark, postgres, workload, tmp_path):
    scenario = _scenario("twophase", "driver_killed_after_decision")
    run_scenario(PostgresTarget(postgres), workload, scenario, tmp_path, spark)


def test_mariadb_exact_through_a_driver_kill(containers, spark, mysql, workload, tmp_path):
    if CLIENT is None:
        pytest.skip("the mariadb (or mysql) command-line client is not installed")
    target = MySQLTarget(mysql)
    run_scenario(target, workload, _scenario("twophase", "driver_killed_after_some_commits"), tmp_path, spark)
    assert target.left_prepared == [], f"XA RECOVER listed {target.left_prepared}"


def test_kafka_exact_through_a_driver_kill(containers, spark, kafka, workload, tmp_path):
    scenario = _scenario("idempotent", "driver_killed_after_some_task_commits", KafkaTopicTarget)
    run_scenario(KafkaTopicTarget(kafka), workload, scenario, tmp_path, spark)


def test_files_on_s3_exact_through_a_driver_kill(containers, spark, s3, s3_bucket, workload, tmp_path):
    scenario = _scenario("twophase", "driver_killed_after_some_commits")
    run_scenario(S3FilesTarget(s3, s3_bucket), workload, scenario, tmp_path / "work", spark)


def test_the_plugin_example_suite_runs_on_containers_as_a_docker_user_runs_it(containers, request, tmp_path):
    """docs/plugins.md's worked example (examples/sqlite-sink) run as its author
    would on a machine with Docker: its own pytest session in its own folder,
    ``EOSKIT_SERVICES=docker`` and ``DOCKER_HOST`` (here Podman's socket, set
    up by this session). Its session starts its own containers of the same
    images and removes them at its end; the scenarios the submission tier
    keeps (a driver and a worker kill per commit mode) and its protocol
    tests run, none skipped."""
    import shutil
    import subprocess
    import sys

    import docker

    example = tmp_path / "sqlite-sink"
    shutil.copytree(Path(request.config.rootpath) / "examples" / "sqlite-sink" / "tests", example / "tests")
    env = {**os.environ, "EOSKIT_SERVICES": "docker", "EOSKIT_DEV_DIR": str(tmp_path / "services")}
    # As docs/conformance.md runs a plug-in's suite: pytest -p eoskit.testing.pytest_plugin tests
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "eoskit.testing.pytest_plugin",
                           "-p", "no:cacheprovider", "-m", "not full",
                           "tests"], cwd=example, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "skipped" not in summary and "deselected" in summary, summary
    # Its containers are gone (no Ryuk: its session removed them); this session's run on.
    client = docker.from_env()
    left = [c.name for c in client.containers.list(all=True) if c.id not in containers.values()]
    assert left == [], f"the example's session left containers: {left}"


def test_eoskit_dev_up_docker_starts_and_removes_its_containers(containers, tmp_path):
    """The CLI's container path, as a user runs it after ``eval "$(eoskit dev
    podman up)"``: ``up --docker``, ``status``, ``env``, ``down``, each a
    process of its own (the folder's docker.json carries the ids)."""
    import subprocess
    import sys

    import docker

    folder = str(tmp_path / "dev")

    def eoskit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "eoskit.runtime.cli", "dev", *args, "--dir", folder],
                              capture_output=True, text=True, timeout=300)

    up = eoskit("up", "--docker")
    assert up.returncode == 0, up.stderr
    ids = DockerServices(folder).containers()
    assert set(ids) == {"kafka", "postgres", "mysql", "s3"}
    status = eoskit("status", "--json")
    assert status.returncode == 0 and status.stdout.count('"running": true') == 4, status.stdout
    assert "EOSKIT_KAFKA_BOOTSTRAP=" in eoskit("env").stdout
    down = eoskit("down")
    assert down.returncode == 0, down.stderr
    client = docker.from_env()
    left = [c.name for c in client.containers.list(all=True) if c.id in ids.values()]
    assert left == [], f"`eoskit dev down` left {left}"
