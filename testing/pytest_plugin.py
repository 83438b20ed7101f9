"""pytest fixtures for the services eoskit's tests need: kafka (and its SASL_SSL
listener, ``kafka_secure``), postgres, mysql, s3, and a Spark standalone
cluster (``spark_cluster``).

Registered as the ``eoskit`` pytest11 entry point. Where the services come
from, in order:

1. ``EOSKIT_KAFKA_BOOTSTRAP``, ``EOSKIT_POSTGRES_URL`` and ``EOSKIT_MYSQL_URL``
   all set: used as they are (e.g. after ``eval "$(eoskit dev env)"``, or CI
   services), with ``EOSKIT_S3_ENDPOINT`` for S3 (optional: only tests that
   use S3 fail without it);
2. ``EOSKIT_SERVICES=docker``: containers via testcontainers, on the Docker
   engine ``DOCKER_HOST`` names; ``EOSKIT_SERVICES=podman``: the same on this
   machine's Podman, set up for the session and undone at its end, with the
   local images built from Debian's packages (``eoskit dev podman``,
   docs/dev-services.md);
3. otherwise local processes under ``EOSKIT_DEV_DIR`` (default
   ``.eoskit/test`` in the pytest root dir).

``kafka_cluster`` is a separate three-node Apache Kafka cluster (KRaft,
replication factor 3, ``min.insync.replicas=2``) for the tests that need
replicas, under ``EOSKIT_KAFKA_CLUSTER_DIR`` (default ``.eoskit/kafka-cluster``
in the pytest root dir); the session's one-node broker is left alone.

``network_services`` runs the services again on hosts of their own in a
network lab (as root), beside a job host, for network-fault tests
(docs/network-faults.md).

The Spark cluster is ``EOSKIT_TEST_SPARK_MASTER`` when set (a running
cluster's ``spark://`` URL), else one master and two workers started from the
installed PySpark under ``EOSKIT_CLUSTER_DIR`` (default ``.eoskit/cluster``
in the pytest root dir; ``eoskit.runtime.devtools.services.cluster``).

Nothing starts until a test asks for one of these fixtures, and then only
once per session, and only what it asks for: ``kafka``, ``postgres``,
``mysql`` and ``s3`` each start their own local service alone (a session
whose tests use PostgreSQL alone starts PostgreSQL alone), while
``service_endpoints`` starts all four; the Docker services start as one
set. Services this session started are stopped at its end; services that
were already running are left running.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from eoskit.runtime.devtools.services.cluster import SparkCluster
from eoskit.runtime.devtools.services.endpoints import endpoints_from_env, s3_storage_options as options_for
from eoskit.runtime.devtools.services.kafka import node_service_name
from eoskit.runtime.devtools.services.local import Placement
from eoskit.runtime.devtools.services.netlab import Lab

if TYPE_CHECKING:
    from eoskit.runtime.devtools.services import ServiceEndpoints

DEFAULT_TEST_DIR = ".eoskit/test"
DEFAULT_KAFKA_CLUSTER_DIR = ".eoskit/kafka-cluster"
DEFAULT_CLUSTER_DIR = ".eoskit/cluster"


#: ``EOSKIT_SERVICES`` values that run the services as containers.
CONTAINER_ENGINES = ("docker", "podman")


def uses_containers(environ: Mapping[str, str]) -> str | None:
    """``docker`` or ``podman`` when ``EOSKIT_SERVICES`` asks for containers;
    None when it is unset, empty or ``local``. Any other value is refused,
    by name: a typo would otherwise run the local services unnoticed."""
    engine = environ.get("EOSKIT_SERVICES", "").strip().lower()
    if engine in ("", "local"):
        return None
    if engine not in CONTAINER_ENGINES:
        raise pytest.UsageError(f"EOSKIT_SERVICES={engine!r}: give docker, podman, or local (the default)")
    return engine


class SessionServices:
    """The services of one pytest session, each started when a test first
    asks for it.

    From the environment (``EOSKIT_KAFKA_BOOTSTRAP``, ``EOSKIT_POSTGRES_URL``
    and ``EOSKIT_MYSQL_URL`` all set): used as they are, nothing started.
    With ``EOSKIT_SERVICES=docker`` (or ``podman``): the containers, which
    start as one set at the first ask (on ``podman``, after Podman is set up
    and the local images are built; :meth:`close` undoes the set-up). Otherwise local processes under ``root``, one service
    at a time: :meth:`endpoints` starts the ones asked for that do not run
    (``LocalServices(root, only=...)``), and :meth:`close` stops those this
    session started, unless it is a pytest-xdist worker (the others may
    still use them). ``local`` and ``docker`` make the ``LocalServices`` and
    ``DockerServices`` of ``root``, ``podman`` the ``PodmanEngine`` (tests give
    fakes).
    """

    def __init__(self, root: str | os.PathLike[str], environ: Mapping[str, str],
                 local: Callable[..., Any] | None = None, docker: Callable[..., Any] | None = None,
                 podman: Callable[..., Any] | None = None) -> None:
        self.root = root
        self.environ = environ
        self.given = endpoints_from_env(environ)
        self.engine = uses_containers(environ)
        self.use_docker = self.engine is not None
        self._podman_factory = podman
        self._podman: Any = None
        self.xdist_worker = bool(environ.get("PYTEST_XDIST_WORKER"))
        self._local = local
        self._docker = docker
        self._docker_services: Any = None
        self._docker_started = False
        self._asked: dict[frozenset[str], ServiceEndpoints] = {}
        #: The local services this session started, in the order it did.
        self.started: list[str] = []

    def endpoints(self, *names: str) -> ServiceEndpoints:
        """The endpoints of the dev services ``names`` (``kafka``,
        ``postgres``, ``mariadb``, ``s3``; all of them when none), started
        now if they do not run. Local ones started alone carry only their
        own endpoints; the environment's and Docker's carry every one."""
        if self.given is not None:
            return self.given
        if self.use_docker:
            return self._docker_up()
        key = frozenset(names)
        if key not in self._asked:
            local = self._local_services(only=key or None)
            running = set(local.pids())
            self._asked[key] = local.up()
            self.started += [service.name for service in local.services
                             if service.name not in running and service.name not in self.started]
        return self._asked[key]

    def close(self) -> None:
        """Stop what this session started (Docker's containers, or its local
        services one by one); leave what ran before it."""
        if self._docker_services is not None and self._docker_started:
            self._docker_services.down()
        if self._podman is not None:
            self._podman.down()
        # Under pytest-xdist other workers may still use them: leave them running
        # (stop with `eoskit dev down --dir .eoskit/test`).
        if self.started and not self.xdist_worker:
            self._local_services().down(self.started)

    def _local_services(self, only: frozenset[str] | None = None) -> Any:
        if self._local is None:
            from eoskit.runtime.devtools.services import LocalServices  # looked up per call: tests fake it

            self._local = LocalServices
        return self._local(self.root, only=only)

    def _podman_up(self) -> None:
        """Podman as the engine: set up, the images built, and the session's
        environment pointed at both (image settings given by the user win)."""
        if self._podman_factory is None:
            from eoskit.runtime.devtools.podman import PodmanEngine  # looked up per call: tests fake it

            self._podman_factory = PodmanEngine
        self._podman = self._podman_factory(Path(self.root) / "podman")
        for name, value in self._podman.up().items():
            if name.startswith("EOSKIT_"):
                os.environ.setdefault(name, value)
            else:
                os.environ[name] = value

    def _docker_up(self) -> ServiceEndpoints:
        if self._docker_services is None:
            if self.engine == "podman" and self._podman is None:
                self._podman_up()
            if self._docker is None:
                from eoskit.runtime.devtools.services import DockerServices  # looked up per call: tests fake it

                self._docker = DockerServices
            docker = self._docker(self.root)
            self._docker_started = not all(text.startswith("running") for text in docker.status().values())
            self._docker_services = docker
            self._asked[frozenset()] = docker.up()
        return self._asked[frozenset()]


@pytest.fixture(scope="session")
def eoskit_services(request: pytest.FixtureRequest) -> Iterator[SessionServices]:
    """The session's :class:`SessionServices`: ``eoskit_services.endpoints("postgres")``
    starts (or finds) PostgreSQL alone; the fixtures below go through it."""
    root = os.environ.get("EOSKIT_DEV_DIR") or Path(request.config.rootpath) / DEFAULT_TEST_DIR
    services = SessionServices(root, os.environ)
    try:
        yield services
    finally:
        services.close()


@pytest.fixture(scope="session")
def service_endpoints(eoskit_services: SessionServices) -> ServiceEndpoints:
    """Endpoints of running Kafka, PostgreSQL, MySQL/MariaDB and S3 services (all four started)."""
    return eoskit_services.endpoints()


@pytest.fixture(scope="session")
def kafka(eoskit_services: SessionServices) -> str:
    """Kafka bootstrap servers, ``"127.0.0.1:PORT"`` (Kafka started alone)."""
    return eoskit_services.endpoints("kafka").kafka_bootstrap


@pytest.fixture
def kafka_secure(kafka: str, eoskit_services: SessionServices) -> dict[str, str]:
    """The ``kafka.*`` options, in Spark's names, of a client of the broker's
    SASL_SSL listener (SCRAM-SHA-512 over TLS, a PEM truststore):
    ``kafka.bootstrap.servers``, ``kafka.security.protocol``,
    ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
    ``kafka.ssl.truststore.location`` and ``kafka.ssl.truststore.type``.
    A new dict per test, so a test may change it."""
    options = eoskit_services.endpoints("kafka").kafka_secure_options()
    if options is None:
        pytest.fail(
            "this test needs the Kafka broker's SASL_SSL listener, which the local dev services "
            "offer (not the Docker ones): with EOSKIT_KAFKA_BOOTSTRAP set, also set "
            "EOSKIT_KAFKA_SECURE_BOOTSTRAP, EOSKIT_KAFKA_CA_LOCATION, EOSKIT_KAFKA_SASL_USERNAME "
            'and EOSKIT_KAFKA_SASL_PASSWORD (`eval "$(eoskit dev env)"` exports them)',
            pytrace=False,
        )
    return options


@pytest.fixture(scope="session")
def postgres(eoskit_services: SessionServices) -> str:
    """SQLAlchemy URL of a PostgreSQL database with prepared transactions
    enabled (PostgreSQL started alone)."""
    return eoskit_services.endpoints("postgres").postgres_url


@pytest.fixture(scope="session")
def mysql(eoskit_services: SessionServices) -> str:
    """SQLAlchemy URL (``mysql+pymysql://``) of a MySQL/MariaDB database (MariaDB started alone)."""
    return eoskit_services.endpoints("mariadb").mysql_url


@pytest.fixture(scope="session")
def s3(eoskit_services: SessionServices) -> str:
    """Endpoint URL of an S3-compatible server, ``"http://127.0.0.1:PORT"`` (started alone)."""
    endpoint = eoskit_services.endpoints("s3").s3_endpoint
    if endpoint is None:
        pytest.fail(
            "this test needs S3, but EOSKIT_S3_ENDPOINT is not set while EOSKIT_KAFKA_BOOTSTRAP, "
            "EOSKIT_POSTGRES_URL and EOSKIT_MYSQL_URL are: run `eoskit dev up` and "
            '`eval "$(eoskit dev env)"` again (with your --dir) to export all four',
            pytrace=False,
        )
    return endpoint


@pytest.fixture
def s3_storage_options(s3: str) -> dict[str, Any]:
    """fsspec options for the ``s3`` server: ``fsspec.filesystem("s3", **s3_storage_options)``.

    A new dict per test, so a test may add its own options to it.
    """
    return options_for(s3)


@pytest.fixture
def s3_bucket(s3_storage_options: dict[str, Any]) -> Iterator[str]:
    """The name of a new, empty bucket on the ``s3`` server; deleted with its contents after the test."""
    import fsspec

    # An instance of its own: the test's filesystem objects keep their caches.
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_storage_options)
    name = f"eoskit-test-{uuid.uuid4().hex[:16]}"
    fs.mkdir(name)
    yield name
    fs.invalidate_cache()
    if fs.exists(name):
        fs.rm(name, recursive=True)


