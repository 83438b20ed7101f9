"""The same services as containers, for machines with a Docker engine (or
Podman's Docker-compatible socket, ``eoskit dev podman up``).

Uses testcontainers: apache/kafka (single-node KRaft), postgres:16 with
prepared transactions enabled, mysql:8 and motoserver/moto (S3, in memory),
each replaceable by a setting (``IMAGE_SETTINGS``: the local images built
from Debian's packages keep the same contracts, so this code runs unchanged
on either). The container ids and ports go to ``docker.json`` in the folder
so that ``down`` and ``env`` work from a later process (the CLI), exactly
like the local services' state file.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .endpoints import DATABASE, PASSWORD, USER, ServiceEndpoints, mysql_url, postgres_url, s3_endpoint_url
from .errors import DevServicesError, ServiceStartError
from .kafka import DEV_SETTINGS, list_topics
from .ports import pick_free_port
from .s3 import list_buckets

STATE_FILE = "docker.json"
MOTO_PORT = 5000  # where moto_server listens inside the image


@dataclass(frozen=True)
class ImageSetting:
    """The image one service's container runs: the variable that names it and
    the official image it defaults to (docs/dev-services.md lists them)."""

    service: str
    env: str
    default: str
    #: What of the official image's contract eoskit uses (the docs' table).
    help: str


IMAGE_SETTINGS = (
    ImageSetting("kafka", "EOSKIT_KAFKA_IMAGE", "apache/kafka:3.9.1",
                 "`KAFKA_*` variables as `server.properties` (`__` for `_`, `___` for `-`), KRaft, port 9092"),
    ImageSetting("postgres", "EOSKIT_POSTGRES_IMAGE", "postgres:16",
                 "`POSTGRES_USER`, `POSTGRES_PASSWORD`, `POSTGRES_DB`, arguments to `postgres`, `psql` inside "
                 "(testcontainers' readiness check), port 5432"),
    ImageSetting("mysql", "EOSKIT_MYSQL_IMAGE", "mysql:8",
                 "`MYSQL_ROOT_PASSWORD`, `MYSQL_DATABASE`, `MYSQL_USER`, `MYSQL_PASSWORD`, \"ready for "
                 "connections\" logged twice (testcontainers' readiness check), port 3306"),
    ImageSetting("s3", "EOSKIT_S3_IMAGE", "motoserver/moto:5.0.28", "moto's server on port 5000, in memory"),
)


def images(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Service -> the image its container runs: the setting, else the official one."""
    environ = os.environ if environ is None else environ
    return {s.service: (environ.get(s.env) or "").strip() or s.default for s in IMAGE_SETTINGS}


def image_settings_docs() -> list[str]:
    """docs/dev-services.md's table of the image settings (scripts/options_docs.py)."""
    rows = ["| variable | default | the contract eoskit uses |", "| --- | --- | --- |"]
    return rows + [f"| `{s.env}` | `{s.default}` | {s.help} |" for s in IMAGE_SETTINGS]


SERVICES = ("kafka", "postgres", "mysql", "s3")
_NO_DOCKER = (
    "Docker engine not reachable ({error}). Start Docker, or use the local services instead: "
    "`eoskit dev up` without --docker (and unset EOSKIT_SERVICES)."
)


def _docker_client() -> Any:
    """A connected Docker client, or a clear error when there is no engine."""
    try:
        import docker
    except ImportError as exc:
        raise DevServicesError("Docker services need testcontainers: pip install 'eoskit[test]'") from exc
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        raise DevServicesError(_NO_DOCKER.format(error=exc)) from exc
    return client


def _kafka_env(host_port: int) -> dict[str, str]:
    """Single-node KRaft, advertised on the fixed host port so clients outside
    reach it, with the local dev broker's settings (kafka.DEV_SETTINGS): the
    tests' timings assume them, whichever broker they run on."""
    return {
        **{f"KAFKA_{name.upper().replace('.', '_')}": value for name, value in DEV_SETTINGS.items()},
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        # Clients outside reach PLAINTEXT through the published host port; the
        # broker reaches itself (transaction markers, the group coordinator's
        # writes) on BROKER inside the container, where that host port does
        # not exist: with one advertised listener its transactions never end.
        "KAFKA_LISTENERS": "PLAINTEXT://:9092,BROKER://:9094,CONTROLLER://:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://127.0.0.1:{host_port},BROKER://localhost:9094",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "BROKER",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
    }


