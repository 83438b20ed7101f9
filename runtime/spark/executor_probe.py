"""What one executor reports at a job's start: who it is, what it runs, and
whether it can read and write eoskit's metadata beside the checkpoint.

This module runs on executors, which may have neither eoskit nor its client
libraries: the driver ships it *by value* (``cloudpickle`` pickles its code,
not a reference to it), so it imports only the standard library at the top
and everything else inside ``try``, reporting failures as data. The driver
side (``eoskit.runtime.spark.executors``) turns a report into an error that names
the node.

Steps of :func:`probe`, each recorded in the report:

1. identity: host, pid, working directory, the Python executable and version;
2. eoskit: its installed version, then each connector module the job uses
   (which imports its client library: psycopg, confluent-kafka, ...);
3. storage: fsspec opens the checkpoint's file system (a missing
   implementation, s3fs or gcsfs, fails here), the file the driver wrote is
   read (a node that cannot see it does not share the driver's storage), and
   a file of the node's own is written and read back.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import socket
import sys
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

#: Under the checkpoint; one subfolder per check, removed by the driver after it.
PROBE_DIR = "eoskit/probe"
DRIVER_FILE = "driver.json"


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins."),
            "message": str(exc).splitlines()[0][:500] if str(exc) else ""}


def _eoskit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("eoskit")
    except PackageNotFoundError:
        import eoskit  # noqa: F401 - importable without metadata (a source checkout)

        return "unknown"


def identity() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "cwd": os.getcwd(),
            "executable": sys.executable, "python": platform.python_version()}


def probe(request: dict[str, Any]) -> dict[str, Any]:
    """One node's report; ``request`` holds ``directory`` (the check's
    folder, as an fsspec URL or path), ``token`` (what the driver wrote in
    it) and ``modules`` (connector modules to import)."""
    report: dict[str, Any] = identity()
    # Step 2: eoskit and the job's connectors.
    try:
        report["eoskit"] = _eoskit_version()
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        report["eoskit_error"] = _error(exc)
        return report
    for module in request.get("modules", ()):
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - reported to the driver
            report["module_error"] = {"module": module, **_error(exc)}
            return report
    # Step 3: the checkpoint's storage.
    directory = request["directory"]
    try:
        import fsspec

        fs, root = fsspec.core.url_to_fs(directory)
    except Exception as exc:  # noqa: BLE001 - a missing fsspec implementation, mostly
        report["storage_error"] = {"step": "open", **_error(exc)}
        return report
    step = "read"
    try:
        with fs.open(f"{root}/{DRIVER_FILE}", "rb") as handle:
            seen = json.loads(handle.read()).get("token")
        if seen != request["token"]:
            raise ValueError(f"{directory}/{DRIVER_FILE} holds another check's token")
        step = "write"
        own = f"{root}/{report['host']}-{report['pid']}-{uuid.uuid4().hex[:8]}.json"
        payload = json.dumps({"token": request["token"], "host": report["host"]}).encode()
        fs.pipe_file(own, payload)
        step = "read back"
        if fs.cat_file(own) != payload:
            raise ValueError(f"{own} reads back other bytes than were written")
        report["wrote"] = own
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        report["storage_error"] = {"step": step, **_error(exc)}
    return report


def probe_partition(request: dict[str, Any], _rows: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """``mapPartitions`` form: one report per task."""
    yield probe(request)