class KafkaCluster:
    """A three-node Kafka cluster of local processes: its bootstrap, and
    its nodes as the dev services ``kafka``, ``kafka-2`` and ``kafka-3``
    (broker ids 1, 2, 3) of ``services``, to kill and bring back."""

    def __init__(self, services: Any) -> None:
        self.services = services
        self.bootstrap: str = services.kafka_bootstrap()

    @staticmethod
    def service_of(broker_id: int) -> str:
        """The dev service running broker ``broker_id``."""
        return node_service_name(broker_id)

    def kill(self, broker_id: int) -> None:
        """SIGKILL broker ``broker_id`` (no clean shutdown)."""
        self.services.kill(self.service_of(broker_id))

    def start(self) -> None:
        """Bring back every node that is down, with its data, on its ports."""
        self.services.start()


@pytest.fixture(scope="session")
def kafka_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """A SEPARATE three-node Apache Kafka cluster (three combined broker and
    controller nodes, a static quorum; replication factor 3 for new and
    internal topics, ``min.insync.replicas=2``), started for the session
    when a test first asks for it and stopped at its end (its data kept).
    The session's one-node ``kafka`` is another broker, left alone."""
    if uses_containers(os.environ):
        pytest.skip("the three-node Kafka cluster runs as local processes, and the services run in containers")
    from eoskit.runtime.devtools.services import LocalServices  # looked up per call: tests fake it

    root = os.environ.get("EOSKIT_KAFKA_CLUSTER_DIR") or Path(request.config.rootpath) / DEFAULT_KAFKA_CLUSTER_DIR
    services = LocalServices(root, kafka_brokers=3, kafka_only=True)
    running_before = set(services.pids())
    services.start()
    try:
        yield KafkaCluster(services)
    finally:
        if not running_before and not os.environ.get("PYTEST_XDIST_WORKER"):
            services.down()


