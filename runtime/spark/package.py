"""``eoskit package``: the job's Python environment as an archive for executors.

Spark's Python package management ships a packed virtualenv to executors
(``venv-pack`` / ``conda-pack``): ``spark-submit --archives env.tar.gz#environment``
(or ``spark.archives``) unpacks it in each executor's working directory, and
``PYSPARK_PYTHON=./environment/bin/python`` runs tasks in it. This module
writes an archive of that very layout, so that nodes need nothing of eoskit:

- ``bin/python`` (and ``python3``, ``pythonX.Y``): a symlink to the nodes'
  interpreter, by default the driver's base interpreter's path, as venv-pack
  does; every node needs that Python at that path (``--python`` names another);
- ``pyvenv.cfg``: what makes that interpreter use the environment;
- ``lib/pythonX.Y/site-packages/``: eoskit and every distribution it needs,
  with the job's own (``--with``), copied file by file from their installed
  RECORD, wherever they are installed (a virtualenv, ``--user``, a ``.pth``
  path), with their requirements' requirements.

PySpark and py4j are left out by default: every node's Spark puts its own
``pyspark.zip`` first on its Python workers' path, and a different PySpark in
the archive would only be shadowed (``--with pyspark`` packs it anyway).
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

#: The alias executors unpack the archive under (``env.tar.gz#environment``).
ALIAS = "environment"
#: Provided by the nodes' Spark; packed only when named.
PROVIDED = frozenset({"pyspark", "py4j"})
#: Never needed by a job's tasks.
TOOLS = frozenset({"pip", "setuptools", "wheel"})
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


class PackageError(RuntimeError):
    """The environment cannot be packed; names the distribution at fault."""


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Packed:
    path: Path
    distributions: tuple[str, ...]  # "name version"
    files: int
    bytes: int
    python: str


def _marker_applies(marker: str, extras: frozenset[str]) -> bool:
    """Does a requirement's marker hold here, for the requested extras?"""
    try:
        from packaging.markers import Marker
    except ImportError:  # packaging is nearly always there; else extras decide alone
        wanted = _EXTRA_MARKER.findall(marker)
        return not wanted or any(normalize(e) in extras for e in wanted)
    parsed = Marker(marker)
    if "extra" not in marker:
        return parsed.evaluate()
    return any(parsed.evaluate({"extra": extra}) for extra in extras)


def requirements(dist: metadata.Distribution, extras: frozenset[str]) -> list[tuple[str, frozenset[str]]]:
    """(name, extras) of what ``dist`` needs with ``extras``, markers applied."""
    out = []
    for text in dist.requires or ():
        spec, _, marker = text.partition(";")
        found = _NAME.match(spec)
        if found is None:
            continue
        if marker.strip() and not _marker_applies(marker.strip(), extras):
            continue
        wanted = frozenset(normalize(e) for e in (found.group(2) or "").split(",") if e.strip())
        out.append((found.group(1), wanted))
    return out


