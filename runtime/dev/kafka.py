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

Kafka is not on PyPI. Its jars (``org.apache.kafka:kafka_2.13`` and its
runtime dependencies) are fetched once from Maven Central into a per-user
cache by the Apache Ivy jar that PySpark ships, through Ivy's default
resolvers, and are used from there afterwards with no network. Java 17 or
newer runs both Ivy and Kafka.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlsplit

from .base import LaunchSpec, LocalService
from .endpoints import HOST, KAFKA_SASL_MECHANISM, KAFKA_SASL_PASSWORD, KAFKA_SASL_USER
from .errors import DevServicesError, MissingBinaryError, ServiceStartError
from .ports import accepts_connections, is_port_free, pick_free_port
from .processes import run_logged, tail
from .state import ServiceState, load_state

#: The Apache Kafka release run by default (the newest 4.x release when this
#: was written, checked here: fetched, started, transactions, restarts).
DEFAULT_VERSION = "4.4.0"
#: Another release of Apache Kafka 4.x or newer, e.g. ``4.3.1``.
VERSION_ENV = "EOSKIT_KAFKA_VERSION"
#: The cache folder (``kafka/<version>/`` holds the jars); default
#: ``$XDG_CACHE_HOME/eoskit``, else ``~/.cache/eoskit``.
CACHE_ENV = "EOSKIT_CACHE_DIR"
SCALA_VERSION = "2.13"
MIN_JAVA = 17
JAVA_PACKAGE = "openjdk-17-jre-headless"

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
FETCH_TIMEOUT = 900.0

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
_QUIET = logging.getLogger("eoskit.runtime.dev.kafka.probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

_VERSION_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:-[0-9A-Za-z.]+)?")
# What Ivy writes when it cannot reach a repository at all (as opposed to a
# repository answering "not found").
_NETWORK_ERRORS = ("Server access error", "UnknownHostException", "ConnectException",
                   "SocketTimeoutException", "NoRouteToHostException", "SSLException", "SSLHandshakeException")


# -- version, cache, Java ---------------------------------------------------


def kafka_version(env: Mapping[str, str] | None = None) -> str:
    """The Kafka release to run: ``$EOSKIT_KAFKA_VERSION``, else :data:`DEFAULT_VERSION`."""
    env = os.environ if env is None else env
    version = (env.get(VERSION_ENV) or "").strip() or DEFAULT_VERSION
    match = _VERSION_RE.fullmatch(version)
    if match is None or int(match.group(1)) < 4:
        raise DevServicesError(
            f"kafka: {VERSION_ENV}={version!r} is not an Apache Kafka 4.x (or newer) version such as "
            f"{DEFAULT_VERSION}; set it to one, or unset it for {DEFAULT_VERSION}"
        )
    return version


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """eoskit's cache folder: ``$EOSKIT_CACHE_DIR``, ``$XDG_CACHE_HOME/eoskit`` or ``~/.cache/eoskit``."""
    env = os.environ if env is None else env
    explicit = (env.get(CACHE_ENV) or "").strip()
    if explicit:
        return Path(explicit).expanduser().absolute()
    xdg = (env.get("XDG_CACHE_HOME") or "").strip()
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative path is to be ignored
        return Path(xdg) / "eoskit"
    home = (env.get("HOME") or "").strip()
    return (Path(home) if home else Path.home()) / ".cache" / "eoskit"