@pytest.fixture(scope="session")
def spark_cluster(request: pytest.FixtureRequest) -> Iterator[str]:
    """Master URL (``spark://127.0.0.1:PORT``) of a Spark standalone cluster.

    Started here: one master and two workers, each offering one core and
    1 GB, whose own ``python3`` is a bare virtualenv without eoskit (a job
    names its executors' Python itself: ``PYSPARK_PYTHON``, or a shipped
    environment). Stopped at the end of the session, executors included.
    """
    given = os.environ.get("EOSKIT_TEST_SPARK_MASTER")
    if given:
        yield given
        return
    root = os.environ.get("EOSKIT_CLUSTER_DIR") or Path(request.config.rootpath) / DEFAULT_CLUSTER_DIR
    cluster = SparkCluster(root, workers=2, cores=1, memory="1g", bare_worker_python=True)
    try:
        yield cluster.up()
    finally:
        cluster.down()


# -- the network lab: every party on a host of its own ----------------------

class NetServices:
    """A network lab (``eoskit.runtime.devtools.services.netlab``) with the dev services on
    hosts of their own (``kafka``, ``postgres``, ``mariadb``, ``s3``) and a
    ``job`` host for the jobs under test; the test process reaches every
    host from the root namespace (the lab's tester), whatever faults are
    made between the hosts."""

    def __init__(self, lab, hosts, services, endpoints) -> None:
        self.lab, self.hosts, self.services, self.endpoints = lab, hosts, services, endpoints

    @property
    def job(self):
        return self.hosts["job"]

    def launcher(self) -> tuple[str, ...]:
        """What runs a job's command on the job host (``Run.launcher``)."""
        return tuple(self.job.argv([]))