class DockerServices:
    """Kafka, PostgreSQL, MySQL and S3 in containers, with the local services' API.

    ``keep=True`` (the CLI) disables the testcontainers reaper so containers
    outlive the process that started them; otherwise they are also removed
    when that process exits, even if ``down`` is never called.
    """

    def __init__(self, root: str | os.PathLike[str] = ".eoskit/dev", keep: bool = False, timeout: float = 120.0,
                 environ: Mapping[str, str] | None = None) -> None:
        self.root = Path(root).absolute()
        self.keep = keep
        self.timeout = timeout
        self.images = images(environ)

    @property
    def state_path(self) -> Path:
        return self.root / STATE_FILE

    def up(self) -> ServiceEndpoints:
        """Start the containers unless this folder's are already running."""
        client = _docker_client()
        current = self.endpoints()
        if current is not None and self._all_running(client):
            return current
        if self._state() is not None:
            # Some died, or the folder predates a service: start the set anew.
            self.down()
        if self.keep:
            from testcontainers.core.config import testcontainers_config

            testcontainers_config.ryuk_disabled = True
        started: dict[str, Any] = {}
        try:
            bootstrap = self._start_kafka(started)
            pg_host, pg_port = self._start_postgres(started)
            my_host, my_port = self._start_mysql(started)
            s3_port = self._start_s3(started)
        except Exception as exc:
            for container in started.values():
                container.stop()
            if isinstance(exc, DevServicesError):
                raise
            raise ServiceStartError(f"docker: starting containers failed: {exc}") from exc
        state = {
            "containers": {name: c.get_wrapped_container().id for name, c in started.items()},
            "kafka_bootstrap": bootstrap,
            "postgres": [pg_host, pg_port],
            "mysql": [my_host, my_port],
            "s3": ["127.0.0.1", s3_port],
        }
        self.root.mkdir(parents=True, exist_ok=True)
        self.state_path.write_text(json.dumps(state, indent=2) + "\n")
        endpoints = self.endpoints()
        assert endpoints is not None
        return endpoints

    def down(self) -> None:
        """Remove this folder's containers (and their volumes)."""
        state = self._state()
        if state is None:
            return
        client = _docker_client()
        import docker.errors

        for container_id in state["containers"].values():
            try:
                client.containers.get(container_id).remove(force=True, v=True)
            except docker.errors.NotFound:
                pass
        self.state_path.unlink(missing_ok=True)

    def status(self) -> dict[str, str]:
        """Service name -> "running on ..." / "stopped", as Docker sees it."""
        state = self._state()
        if state is None:
            return {name: "stopped" for name in SERVICES}
        client = _docker_client()
        result = {}
        addresses = {
            "kafka": state["kafka_bootstrap"],
            "postgres": "{}:{}".format(*state["postgres"]),
            "mysql": "{}:{}".format(*state["mysql"]),
            "s3": s3_endpoint_url(*state["s3"]) if "s3" in state else "",
        }
        for name in SERVICES:
            container_id = state["containers"].get(name)
            running = container_id is not None and self._is_running(client, container_id)
            result[name] = f"running on {addresses[name]} (container {container_id[:12]})" if running else "stopped"
        return result

    def containers(self) -> dict[str, str]:
        """Service -> the id of its container, as the last ``up`` recorded."""
        return dict((self._state() or {"containers": {}})["containers"])

    def endpoints(self) -> ServiceEndpoints | None:
        """Endpoints recorded by the last ``up`` of this folder, if any."""
        state = self._state()
        if state is None:
            return None
        return ServiceEndpoints(
            kafka_bootstrap=state["kafka_bootstrap"],
            postgres_url=postgres_url(*state["postgres"]),
            mysql_url=mysql_url(*state["mysql"]),
            s3_endpoint=s3_endpoint_url(*state["s3"]) if "s3" in state else None,
        )

    # -- internals --------------------------------------------------------

    def _state(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return None

    def _all_running(self, client: Any) -> bool:
        containers = self.containers()
        return set(containers) == set(SERVICES) and all(self._is_running(client, cid) for cid in containers.values())

    @staticmethod
    def _is_running(client: Any, container_id: str) -> bool:
        import docker.errors

        try:
            return client.containers.get(container_id).status == "running"
        except docker.errors.NotFound:
            return False

    def _start_kafka(self, started: dict[str, Any]) -> str:
        from testcontainers.core.container import DockerContainer

        port = pick_free_port()
        container = DockerContainer(self.images["kafka"]).with_bind_ports(9092, port)
        for key, value in _kafka_env(port).items():
            container.with_env(key, value)
        started["kafka"] = container.start()
        bootstrap = f"127.0.0.1:{port}"
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                list_topics(bootstrap)
                return bootstrap
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise ServiceStartError(f"kafka container not ready after {self.timeout:.0f}s: {exc}") from exc
                time.sleep(1)

    def _start_postgres(self, started: dict[str, Any]) -> tuple[str, int]:
        try:
            from testcontainers.community.postgres import PostgresContainer
        except ImportError:  # testcontainers < 4.14
            from testcontainers.postgres import PostgresContainer

        container = PostgresContainer(
            self.images["postgres"], username=USER, password=PASSWORD, dbname=DATABASE, driver="psycopg"
        ).with_command("-c max_prepared_transactions=64 -c max_connections=200")
        started["postgres"] = container.start()
        return container.get_container_host_ip(), int(container.get_exposed_port(5432))

    def _start_mysql(self, started: dict[str, Any]) -> tuple[str, int]:
        import pymysql

        try:
            from testcontainers.community.mysql import MySqlContainer
        except ImportError:  # testcontainers < 4.14
            from testcontainers.mysql import MySqlContainer

        root_password = secrets.token_hex(16)
        container = MySqlContainer(
            self.images["mysql"], username=USER, password=PASSWORD, dbname=DATABASE, root_password=root_password
        )
        started["mysql"] = container.start()
        host, port = container.get_container_host_ip(), int(container.get_exposed_port(3306))
        # Same rights as the local MariaDB user: tests create databases and run
        # XA RECOVER (MySQL 8 names that right apart; MariaDB's ALL holds it).
        conn = pymysql.connect(host=host, port=port, user="root", password=root_password, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("GRANT ALL PRIVILEGES ON *.* TO %s@'%%'", (USER,))
                cur.execute("SELECT VERSION()")
                if "mariadb" not in str(cur.fetchone()[0]).lower():
                    cur.execute("GRANT XA_RECOVER_ADMIN ON *.* TO %s@'%%'", (USER,))
        finally:
            conn.close()
        return host, port

    def _start_s3(self, started: dict[str, Any]) -> int:
        from testcontainers.core.container import DockerContainer

        port = pick_free_port()
        started["s3"] = DockerContainer(self.images["s3"]).with_bind_ports(MOTO_PORT, port).start()
        endpoint = s3_endpoint_url("127.0.0.1", port)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                list_buckets(endpoint)
                return port
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise ServiceStartError(f"s3 (moto) container not ready after {self.timeout:.0f}s: {exc}") from exc
                time.sleep(1)