def closure(roots: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions ``roots`` need, roots included."""
    seen: dict[str, frozenset[str]] = {}
    found: dict[str, metadata.Distribution] = {}
    todo = []
    for root in roots:
        name, _, extras = root.partition("[")
        todo.append((name.strip(), frozenset(normalize(e) for e in extras.rstrip("]").split(",") if e.strip())))
    named = {normalize(n) for n, _ in todo}
    while todo:
        name, extras = todo.pop()
        key = normalize(name)
        if key in (PROVIDED | TOOLS) - named:
            continue
        if key in seen and extras <= seen[key]:
            continue
        try:
            dist = found.get(key) or metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if key in named:
                raise PackageError(f"distribution {name!r} is not installed in {sys.prefix}") from None
            continue  # a requirement of another platform, or optional: not installed here
        seen[key] = seen.get(key, frozenset()) | extras
        found[key] = dist
        todo.extend(requirements(dist, seen[key]))
    return sorted(found.values(), key=lambda d: normalize(d.metadata["Name"]))


def _files(dist: metadata.Distribution) -> list[tuple[Path, str]]:
    """(absolute path, path inside site-packages) of each installed file."""
    name = dist.metadata["Name"]
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except json.JSONDecodeError:
        direct = {}
    if (direct.get("dir_info") or {}).get("editable"):
        raise PackageError(f"{name} is installed in editable mode (pip install -e): its code is "
                           "not in site-packages; install it normally (pip install .) to pack it")
    if dist.files is None:
        raise PackageError(f"{name} was installed without a file list (RECORD); reinstall it "
                           "with pip to pack it")
    out = []
    for entry in dist.files:
        relative = entry.as_posix()
        if relative.startswith("../") or relative.startswith("/"):
            continue  # scripts and data outside site-packages: tasks never run them
        path = Path(dist.locate_file(entry))
        if path.is_file():
            out.append((path, relative))
    return out


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    info.mode = 0o777
    info.mtime = int(time.time())
    return info


def _text(name: str, text: str) -> tuple[tarfile.TarInfo, io.BytesIO]:
    data = text.encode()
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    info.mtime = int(time.time())
    return info, io.BytesIO(data)


#: eoskit's extras that are not a connector's library.
NOT_CONNECTORS = frozenset({"all", "test", "bench", "dev"})


def installed_connector_extras() -> tuple[str, ...]:
    """eoskit's connector extras (``kafka``, ``postgres``, ...) whose
    libraries are all installed here: what the driver's environment can
    run, and so what executors need."""
    dist = metadata.distribution("eoskit")
    found = []
    core = set(requirements(dist, frozenset()))
    for extra in dist.metadata.get_all("Provides-Extra") or ():
        if normalize(extra) in NOT_CONNECTORS:
            continue
        needed = [name for name, wanted in requirements(dist, frozenset({normalize(extra)}))
                  if (name, wanted) not in core]
        try:
            for name in needed:
                metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found.append(normalize(extra))
    return tuple(sorted(found))


def default_roots() -> tuple[str, ...]:
    """eoskit with the connector extras installed here."""
    extras = installed_connector_extras()
    return (f"eoskit[{','.join(extras)}]" if extras else "eoskit",)


def base_python() -> str:
    """The interpreter behind the running one (a virtualenv's base)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def pack(output: str | os.PathLike[str], extra: Iterable[str] = (), python: str | None = None,
         compresslevel: int = 1, roots: Iterable[str] | None = None) -> Packed:
    """Write the archive (see the module doc); gzip level 1 by default: a
    few seconds for the few hundred MB of pyarrow, pandas and friends.
    ``roots`` are what is packed besides ``extra``: by default eoskit with
    every connector extra installed here (``default_roots``)."""
    roots = default_roots() if roots is None else roots
    python = python or base_python()
    if not os.path.isabs(python):
        raise PackageError(f"--python {python!r} must be an absolute path (the interpreter's "
                           "path on every node)")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    site = f"lib/python{version}/site-packages"
    dists = closure([*roots, *extra])
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    files = size = 0
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=compresslevel) as archive:
            archive.addfile(_symlink("bin/python", python))
            archive.addfile(_symlink("bin/python3", "python"))
            archive.addfile(_symlink(f"bin/python{version}", "python"))
            archive.addfile(*_text("pyvenv.cfg", (
                f"home = {os.path.dirname(python)}\ninclude-system-site-packages = false\n"
                f"version = {sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}\n"
                "packed-by = eoskit package\n")))
            for dist in dists:
                for path, relative in _files(dist):
                    archive.add(str(path), arcname=f"{site}/{relative}", recursive=False)
                    files += 1
                    size += path.stat().st_size
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    return Packed(output, tuple(f"{d.metadata['Name']} {d.version}" for d in dists), files, size, python)