@contextmanager
def services_on_lab_hosts(root: Path, names: Iterable[str], *, subnet: str | None = None,
                          timeout: float = 3600.0, **local: Any) -> Iterator[tuple[Any, dict[str, Any], Any]]:
    """A network lab started (its tester link made), a host in it for each
    service ``names`` and for the ``job``, and the ``LocalServices`` of
    ``root`` placed on those hosts (``local``: its other arguments), not yet
    started: ``(lab, hosts, services)``. At the end the services are
    stopped and the lab removed, every namespace, link and rule, whatever
    happened. Skips, saying why, where a lab cannot run."""
    from eoskit.runtime.devtools.services import LocalServices  # looked up per call: tests fake it
    why = Lab.available()
    if why is not None:
        pytest.skip(f"the network lab cannot run here: {why}")
    lab = Lab(timeout=timeout, **({} if subnet is None else {"subnet": subnet})).start()
    services = None
    try:
        lab.tester()
        hosts = {name: lab.host(name) for name in ("job", *names)}
        services = LocalServices(root, hosts={name: Placement(h.ip, h.netns) for name, h in hosts.items()
                                              if name != "job"}, **local)
        yield lab, hosts, services
    finally:
        try:
            if services is not None:
                services.down()
        finally:
            lab.close()


@pytest.fixture(scope="session")
def network_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetServices]:
    """A network lab (``eoskit.runtime.devtools.services.netlab``) with the dev services on
    hosts of their own and a ``job`` host, started once per session (about
    10 s) when a test first asks, and removed at its end, every namespace,
    link and rule with them. Skips, saying why, where a lab cannot run (not
    root, no iptables). Run a job on the job host with
    ``Run(..., launcher=network_services.launcher())``, make faults with
    ``network_services.lab`` between ``.job`` and ``.hosts["postgres"]``
    (``kafka``, ``mariadb``, ``s3``), and read the services from the test at
    ``.endpoints`` (the lab's tester link)."""
    with services_on_lab_hosts(tmp_path_factory.mktemp("net-services"),
                               ("kafka", "postgres", "mariadb", "s3"), timeout=4 * 3600.0) as (lab, hosts, services):
        yield NetServices(lab, hosts, services, services.up())
