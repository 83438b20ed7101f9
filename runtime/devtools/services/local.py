"""Kafka, PostgreSQL, MariaDB and S3 (moto) as plain local processes under one folder.

This is the default way to get the services eoskit's tests and examples need
on a machine without Docker: no containers, no system services touched,
everything (data, logs, state) under one folder that can be deleted.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from .base import LocalService
from .endpoints import (KAFKA_SASL_PASSWORD, KAFKA_SASL_USER, ServiceEndpoints, mysql_url, postgres_url,
                        s3_endpoint_url)
from .errors import DevServicesError, ServiceStartError
from .kafka import NODE_COUNTS, KafkaService, new_cluster_id
from .mariadb import MariaDBService
from .ports import choose_port, is_port_free
from .postgres import PostgresService, fallback_data_dir
from .processes import ProcessRef, is_alive, start_process, stop_process, tail
from .s3 import S3Service
from .state import STATE_FILE, DevState, ServiceState, load_state, locked, save_state

DEFAULT_ROOT = ".eoskit/dev"

#: The dev services, in the order they start. Their names are what
#: ``eoskit dev up --only`` and ``LocalServices(only=...)`` choose by;
#: ``kafka`` stands for every Kafka node (``kafka-2``, ``kafka-3``).
SERVICES: tuple[type[LocalService], ...] = (KafkaService, PostgresService, MariaDBService, S3Service)
SERVICE_NAMES: tuple[str, ...] = tuple(service.name for service in SERVICES)


def parse_services(names: str | Iterable[str]) -> frozenset[str]:
    """The dev services ``names`` chooses: ``"postgres"``, ``"kafka,s3"``
    (``--only``'s form, blanks around the commas ignored) or those names as
    a list. ValueError naming what is not a dev service, with the names
    that are, or when it names none."""
    parts = names.split(",") if isinstance(names, str) else list(names)
    chosen = [part.strip() for part in parts if part.strip()]
    valid = ", ".join(SERVICE_NAMES)
    if not chosen:
        raise ValueError(f"no dev service named; the dev services are {valid}")
    unknown = [name for name in dict.fromkeys(chosen) if name not in SERVICE_NAMES]
    if unknown:
        raise ValueError(f"no such dev service: {', '.join(unknown)}; the dev services are {valid}")
    return frozenset(chosen)


def recorded_only(root: str | os.PathLike[str]) -> frozenset[str] | None:
    """The services the folder's ``up`` calls chose (``--only``); None: all
    of them (or nothing chose: a new folder, or one from before ``--only``)."""
    only = load_state(Path(root).absolute()).only
    known = frozenset(name for name in only or () if name in SERVICE_NAMES)
    return known or None


@dataclass(frozen=True)
class Placement:
    """Where a service runs: a host of a network lab (``netlab/``), its
    address and network namespace."""

    address: str
    netns: str


class LocalServices:
    """Start, stop and inspect the local services of one folder.

    All methods may be called from different processes (e.g. ``up`` from
    the CLI, ``down`` from a later CLI call); the state file in the folder
    ties them together and a lock file serialises them.
    """

    def __init__(self, root: str | os.PathLike[str] = DEFAULT_ROOT, timeout: float = 60.0,
                 kafka_brokers: int | None = None, kafka_only: bool = False,
                 hosts: Mapping[str, Placement] | None = None,
                 only: str | Iterable[str] | None = None) -> None:
        """``kafka_brokers``: 1 (the default) or 3 Kafka nodes, the extra ones
        the services ``kafka-2`` and ``kafka-3``; None: as many as the folder
        last ran (its state file remembers), else 1. ``kafka_only``: the
        Kafka nodes and nothing else (start them with :meth:`start`, their
        bootstrap is :meth:`kafka_bootstrap`), e.g. a test's own cluster.
        ``hosts``: service name -> the lab host it runs on and listens at
        (network-fault tests); remembered in the state file, so that later
        calls on the folder find them without it. ``only``: the services
        (names of :data:`SERVICES`, see :func:`parse_services`) that ``up``,
        ``start``, ``status``, ``endpoints`` and ``down()`` handle; None: all.
        ``up`` records the choice in the state file (:func:`recorded_only`)."""
        self.root = Path(root).absolute()
        self.timeout = timeout
        recorded = self._recorded_brokers()
        if kafka_brokers is not None and kafka_brokers not in NODE_COUNTS:
            raise ValueError(f"--kafka-brokers {kafka_brokers}: the dev services run "
                             f"{' or '.join(map(str, NODE_COUNTS))} Kafka nodes")
        if kafka_brokers is not None and recorded is not None and kafka_brokers != recorded:
            raise DevServicesError(
                f"the Kafka of {self.root} has {recorded} node(s), and its log directories are formatted for "
                f"that quorum; use another --dir for {kafka_brokers}, or delete this one's data with "
                f"`eoskit dev down --purge --dir {self.root}`")
        self.kafka_brokers = kafka_brokers or recorded or 1
        self.kafka_only = kafka_only
        self.only: frozenset[str] | None = (frozenset({KafkaService.name}) if kafka_only else
                                            None if only is None else parse_services(only))
        self.kafka_nodes = [KafkaService(self.root, node, self.kafka_brokers)
                            for node in range(1, self.kafka_brokers + 1)]
        #: Every service the folder may run, and those this object handles.
        self.every: list[LocalService] = [
            service for cls in SERVICES for service in (self.kafka_nodes if cls is KafkaService else [cls(self.root)])]
        self.services: list[LocalService] = [service for service in self.every if self._chosen(service)]
        self._place(hosts)

    # -- public API -------------------------------------------------------

    def up(self) -> ServiceEndpoints:
        """Start whatever is not running; reuse what is. Returns the endpoints
        (of the chosen services only, with ``only``)."""
        if self.kafka_only:
            raise ValueError("a kafka_only LocalServices has no endpoints of the other services: "
                             "use start() and kafka_bootstrap()")
        state = self.start()
        endpoints = self._endpoints(state)
        if endpoints is None:  # a server died right after it was ready
            raise ServiceStartError(f"a service stopped right after starting; see `eoskit dev status --dir {self.root}`")
        return endpoints

    def start(self) -> DevState:
        """Start whatever is not running; reuse what is (what ``up`` does,
        without the endpoints). A cluster's Kafka nodes start together: none
        answers before a majority of the quorum runs."""
        for service in self.services:  # fail before starting anything
            service.check_installed()
        with locked(self.root):
            state = load_state(self.root)
            state.only = self._record_only(state)
            cluster = self.kafka_brokers > 1 and self.kafka_nodes[0] in self.services
            if cluster:
                state.service("kafka").extra["nodes"] = str(self.kafka_brokers)
            started: list[LocalService] = []
            try:
                if cluster:
                    started += self._start_cluster(state)
                for service in self.services:
                    if service in self.kafka_nodes and self.kafka_brokers > 1:
                        continue
                    if self._ensure_running(service, state):
                        started.append(service)
            except BaseException:
                # Leave nothing half-up behind a failed `up`.
                for service in reversed(started):
                    self._stop(service, state)
                save_state(self.root, state)
                raise
            save_state(self.root, state)
        return state

    def kafka_bootstrap(self) -> str | None:
        """``host:port,...`` of every Kafka node's PLAINTEXT listener if all run, else None."""
        state = load_state(self.root)
        ports = []
        for node in self.kafka_nodes:
            entry = state.services.get(node.name)
            if entry is None or not entry.port or not self._alive(entry):
                return None
            ports.append(entry.port)
        return ",".join(f"{node.address}:{port}" for node, port in zip(self.kafka_nodes, ports))

    def down(self, names: Collection[str] | None = None) -> None:
        """Stop every process this object's services run (without ``only``:
        every process the folder started), or only the services ``names``
        (data is kept)."""
        unknown = set(names or ()) - {service.name for service in self.services}
        if unknown:
            raise ValueError(f"no such dev service: {', '.join(sorted(unknown))}")
        self._stop_all([service for service in self.services if names is None or service.name in names])

    def restart(self, name: str, while_down: Callable[[], None] | None = None) -> None:
        """Stop the running service ``name`` the way ``down`` does and start
        it again on the same port, data kept: what a client sees of a server
        restart, for fault tests. ``while_down`` runs while it is stopped.
        S3 (moto) keeps its data in memory, so it comes back empty.
        Raises ``ServiceStartError`` if the service is not running or its
        port was taken meanwhile (its URL would change)."""
        service = next((s for s in self.services if s.name == name), None)
        if service is None:
            raise ValueError(f"no such dev service: {name}")
        with locked(self.root):
            state = load_state(self.root)
            entry = state.services.get(name)
            if entry is None or not entry.port or not self._alive(entry):
                raise ServiceStartError(f"{name}: not running under {self.root}; nothing to restart")
            port = entry.port
            self._stop(service, state)
            save_state(self.root, state)
            try:
                if while_down is not None:
                    while_down()
            finally:
                # The server closed its clients' connections, so the port has
                # TIME_WAIT sockets for a minute: free for a server (which
                # binds with SO_REUSEADDR), not for a plain bind.
                deadline = time.monotonic() + self.timeout
                while not is_port_free(port) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if not is_port_free(port):
                    raise ServiceStartError(f"{name}: port {port} is taken by another program; "
                                            f"start it again with `eoskit dev up --dir {self.root}`")
                self._ensure_running(service, state, keep_port=True)

    def kill(self, name: str) -> None:
        """SIGKILL the running service ``name`` and its process group: a
        crash, no clean shutdown, its data as the crash leaves it. ``up``
        starts it again on the same port. For fault tests and chaos runs."""
        if name not in {s.name for s in self.services}:
            raise ValueError(f"no such dev service: {name}")
        with locked(self.root):
            entry = load_state(self.root).services.get(name)
            if entry is None or not self._alive(entry):
                raise ServiceStartError(f"{name}: not running under {self.root}; nothing to kill")
            stop_process(ProcessRef(entry.pid, entry.start_time), sig=signal.SIGKILL)

    def purge(self) -> None:
        """Stop everything (whatever ``only`` says) and delete the folder, data included."""
        self._stop_all(list(dict.fromkeys([*self.every, *self.services])))
        state = load_state(self.root)
        recorded = state.service("postgres").extra.get("data_dir")
        for data_dir in {Path(recorded) if recorded else None, fallback_data_dir(self.root)}:
            if data_dir is not None and not data_dir.is_relative_to(self.root):
                shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def status(self) -> dict[str, str]:
        """Service name -> ``"running on ADDRESS (pid N)"`` or ``"stopped"``."""
        state = load_state(self.root)
        result: dict[str, str] = {}
        for service in self.services:
            entry = state.services.get(service.name)
            if entry is not None and self._alive(entry):
                result[service.name] = f"running on {service.describe(entry)} (pid {entry.pid})"
            else:
                result[service.name] = "stopped"
        return result

    def endpoints(self) -> ServiceEndpoints | None:
        """Endpoints if all of this object's services are running, else None."""
        return self._endpoints(load_state(self.root))

    def pids(self) -> dict[str, int]:
        """Pids (= process group ids) of running services, for checks and debugging."""
        state = load_state(self.root)
        return {
            name: entry.pid
            for name, entry in state.services.items()
            if entry.pid is not None and self._alive(entry)
        }

    # -- internals --------------------------------------------------------

    def _chosen(self, service: LocalService) -> bool:
        """Whether ``only`` takes ``service`` (a Kafka node by its class's name, ``kafka``)."""
        return self.only is None or type(service).name in self.only

    def _record_only(self, state: DevState) -> list[str] | None:
        """What the state file says ``up`` chose, after this ``up``: the
        services chosen now and those of the folder that still run, or None
        once that is the whole set (or this ``up`` chose no subset)."""
        if self.only is None:
            return None
        running = {type(service).name for service in self.every
                   if (entry := state.services.get(service.name)) is not None and self._alive(entry)}
        chosen = running | set(self.only)
        return None if chosen >= set(SERVICE_NAMES) else sorted(chosen)

    def _place(self, hosts: Mapping[str, Placement] | None) -> None:
        """Put each service on its lab host: given, or as the state file recorded."""
        unknown = set(hosts or ()) - {service.name for service in self.every}
        if unknown:
            raise ValueError(f"no such dev service: {', '.join(sorted(unknown))}")
        recorded = load_state(self.root).services if (self.root / STATE_FILE).is_file() else {}
        for service in self.every:
            given = (hosts or {}).get(service.name)
            entry = recorded.get(service.name)
            if given is None and entry is not None and entry.extra.get("netns"):
                given = Placement(entry.extra["address"], entry.extra["netns"])
            if given is not None:
                service.address, service.netns = given.address, given.netns

    @staticmethod
    def _alive(entry: ServiceState) -> bool:
        return entry.pid is not None and is_alive(ProcessRef(entry.pid, entry.start_time))

    def _endpoints(self, state: DevState) -> ServiceEndpoints | None:
        """The endpoints of this object's services if all run, else None;
        each at its address (loopback, or its lab host's)."""
        at: dict[str, tuple[str, int]] = {}
        for service in self.services:
            entry = state.services.get(service.name)
            if entry is None or not entry.port or not self._alive(entry):
                return None
            at[service.name] = (service.address, entry.port)
        endpoints = ServiceEndpoints()
        if "postgres" in at:
            endpoints = replace(endpoints, postgres_url=postgres_url(*at["postgres"]))
        if "mariadb" in at:
            endpoints = replace(endpoints, mysql_url=mysql_url(*at["mariadb"]))
        if "s3" in at:
            endpoints = replace(endpoints, s3_endpoint=s3_endpoint_url(*at["s3"]))
        if "kafka" in at:
            nodes = [(node.address, state.services[node.name]) for node in self.kafka_nodes]
            endpoints = replace(endpoints, kafka_bootstrap=",".join(f"{host}:{entry.port}" for host, entry in nodes))
            ca = self.kafka_nodes[0].ca_path
            if state.services["kafka"].ports.get("secure") and ca.is_file():
                endpoints = replace(
                    endpoints, kafka_secure_bootstrap=",".join(f"{host}:{entry.ports['secure']}" for host, entry in nodes),
                    kafka_ca_location=str(ca), kafka_sasl_username=KAFKA_SASL_USER,
                    kafka_sasl_password=KAFKA_SASL_PASSWORD)
        return endpoints

    def _recorded_brokers(self) -> int | None:
        """The Kafka node count the state file remembers, if Kafka ever ran here."""
        entry = load_state(self.root).services.get("kafka")
        if entry is None or not entry.port:
            return None
        return int(entry.extra.get("nodes", "1"))

    def _start_cluster(self, state: DevState) -> list[LocalService]:
        """Start the Kafka nodes that are not running, then wait for each:
        ports of every node chosen (and saved) first, since each node's
        configuration names every controller. The nodes started now."""
        down = [node for node in self.kafka_nodes if not self._alive(state.service(node.name))]
        if down:
            taken = {port for name, entry in state.services.items()
                     if name not in {node.name for node in down} for port in entry.all_ports()}
            for node in down:
                entry = state.service(node.name)
                if not entry.port or "cluster_id" not in entry.extra:  # never formatted: any free port
                    entry.port = choose_port(entry.port, exclude=taken)
                taken.add(entry.port)
                node.settle_ports(entry, taken)
                if node.netns is not None:  # every node's configuration names every node's address
                    entry.extra.update(address=node.address, netns=node.netns)
            state.service("kafka").extra.setdefault("cluster_id", new_cluster_id())
            save_state(self.root, state)
        started: list[LocalService] = []
        try:
            for node in down:
                self._launch(node, state, keep_port=True)
                started.append(node)
            for node in self.kafka_nodes:
                entry = state.service(node.name)
                self._wait_ready(node, entry)
                if node in started and node.node_id == 1:
                    self._bootstrap(node, entry)
        except BaseException:
            for node in reversed(started):
                self._stop(node, state)
            raise
        return started

    def _ensure_running(self, service: LocalService, state: DevState, keep_port: bool = False) -> bool:
        """Make ``service`` accept connections; True if it was started now.
        ``keep_port``: on its remembered port, whatever a plain bind says."""
        entry = state.service(service.name)
        if self._alive(entry):
            self._wait_ready(service, entry)
            return False
        self._launch(service, state, keep_port)
        try:
            self._wait_ready(service, entry)
            self._bootstrap(service, entry)
        except BaseException:
            self._stop(service, state)
            raise
        return True

    def _launch(self, service: LocalService, state: DevState, keep_port: bool = False) -> None:
        """Start ``service``'s process (no waiting); its pid saved at once."""
        entry = state.service(service.name)
        if not (keep_port and entry.port):
            taken = {e.port for name, e in state.services.items() if name != service.name and e.port}
            entry.port = choose_port(entry.port, exclude=taken)
        service.dir.mkdir(parents=True, exist_ok=True)
        service.prepare(entry)
        if service.netns is not None:
            entry.extra.update(address=service.address, netns=service.netns)
        else:
            entry.extra.pop("address", None)
            entry.extra.pop("netns", None)
        spec = service.launch(entry)
        try:
            ref = start_process(spec.argv, service.log_path, env=spec.env, cwd=spec.cwd, user=spec.user,
                                netns=service.netns)
        except OSError as exc:
            raise ServiceStartError(f"{service.name}: could not start {spec.argv[0]}: {exc}") from exc
        entry.pid, entry.start_time = ref.pid, ref.start_time
        save_state(self.root, state)  # recorded at once, so `down` finds it even if we crash

    @staticmethod
    def _bootstrap(service: LocalService, entry: ServiceState) -> None:
        try:
            service.bootstrap(entry)
        except Exception as exc:
            raise ServiceStartError(
                f"{service.name}: creating the eoskit database/user failed: {exc}; log: {service.log_path}"
            ) from exc

    def _wait_ready(self, service: LocalService, entry: ServiceState) -> None:
        """Poll the service's probe until it succeeds, the process dies, or time runs out."""
        deadline = time.monotonic() + self.timeout
        last_error: BaseException | None = None
        while True:
            if not self._alive(entry):
                raise ServiceStartError(
                    f"{service.name}: server exited while starting (port {entry.port}); "
                    f"log: {service.log_path}\n{tail(service.log_path)}"
                )
            try:
                service.probe(entry)
            except Exception as exc:
                last_error = exc
            else:
                # Another program on the same port could have answered the
                # probe while ours failed to bind: make sure ours still runs.
                if self._alive(entry):
                    return
                continue
            if time.monotonic() >= deadline:
                raise ServiceStartError(
                    f"{service.name}: not accepting connections on {service.address}:{entry.port} after "
                    f"{self.timeout:.0f}s (last error: {last_error}); log: {service.log_path}\n"
                    f"{tail(service.log_path)}"
                )
            time.sleep(0.2)

    def _stop_all(self, services: list[LocalService]) -> None:
        """Stop ``services``, the last started first."""
        if not (self.root / STATE_FILE).is_file():
            return  # nothing was ever started here; do not create the folder
        with locked(self.root):
            state = load_state(self.root)
            for service in reversed(services):
                self._stop(service, state)
            save_state(self.root, state)

    def _stop(self, service: LocalService, state: DevState) -> None:
        entry = state.services.get(service.name)
        if entry is None or entry.pid is None:
            return
        stop_process(ProcessRef(entry.pid, entry.start_time), sig=service.stop_signal)
        entry.pid = None
        entry.start_time = None
