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
