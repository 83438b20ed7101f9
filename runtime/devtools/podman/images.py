"""The local images: built here from Debian's packages and Maven Central, cached.

With no container registry reachable, every image starts from a base made
by ``debootstrap --variant=minbase`` (Debian bookworm) and ``podman import``.
On it, one folder of ``container-images/`` per service holds a Containerfile and the
entrypoint that keeps the official image's contract (docs/dev-services.md
lists what each honours). Each image carries a label with the hash of its
build context and its base, so a machine builds each once and again only
when its files change; ``build_all(force=True)`` rebuilds.

Builds run with the host's network (``--network host``), so no bridge,
forwarding or NAT rule is made for them.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..services.errors import DevServicesError, MissingBinaryError
from .host import LABEL, PodmanHost

#: The folder of the images' Containerfiles.
IMAGES = Path(__file__).with_name("container-images")
BASE = "localhost/eoskit-base:bookworm"
HASH_LABEL = f"{LABEL}.hash"
DEBIAN_MIRROR = "http://deb.debian.org/debian"


#: How long one image's build steps (debootstrap, pip, podman build) may take.
BUILD_TIMEOUT_S = 1800.0


def _kafka_version() -> str:
    from ..services.kafka_jars import kafka_version

    return kafka_version()


def _kafka_files(context: Path) -> None:
    """libs/ (the jars `eoskit dev up` uses, of the dev broker's version) and log4j2.xml."""
    from ..services.kafka import LOG4J2_XML
    from ..services.kafka_jars import fetch_kafka

    shutil.copytree(fetch_kafka(_kafka_version(), quiet=True), context / "libs")
    (context / "log4j2.xml").write_text(LOG4J2_XML)


def _moto_version() -> str:
    from importlib.metadata import version

    return version("moto")


def _pip(what: str, *args: str) -> None:
    """``python -m pip ARGS`` of this interpreter (its cache, its index settings)."""
    done = subprocess.run([sys.executable, "-m", "pip", *args, "-q", "--disable-pip-version-check"],
                          capture_output=True, text=True, check=False, timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        raise DevServicesError(f"{what}: pip {args[0]} failed: {done.stderr.strip()[-600:]}")


def _moto_files(context: Path) -> None:
    """wheels/: moto[server] at the version installed here, from PyPI (pip's cache)."""
    _pip("s3 image", "download", "-d", str(context / "wheels"), f"moto[server]=={_moto_version()}")


@dataclass(frozen=True)
class Image:
    """One local image: its folder under ``container-images/``, its tag, the
    official image whose contract it keeps, and what else goes into its build
    context (``extra``, written into it after its hash is taken: the tag
    carries the version of what it brings)."""

    folder: str
    repository: str
    official: str
    tag: Callable[[], str]
    extra: Callable[[Path], None] | None = None

    @property
    def name(self) -> str:
        return f"localhost/{self.repository}:{self.tag()}"


#: The service images (by the dev service each stands in for) and the job image's base.
LOCAL_IMAGES = {
    "postgres": Image("postgres", "eoskit-postgres", "postgres:16", lambda: "15"),
    "mysql": Image("mariadb", "eoskit-mariadb", "mariadb:10.11 / mysql:8", lambda: "10.11"),
    "kafka": Image("kafka", "eoskit-kafka", "apache/kafka", _kafka_version, _kafka_files),
    "s3": Image("s3", "eoskit-moto", "motoserver/moto", _moto_version, _moto_files),
    "spark": Image("spark", "eoskit-spark-base", "spark:<version>-python3", lambda: "bookworm"),
}


def _context_hash(context: Path, base_id: str) -> str:
    digest = hashlib.sha256(base_id.encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(context)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _image_label(host: PodmanHost, name: str, label: str) -> str | None:
    done = host.podman("image", "inspect", "--format", f'{{{{index .Labels "{label}"}}}}', name, check=False)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def build_base(host: PodmanHost, force: bool = False) -> str:
    """The debootstrapped Debian bookworm base; its image id."""
    if force or _image_label(host, BASE, LABEL) is None:
        if shutil.which("debootstrap") is None:
            raise MissingBinaryError("debootstrap: not installed; install it with `bash scripts/containers.sh install`")
        with tempfile.TemporaryDirectory(prefix="eoskit-base-") as work:
            rootfs = Path(work) / "rootfs"
            done = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(rootfs), DEBIAN_MIRROR],
                                  capture_output=True, text=True, check=False, timeout=BUILD_TIMEOUT_S)
            if done.returncode != 0:
                raise DevServicesError(f"debootstrap failed: {(done.stdout + done.stderr).strip()[-800:]}")
            archive = Path(work) / "rootfs.tar"
            subprocess.run(["tar", "-C", str(rootfs), "-cf", str(archive), "."], capture_output=True,
                           check=True, timeout=BUILD_TIMEOUT_S)
            host.podman("import", "--change", 'CMD ["/bin/bash"]', "--change", f"LABEL {LABEL}=base",
                        str(archive), BASE, timeout=BUILD_TIMEOUT_S)
    return host.podman("image", "inspect", "--format", "{{.Id}}", BASE).stdout.strip()


def build(host: PodmanHost, image: Image, base_id: str, force: bool = False) -> str:
    """Build ``image`` unless the same context on the same base is there; its name."""
    with tempfile.TemporaryDirectory(prefix=f"eoskit-{image.folder}-") as work:
        context = Path(work) / "context"
        shutil.copytree(IMAGES / image.folder, context)
        key = _context_hash(context, base_id + image.tag())
        name = image.name
        if not force and _image_label(host, name, HASH_LABEL) == key:
            return name
        if image.extra is not None:
            image.extra(context)
        host.podman("build", "-q", "--network", "host", "--build-arg", f"BASE={BASE}",
                    "--label", f"{LABEL}=image", "--label", f"{HASH_LABEL}={key}",
                    "-t", name, str(context), timeout=BUILD_TIMEOUT_S)
    return name


def build_all(host: PodmanHost, names: tuple[str, ...] | None = None, force: bool = False) -> dict[str, str]:
    """The base, then each image of ``names`` (default: all); service -> image name."""
    base_id = build_base(host, force)
    return {name: build(host, LOCAL_IMAGES[name], base_id, force) for name in names or tuple(LOCAL_IMAGES)}


#: The tag of the job image the containers tier builds from docker/Dockerfile.
JOB_IMAGE = "localhost/eoskit-job:dev"


def build_job_image(host: PodmanHost, source: Path, job: str, name: str = JOB_IMAGE) -> str:
    """docker/Dockerfile built from the checkout at ``source`` on the local
    Spark base, with ``job`` (a path inside ``source``) as its job file.

    PySpark is the version installed here, and pip installs offline from a
    wheel folder in eoskit's cache, filled from pip's cache on this host:
    the image's Python would not trust the network's TLS proxy."""
    from importlib.metadata import version

    from ..services.kafka_jars import cache_root

    base_id = build_base(host)
    spark_base = build(host, LOCAL_IMAGES["spark"], base_id)
    spark = version("pyspark")
    wheels = cache_root() / "wheels"
    _pip("job image", "wheel", "-w", str(wheels), f"pyspark=={spark}", f"{source}[all]", "setuptools>=77", "wheel")
    host.podman("build", "-q", "--network", "host", "-v", f"{wheels}:/wheels:ro",
                "-f", str(source / "docker" / "Dockerfile"),
                "--build-arg", f"BASE_IMAGE={spark_base}", "--build-arg", f"SPARK_VERSION={spark}",
                "--build-arg", "WHEELS=/wheels", "--build-arg", f"JOB={job}",
                "--label", f"{LABEL}=image", "-t", name, str(source), timeout=BUILD_TIMEOUT_S)
    return name
