"""Kafka for local development: Apache Kafka in KRaft mode, as a JVM process.

One node is both broker and controller (``process.roles=broker,controller``)
and listens on 127.0.0.1 only: clients on the service's port (PLAINTEXT), the
controller on a second port, and a SASL_SSL listener (SCRAM-SHA-512 over TLS)
on a third, all three remembered in the state file. The secure listener's CA
and server certificate are made once by the ``openssl`` command under
``kafka/tls`` (``ca.pem`` is what clients trust); its SCRAM user is created
over the PLAINTEXT listener after each start, idempotently. Its log directory
lives under the service folder, is formatted once, and is kept across
``down``/``up`` and across a killed broker: a broker started again on the
same folder has every committed record, on the same ports.

Kafka is not on PyPI: its jars are fetched once from Maven Central into a
per-user cache, and Java 17 or newer runs it (``kafka_jars.py``).
"""

from __future__ import annotations

import base64
import logging
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import ClassVar

from .base import LaunchSpec, LocalService
from .endpoints import HOST, KAFKA_SASL_MECHANISM, KAFKA_SASL_PASSWORD, KAFKA_SASL_USER
from .errors import MissingBinaryError, ServiceStartError
from .kafka_jars import check_java, fetch_kafka, kafka_version
from .ports import accepts_connections, is_port_free, pick_free_port
from .processes import run_logged, tail
from .state import ServiceState, load_state

