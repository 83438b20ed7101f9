"""pytest fixtures for the services eoskit's tests need: kafka, postgres, mysql.

Registered as the ``eoskit`` pytest11 entry point. Where the services come
from, in order:

1. ``EOSKIT_KAFKA_BOOTSTRAP``, ``EOSKIT_POSTGRES_URL`` and ``EOSKIT_MYSQL_URL``
   all set: used as they are (e.g. after ``eval "$(eoskit dev env)"``, or CI
   services);
2. ``EOSKIT_SERVICES=docker``: containers via testcontainers;
3. otherwise local processes under ``EOSKIT_DEV_DIR`` (default
   ``.eoskit/test`` in the pytest root dir).

Nothing starts until a test asks for one of these fixtures, and then only
once per session. Services this session started are stopped at its end;
services that were already running are left running.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from eoskit.runtime.dev import ServiceEndpoints

DEFAULT_TEST_DIR = ".eoskit/test"


@pytest.fixture(scope="session")
def service_endpoints(request: pytest.FixtureRequest) -> Iterator[ServiceEndpoints]:
    """Endpoints of running Kafka, PostgreSQL and MySQL/MariaDB services."""
    # Imported here so that merely having the plugin installed costs nothing.
    from eoskit.runtime.dev import DockerServices, LocalServices
    from eoskit.runtime.dev.endpoints import endpoints_from_env

    given = endpoints_from_env(os.environ)
    if given is not None:
        yield given
        return
    root = os.environ.get("EOSKIT_DEV_DIR") or Path(request.config.rootpath) / DEFAULT_TEST_DIR
    if os.environ.get("EOSKIT_SERVICES", "").strip().lower() == "docker":
        docker = DockerServices(root)
        started_here = not all(text.startswith("running") for text in docker.status().values())
        endpoints = docker.up()
        yield endpoints
        if started_here:
            docker.down()
        return
    local = LocalServices(root)
    started_here = local.endpoints() is None
    endpoints = local.up()
    yield endpoints
    # Under pytest-xdist other workers may still use them: leave them running
    # (stop with `eoskit dev down --dir .eoskit/test`).
    if started_here and not os.environ.get("PYTEST_XDIST_WORKER"):
        local.down()


@pytest.fixture(scope="session")
def kafka(service_endpoints: ServiceEndpoints) -> str:
    """Kafka bootstrap servers, ``"127.0.0.1:PORT"``."""
    return service_endpoints.kafka_bootstrap


@pytest.fixture(scope="session")
def postgres(service_endpoints: ServiceEndpoints) -> str:
    """SQLAlchemy URL of a PostgreSQL database with prepared transactions enabled."""
    return service_endpoints.postgres_url


@pytest.fixture(scope="session")
def mysql(service_endpoints: ServiceEndpoints) -> str:
    """SQLAlchemy URL (``mysql+pymysql://``) of a MySQL/MariaDB database."""
    return service_endpoints.mysql_url