def jars_dir(version: str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """Where the jars of Kafka ``version`` are (or will be) kept: ``<cache>/kafka/<version>``."""
    return cache_root(env) / "kafka" / (version or kafka_version(env))


def has_kafka_jars(directory: Path, version: str) -> bool:
    """True if ``directory`` holds Kafka ``version``'s server jar (fetched, or copied by hand)."""
    return (directory / f"kafka_{SCALA_VERSION}-{version}.jar").is_file()


def _hand_fill_hint(version: str, target: Path) -> str:
    return (f"or fill {target} by hand with the jars of Kafka's binary distribution "
            f"(the libs/ folder of kafka_{SCALA_VERSION}-{version}.tgz)")


def find_java(env: Mapping[str, str] | None = None) -> str:
    """``$JAVA_HOME/bin/java`` if that exists (as Spark and Kafka's scripts do), else ``java`` on PATH."""
    env = os.environ if env is None else env
    home = (env.get("JAVA_HOME") or "").strip()
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java", path=env.get("PATH", os.defpath))
    if found:
        return found
    raise MissingBinaryError(
        f"kafka: no `java` on PATH, and Apache Kafka runs on Java {MIN_JAVA} or newer; "
        f"install it (Debian: apt-get install {JAVA_PACKAGE}) or set JAVA_HOME"
    )


def parse_java_version(text: str) -> int | None:
    """The major version in ``java -version`` output (``1.8.0_x`` is 8), or None."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


@functools.lru_cache(maxsize=8)
def _java_major(java: str) -> int | None:
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise MissingBinaryError(
            f"kafka: {java} does not run ({exc}); install Java {MIN_JAVA} or newer "
            f"(Debian: apt-get install {JAVA_PACKAGE}) or set JAVA_HOME"
        ) from exc
    return parse_java_version(done.stderr + done.stdout)


def check_java(env: Mapping[str, str] | None = None) -> str:
    """The ``java`` to run Kafka with; a clear error if there is none or it is too old."""
    java = find_java(env)
    major = _java_major(java)
    if major is not None and major < MIN_JAVA:
        raise MissingBinaryError(
            f"kafka: Apache Kafka 4 needs Java {MIN_JAVA} or newer and {java} is Java {major}; "
            f"install {JAVA_PACKAGE} (apt-get install {JAVA_PACKAGE}) or point JAVA_HOME at a newer Java"
        )
    return java


# -- fetching the jars ---------------------------------------------------------


def ivy_jar(target: Path | None = None, version: str = DEFAULT_VERSION) -> Path:
    """The Apache Ivy jar in the installed PySpark (``pyspark/jars/ivy-*.jar``), found without importing it."""
    spec = importlib.util.find_spec("pyspark")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        jars = sorted(Path(location, "jars").glob("ivy-*.jar"))
        if jars:
            return jars[-1]
    where = target or jars_dir(version)
    raise MissingBinaryError(
        f"kafka: fetching Kafka's jars needs the Apache Ivy jar that PySpark ships (pyspark/jars/ivy-*.jar), "
        f"and there is none here; install pyspark, {_hand_fill_hint(version, where)}"
    )


def java_proxy_options(env: Mapping[str, str] | None = None) -> list[str]:
    """JVM system properties for the ``https_proxy``/``http_proxy``/``no_proxy`` variables,
    which Java itself ignores (credentials in a proxy URL are not passed on)."""
    env = os.environ if env is None else env
    options: list[str] = []
    for scheme in ("https", "http"):
        value = (env.get(f"{scheme}_proxy") or env.get(f"{scheme.upper()}_PROXY") or "").strip()
        if not value:
            continue
        parts = urlsplit(value if "://" in value else f"http://{value}")
        if not parts.hostname:
            continue
        port = parts.port or (443 if parts.scheme == "https" else 80)
        options += [f"-D{scheme}.proxyHost={parts.hostname}", f"-D{scheme}.proxyPort={port}"]
    no_proxy = (env.get("no_proxy") or env.get("NO_PROXY") or "").strip()
    if options and no_proxy:
        hosts = []
        for host in (h.strip() for h in no_proxy.split(",")):
            if host:
                hosts.append("*" + host if host.startswith(".") else host)
        options.append("-Dhttp.nonProxyHosts=" + "|".join(hosts))  # Java uses it for https too
    return options


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _run_ivy(java: str, ivy: Path, work: Path, into: Path, module: tuple[str, str, str], log: Path,
             env: Mapping[str, str], transitive: bool = True) -> int:
    """Resolve ``module`` (organisation, name, revision) and its runtime dependencies
    with Ivy's default resolvers, copy their jars into ``into``; Ivy's exit code."""
    argv = [
        java, *java_proxy_options(env), "-cp", str(ivy), "org.apache.ivy.Main",
        "-cache", str(work / "ivy-cache"),  # private: nothing left in ~/.ivy2
        "-dependency", *module,
        "-confs", "default",  # Maven's compile and runtime scopes
        "-types", "jar", "bundle",  # OSGi bundles are jars too (scala-logging, snappy-java)
        "-retrieve", f"{into}/[artifact]-[revision](-[classifier]).[ext]",
    ]
    if not transitive:
        argv.append("-notransitive")
    with open(log, "ab") as out:
        out.write(f"\n=== running: {' '.join(argv)}\n".encode())
        out.flush()
        try:
            return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=FETCH_TIMEOUT, check=False, env=dict(env)).returncode
        except subprocess.TimeoutExpired:
            return -1


def _fetch_error(version: str, target: Path, log: Path, code: int) -> MissingBinaryError:
    """One line naming why Ivy failed, from what it wrote."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    if code == -1:
        cause = f"took longer than {FETCH_TIMEOUT:.0f} s: Maven Central is unreachable or very slow from here"
    elif any(marker in text for marker in _NETWORK_ERRORS):
        cause = "Maven Central is unreachable from here (no network, a firewall, or a proxy Java does not know)"
    elif f"org.apache.kafka#kafka_{SCALA_VERSION};{version}: not found" in text:
        return MissingBinaryError(
            f"kafka: Apache Kafka {version} is not on Maven Central (org.apache.kafka:kafka_{SCALA_VERSION}:"
            f"{version} not found); set {VERSION_ENV} to a released 4.x version, or unset it for {DEFAULT_VERSION}"
        )
    else:
        cause = f"Ivy failed (exit {code})"
    return MissingBinaryError(
        f"kafka: could not fetch Apache Kafka {version}'s jars: {cause}; Ivy's output: {log}; "
        f"connect and try again, {_hand_fill_hint(version, target)}"
    )


def fetch_kafka(version: str | None = None, env: Mapping[str, str] | None = None, quiet: bool = False) -> Path:
    """The folder holding the jars of Kafka ``version``, fetched first if needed.

    The first call downloads ``org.apache.kafka:kafka_2.13:<version>`` and its
    runtime dependencies (about 45 MB), plus the log4j binding Kafka's own
    distribution adds, into a temporary folder beside the cache entry, which
    is renamed into place only when complete. Later calls, from any process,
    find it and use no network. Concurrent first calls fetch once (a lock).
    """
    env = os.environ if env is None else env
    version = version or kafka_version(env)
    target = jars_dir(version, env)
    if has_kafka_jars(target, version):
        return target
    java = check_java(env)
    ivy = ivy_jar(target, version)
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DevServicesError(f"kafka: cannot create the jar cache {parent} ({exc}); "
                               f"set {CACHE_ENV} to a writable folder") from exc
    log = parent / f"fetch-{version}.log"
    with _locked(parent / ".fetch.lock"):
        if has_kafka_jars(target, version):  # another process fetched it meanwhile
            return target
        for stale in parent.glob(f".tmp-{version}-*"):  # left by a fetch that was killed
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=parent))
        try:
            if not quiet:
                print(f"kafka: fetching Apache Kafka {version}'s jars into {target} (once, about 45 MB) ...",
                      file=sys.stderr, flush=True)
            log.write_bytes(b"")
            jars = work / "jars"
            code = _run_ivy(java, ivy, work, jars, ("org.apache.kafka", f"kafka_{SCALA_VERSION}", version), log, env)
            if code != 0 or not has_kafka_jars(jars, version):
                raise _fetch_error(version, target, log, code)
            # Kafka logs through SLF4J 1.7 to log4j 2; its pom leaves the binding
            # to the distribution, which ships log4j-slf4j-impl of its log4j.
            log4j = sorted(jars.glob("log4j-core-*.jar"))
            if log4j and not list(jars.glob("log4j-slf4j*-impl-*.jar")):
                log4j_version = log4j[-1].name[len("log4j-core-"):-len(".jar")]
                code = _run_ivy(java, ivy, work, jars, ("org.apache.logging.log4j", "log4j-slf4j-impl", log4j_version),
                                log, env, transitive=False)
                if code != 0:
                    raise _fetch_error(version, target, log, code)
            if target.exists():  # an incomplete folder (filled by hand?): replaced whole
                shutil.rmtree(target)
            os.rename(jars, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def fetch_main() -> int:
    """Fetch the jars if needed (``scripts/setup.sh`` does, once): print their
    folder, or the one line saying why they could not be fetched; the exit code."""
    try:
        print(fetch_kafka())
    except DevServicesError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


# -- the broker's configuration ------------------------------------------------------


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
        secure = "listener.name.sasl_ssl."
        properties.update({
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
        })
    return properties


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