#: The broker's JVM: a small heap is plenty for a one-node test broker.
JVM_OPTIONS = (
    "-Xms256m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
#: Each node of a three-node cluster: three JVMs share a small machine.
CLUSTER_JVM_OPTIONS = ("-Xms256m", "-Xmx384m", *JVM_OPTIONS[2:])
#: Short-lived tools (the storage formatter): start fast, stay small.
TOOL_JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")

NODE_ID = 1
#: The node counts ``eoskit dev up --kafka-brokers`` offers: one (the
#: default) or three (replicas, for fault tests).
NODE_COUNTS = (1, 3)


def node_service_name(node_id: int) -> str:
    """The dev service running Kafka node ``node_id``: ``kafka``, ``kafka-2``, ``kafka-3``."""
    return "kafka" if node_id == NODE_ID else f"kafka-{node_id}"

# The server log (stdout, which is the service's log file): warnings and
# errors, plus the few INFO lines that say what the broker is doing as it
# starts, registers, recovers its logs and stops. Kafka's INFO level as a
# whole writes its full configuration several times per start and a line
# per partition and metadata record. No shutdown hook: log4j would stop
# logging before Kafka's own hook has shut the broker down.
LOG4J2_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by eoskit at every start of the dev broker; edits are lost. -->
<Configuration status="WARN" shutdownHook="disable">
  <Appenders>
    <Console name="log" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="WARN"><AppenderRef ref="log"/></Root>
    <Logger name="kafka.server.KafkaRaftServer" level="INFO"/>
    <Logger name="kafka.server.BrokerServer" level="INFO"/>
    <Logger name="org.apache.kafka.server.BrokerLifecycleManager" level="INFO"/>
    <Logger name="org.apache.kafka.storage.internals.log.LogManager" level="INFO"/>
  </Loggers>
</Configuration>
"""

# librdkafka logs every refused connection while the broker starts; readiness
# polling expects those, so they go to a silent logger.
_QUIET = logging.getLogger("eoskit.runtime.devtools.services.kafka.probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


# -- the broker's configuration ------------------------------------------------------


#: The dev broker's settings beside its node id, quorum, listeners and log
#: directory: :func:`server_properties` writes them after those, in this order.
DEV_SETTINGS = {
    # One broker: every replication factor is 1.
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    # Fewer internal partitions than the default 50 each: less to create
    # and to load at every start.
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.num.partitions": "10",
    # Topics are created on first use, as Kafka's default and the Kafka
    # sink's users expect (tests create theirs explicitly anyway).
    "auto.create.topics.enable": "true",
    "group.initial.rebalance.delay.ms": "0",
    # A transaction past its producer's transaction.timeout.ms is aborted
    # within a second, not ten: tests of a stalled task wait less.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    # The log cleaner looks for a log to compact every second, not 15 s:
    # tests of compacted topics wait less.
    "log.cleaner.backoff.ms": "1000",
    # A broker killed without a clean shutdown may register again only once
    # its old registration's session has expired (9 s by default).
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "1000",
    # The log cleaner's dedupe buffer is allocated on the heap (128 MB by default).
    "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
}


def server_properties(port: int, controller_port: int, data_dir: Path, secure_port: int | None = None,
                      keystore: Path | None = None, *, node_id: int = NODE_ID,
                      voters: Mapping[int, int] | None = None, host: str = HOST,
                      voter_hosts: Mapping[int, str] | None = None) -> dict[str, str]:
    """``server.properties`` of the one-node dev broker; with ``secure_port`` and
    ``keystore`` (PKCS12, :data:`KEYSTORE_PASSWORD`) also a SASL_SSL listener.

    ``voters`` (node id -> controller port, this node's among them) makes it
    node ``node_id`` of a cluster of combined broker and controller nodes
    with that static quorum: replication factor 3 (at most the node count)
    for new and internal topics, two in-sync replicas required. ``host``:
    the address it listens on and advertises (a network lab's host; every
    node's in ``voter_hosts``, by node id, default ``host``)."""
    voters = dict(voters) if voters else {node_id: controller_port}
    if voters.get(node_id) != controller_port:
        raise ValueError(f"node {node_id}'s controller port {controller_port} is not among the voters {voters}")
    properties = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        # A static quorum: the controllers' addresses come from here at every
        # start, so a one-node controller port that had to change is no problem.
        "controller.quorum.voters": ",".join(f"{n}@{(voter_hosts or {}).get(n, host)}:{p}"
                                             for n, p in sorted(voters.items())),
        "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data_dir),
        **DEV_SETTINGS,
    }
    if len(voters) > 1:
        replicas, isr = str(min(3, len(voters))), str(min(2, len(voters)))
        properties.update({
            "default.replication.factor": replicas,
            "min.insync.replicas": isr,
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": isr,
        })
    if secure_port is not None and keystore is not None:
        properties.update(_sasl_ssl_listener(host, port, secure_port, controller_port, keystore))
    return properties


def _sasl_ssl_listener(host: str, port: int, secure_port: int, controller_port: int,
                      keystore: Path) -> dict[str, str]:
    """The settings that add the SASL_SSL listener (SCRAM over TLS, the
    keystore's certificate) to the PLAINTEXT and controller ones."""
    secure = "listener.name.sasl_ssl."
    return {
        "listeners": f"PLAINTEXT://{host}:{port},SASL_SSL://{host}:{secure_port},"
                     f"CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{port},SASL_SSL://{host}:{secure_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": KAFKA_SASL_MECHANISM,
        f"{secure}{KAFKA_SASL_MECHANISM.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        f"{secure}ssl.keystore.type": "PKCS12",
        f"{secure}ssl.keystore.location": str(keystore),
        f"{secure}ssl.keystore.password": KEYSTORE_PASSWORD,
        f"{secure}ssl.client.auth": "none",
    }


def render_properties(properties: Mapping[str, str]) -> str:
    """A Java properties file (values escaped: backslashes, leading blanks, line breaks)."""
    lines = ["# Written by eoskit at every start of the dev broker; edits are lost."]
    for key, value in properties.items():
        escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        if escaped[:1] in (" ", "\t"):
            escaped = "\\" + escaped
        lines.append(f"{key}={escaped}")
    return "\n".join(lines) + "\n"


def new_cluster_id() -> str:
    """A random cluster id in Kafka's form (a UUID, base64url without padding, never starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


#: The broker's PKCS12 keystore password (loopback dev broker only; clients
#: never need it: they trust ``ca.pem``).
KEYSTORE_PASSWORD = "eoskit-dev-keystore"
CA_FILE = "ca.pem"
KEYSTORE_FILE = "server.p12"
#: What ``openssl`` runs to make the dev CA and the broker's certificate.
_SERVER_EXT = "subjectAltName={names}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
#: Beside the keystore: the names its certificate was made for.
_NAMES_FILE = "names"


def ensure_tls(tls_dir: Path, addresses: Iterable[str] = (HOST,)) -> tuple[Path, Path]:
    """The dev CA (PEM) and the brokers' PKCS12 keystore under ``tls_dir``,
    made once with the ``openssl`` command (a certificate for 127.0.0.1,
    localhost and ``addresses``, the brokers' own where they run on a network
    lab's hosts, signed by a CA of its own, valid ten years) and kept after
    (made again for other addresses)."""
    ca, keystore = tls_dir / CA_FILE, tls_dir / KEYSTORE_FILE
    names = ",".join(dict.fromkeys(["IP:127.0.0.1", *(f"IP:{a}" for a in sorted(addresses)),
                                    "DNS:localhost"]))
    made_for = tls_dir / _NAMES_FILE
    if ca.is_file() and keystore.is_file() and (
            made_for.read_text() if made_for.is_file() else "IP:127.0.0.1,DNS:localhost") == names:
        return ca, keystore
    openssl = shutil.which("openssl")
    if openssl is None:
        raise MissingBinaryError("kafka: the secure listener's certificates are made with the `openssl` "
                                 "command, and there is none on PATH; install it (Debian: apt-get install "
                                 "openssl)")
    tls_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tls-", dir=tls_dir.parent))
    try:
        (work / "server.ext").write_text(_SERVER_EXT.format(names=names))
        (work / _NAMES_FILE).write_text(names)
        steps = [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", CA_FILE,
             "-days", "3650", "-subj", "/CN=eoskit dev CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=127.0.0.1"],
            ["x509", "-req", "-in", "server.csr", "-CA", CA_FILE, "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "3650", "-extfile", "server.ext"],
            ["pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key", "-certfile", CA_FILE,
             "-name", "kafka", "-out", KEYSTORE_FILE, "-passout", f"pass:{KEYSTORE_PASSWORD}"],
        ]
        for step in steps:
            done = subprocess.run([openssl, *step], cwd=work, capture_output=True, text=True, timeout=120,
                                  check=False)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise ServiceStartError(f"kafka: making the secure listener's certificates failed "
                                        f"(openssl {step[0]}: {last})")
        shutil.rmtree(tls_dir, ignore_errors=True)  # a half-made folder
        os.rename(work, tls_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ca, keystore


def ensure_scram_user(bootstrap: str, timeout: float = 30.0) -> None:
    """Create (or reset) the secure listener's SCRAM-SHA-512 user, over the
    PLAINTEXT listener at ``bootstrap``; idempotent."""
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _QUIET})
    upsert = UserScramCredentialUpsertion(
        KAFKA_SASL_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), KAFKA_SASL_PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert], request_timeout=timeout).values():
        future.result()


def secure_client_config(bootstrap: str, ca: Path) -> dict[str, str]:
    """librdkafka's settings for a client of the secure listener."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
            "sasl.mechanism": KAFKA_SASL_MECHANISM, "sasl.username": KAFKA_SASL_USER,
            "sasl.password": KAFKA_SASL_PASSWORD, "ssl.ca.location": str(ca)}


def list_topics(bootstrap: str, timeout: float = 5.0, **config: str) -> None:
    """Fetch cluster metadata: the readiness test that clients care about."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _QUIET, "socket.connection.setup.timeout.ms": 2000,
                         **config})
    admin.list_topics(timeout=timeout)


class KafkaService(LocalService):
    """Apache Kafka, one combined broker and controller, data kept under ``kafka/data``.

    ``nodes=3`` makes it node ``node_id`` of a three-node cluster whose
    other nodes are the services ``kafka-2`` and ``kafka-3`` of the same
    folder (each its own folder, log directory and ports; ``kafka``'s
    certificates and cluster id). Node 1 keeps the name ``kafka``.
    """

    name: ClassVar[str] = "kafka"

    def __init__(self, root: Path, node_id: int = NODE_ID, nodes: int = 1) -> None:
        if nodes not in NODE_COUNTS or not 1 <= node_id <= nodes:
            raise ValueError(f"kafka: {nodes} nodes (node {node_id}): the dev services run "
                             f"{' or '.join(map(str, NODE_COUNTS))} Kafka nodes")
        self.name = node_service_name(node_id)  # type: ignore[misc]
        super().__init__(root)
        self.node_id = node_id
        self.nodes = nodes
        self.data_dir = self.dir / "data"
        self.config_path = self.dir / "server.properties"
        self.log4j_path = self.dir / "log4j2.xml"
        self.tls_dir = root / "kafka" / "tls"  # shared by a cluster's nodes

    @property
    def ca_path(self) -> Path:
        """The PEM file of the CA that signed the secure listener's certificate."""
        return self.tls_dir / CA_FILE

    def check_installed(self) -> None:
        check_java()
        fetch_kafka()

    def prepare(self, state: ServiceState) -> None:
        self._settle_ports(state)
        ensure_tls(self.tls_dir, self._voter_hosts().values())  # one keystore for every node
        self._write_config(state)
        if (self.data_dir / "meta.properties").is_file():
            if "cluster_id" not in state.extra:  # a state file that lost it: the data dir knows
                found = re.search(r"^cluster\.id=(\S+)", (self.data_dir / "meta.properties").read_text(), re.M)
                if found:
                    state.extra["cluster_id"] = found.group(1)
            return
        # Never formatted, or a format that was cut short: nothing to keep.
        shutil.rmtree(self.data_dir, ignore_errors=True)
        if self.node_id == NODE_ID:
            cluster_id = state.extra.setdefault("cluster_id", new_cluster_id())
        else:  # the first node's, which the orchestrator chose and saved before
            cluster_id = load_state(self.root).service(node_service_name(NODE_ID)).extra.get("cluster_id", "")
            if not cluster_id:
                raise ServiceStartError(f"{self.name}: no cluster id recorded for node {NODE_ID}; "
                                        f"run `eoskit dev up --kafka-brokers {self.nodes}` again")
            state.extra["cluster_id"] = cluster_id
        argv = [check_java(), *TOOL_JVM_OPTIONS, f"-Dlog4j2.configurationFile={self.log4j_path}",
                "-cp", self._classpath(), "kafka.tools.StorageTool",
                "format", "--cluster-id", cluster_id, "--config", str(self.config_path)]
        code = run_logged(argv, self.log_path, cwd=self.dir, timeout=300)
        if code != 0:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            raise ServiceStartError(f"{self.name}: formatting the log directory {self.data_dir} failed "
                                    f"(exit {code}); log: {self.log_path}\n{tail(self.log_path)}")

    def launch(self, state: ServiceState) -> LaunchSpec:
        self._write_config(state)
        state.extra["version"] = kafka_version()
        options = JVM_OPTIONS if self.nodes == 1 else CLUSTER_JVM_OPTIONS
        argv = [check_java(), *options, f"-Dlog4j2.configurationFile={self.log4j_path}",
                "-cp", self._classpath(), "kafka.Kafka", str(self.config_path)]
        return LaunchSpec(argv=argv, env=dict(os.environ), cwd=self.dir)

    def probe(self, state: ServiceState) -> None:
        assert state.port is not None
        if not accepts_connections(state.port, self.address):
            raise ConnectionError(f"nothing listens on {self.address}:{state.port} yet")
        list_topics(f"{self.address}:{state.port}")

    def bootstrap(self, state: ServiceState) -> None:
        """The SCRAM user of the secure listener, then a metadata request
        through that listener as it (a credential reaches the listener through
        the metadata log, a moment after it was accepted)."""
        import time

        ensure_scram_user(f"{self.address}:{state.port}")
        secure = f"{self.address}:{state.ports['secure']}"
        deadline = time.monotonic() + 30
        while True:
            try:
                list_topics(secure, **secure_client_config(secure, self.ca_path))
                return
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise ServiceStartError(f"{self.name}: the SASL_SSL listener on {secure} does not accept "
                                            f"the SCRAM user {KAFKA_SASL_USER} ({exc})") from None
                time.sleep(0.2)

    def describe(self, state: ServiceState) -> str:
        version = state.extra.get("version")
        secure = state.ports.get("secure")
        node = f", node {self.node_id} of {self.nodes}" if self.nodes > 1 else ""
        return (f"{self.address}:{state.port}" + (f", SASL_SSL on {self.address}:{secure}" if secure else "")
                + (f" (Apache Kafka {version}{node})" if version else ""))

    def settle_ports(self, state: ServiceState, taken: set[int]) -> None:
        """Choose this node's controller and secure ports (the last start's
        when free) beside ``state.port``, none of ``taken``; adds them to it.
        The orchestrator calls it for every node of a cluster before any is
        configured: each node's configuration names every controller."""
        for role in ("controller", "secure"):
            port = state.ports.get(role)
            if not port or port in taken or not is_port_free(port):
                if port and role == "controller" and self.nodes > 1 and "cluster_id" in state.extra:
                    raise ServiceStartError(
                        f"{self.name}: controller port {port} on {HOST} is taken by another program, and the "
                        f"cluster's other nodes know this node by it; stop that program and run "
                        f"`eoskit dev up` again")
                port = pick_free_port(exclude=taken)
            state.ports[role] = port
            taken.add(port)
        assert state.port is not None
        state.ports["broker"] = state.port

    # -- internals ----------------------------------------------------------------

    def _classpath(self) -> str:
        return str(fetch_kafka() / "*")  # Java expands a trailing '*' to every jar

    def _settle_ports(self, state: ServiceState) -> None:
        """The broker port (``state.port``, chosen by the orchestrator, the
        last start's where it is free), and the controller's and the secure
        listener's, the last start's when possible."""
        assert state.port is not None
        others: set[int] = set()
        for name, entry in load_state(self.root).services.items():
            if name != self.name:
                others |= entry.all_ports()
        if not is_port_free(state.port):
            raise ServiceStartError(f"{self.name}: port {state.port} on {HOST} is taken by another program; "
                                    f"stop that program, or run `eoskit dev up` again to pick a free port")
        self.settle_ports(state, others | {state.port})

    def _voters(self, state: ServiceState) -> dict[int, int] | None:
        """Node id -> controller port of every node of the cluster (None for one node)."""
        if self.nodes == 1:
            return None
        saved = load_state(self.root)
        voters: dict[int, int] = {}
        for node in range(1, self.nodes + 1):
            entry = state if node == self.node_id else saved.services.get(node_service_name(node))
            port = entry.ports.get("controller") if entry is not None else None
            if not port:
                raise ServiceStartError(f"{self.name}: no controller port recorded for "
                                        f"{node_service_name(node)}; run `eoskit dev up` again")
            voters[node] = port
        return voters

    def _voter_hosts(self) -> dict[int, str]:
        """Node id -> address of every node (each its own host in a network lab)."""
        saved = load_state(self.root)
        found = {self.node_id: self.address}
        for node in range(1, self.nodes + 1):
            entry = saved.services.get(node_service_name(node))
            if node != self.node_id and entry is not None and entry.extra.get("address"):
                found[node] = entry.extra["address"]
        return found

    def _write_config(self, state: ServiceState) -> None:
        assert state.port is not None
        controller = state.ports.get("controller")
        if not controller:
            raise ServiceStartError(f"{self.name}: no controller port chosen; run `eoskit dev up` again")
        self.dir.mkdir(parents=True, exist_ok=True)
        secure = state.ports.get("secure")
        if not secure:
            raise ServiceStartError(f"{self.name}: no port chosen for the SASL_SSL listener; "
                                    f"run `eoskit dev up` again")
        self.config_path.write_text(render_properties(server_properties(
            state.port, controller, self.data_dir, secure, self.tls_dir / KEYSTORE_FILE,
            node_id=self.node_id, voters=self._voters(state), host=self.address,
            voter_hosts=self._voter_hosts())))
        self.log4j_path.write_text(LOG4J2_XML)
