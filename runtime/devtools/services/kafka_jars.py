"""Apache Kafka's jars and the Java that runs them, for the dev broker
(``kafka.py``) and ``scripts/setup.sh``.

Kafka is not on PyPI. Its jars (``org.apache.kafka:kafka_2.13`` and its
runtime dependencies) are fetched once from Maven Central into a per-user
cache by the Apache Ivy jar that PySpark ships, through Ivy's default
resolvers, and are used from there afterwards with no network. Java 17 or
newer runs both Ivy and Kafka.

Runs in the ``eoskit dev`` command and its tests, never in a job. A
:class:`MissingBinaryError` names what to install or fetch, in one line.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from .errors import DevServicesError, MissingBinaryError

#: The Apache Kafka release run by default (the newest 4.x release when this
#: was written, checked here: fetched, started, transactions, restarts).
DEFAULT_VERSION = "4.4.0"
#: Another release of Apache Kafka, 3.7 or newer (KRaft), e.g. ``4.3.1`` or
#: ``3.9.1``: the Kafka 3.x tier runs the Kafka tests on 3.9.
#: (``tests/test_kafka_versions.py``, docs/compatibility.md).
VERSION_ENV = "EOSKIT_KAFKA_VERSION"
#: The cache folder (``kafka/<version>/`` holds the jars); default
#: ``$XDG_CACHE_HOME/eoskit``, else ``~/.cache/eoskit``.
CACHE_ENV = "EOSKIT_CACHE_DIR"
#: The oldest release the dev broker runs: KRaft with a static quorum, and
#: the storage tool's ``format --cluster-id``, as 4.x.
MIN_VERSION = (3, 7)
SCALA_VERSION = "2.13"
#: The log4j 2 that a Kafka 3.x broker logs through (4.4's).
LOG4J_FOR_3X = "2.25.5"
MIN_JAVA = 17
JAVA_PACKAGE = "openjdk-17-jre-headless"
FETCH_TIMEOUT = 900.0

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
    if match is None or (int(match.group(1)), int(match.group(2))) < MIN_VERSION:
        raise DevServicesError(
            f"kafka: {VERSION_ENV}={version!r} is not an Apache Kafka {MIN_VERSION[0]}.{MIN_VERSION[1]} "
            f"(or newer) version such as {DEFAULT_VERSION} or 3.9.1; set it to one, or unset it for "
            f"{DEFAULT_VERSION}"
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
            f"{version} not found); set {VERSION_ENV} to a released version, or unset it for {DEFAULT_VERSION}"
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
            # Kafka logs through SLF4J 1.7; its pom leaves the binding to the
            # distribution, which ships log4j-slf4j-impl of its log4j 2 (4.x).
            # 3.x ships reload4j instead: it gets log4j 2 too, with its core,
            # so that the one log4j2.xml of kafka.py configures every release.
            log4j = sorted(jars.glob("log4j-core-*.jar"))
            if not list(jars.glob("log4j-slf4j*-impl-*.jar")):
                log4j_version = log4j[-1].name[len("log4j-core-"):-len(".jar")] if log4j else LOG4J_FOR_3X
                code = _run_ivy(java, ivy, work, jars, ("org.apache.logging.log4j", "log4j-slf4j-impl", log4j_version),
                                log, env, transitive=not log4j)
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
