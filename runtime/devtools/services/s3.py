"""S3 for local development: moto's server mode, in memory.

eoskit's files sink and savepoints write through fsspec, and on S3 they must
be tested against a real S3 API, not a mock object in the test process. moto's
server (``pip install 'moto[server]'``) answers that API over HTTP, starts in
under a second and needs no JVM or container. It keeps buckets in memory only:
like the local Kafka broker, a restarted server comes back empty.

moto accepts any credentials; the fixed ones eoskit hands out are in
:mod:`.endpoints` (:func:`~.endpoints.s3_storage_options`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import urllib.request
from typing import ClassVar

from .base import LaunchSpec, LocalService
from .endpoints import s3_endpoint_url
from .errors import MissingBinaryError
from .state import ServiceState

_INSTALL_HINT = "install it with `pip install 'moto[server]'` (or `pip install 'eoskit[test]'`)"
# The server mode's own dependencies, beyond moto itself (the `server` extra).
_SERVER_MODULES = ("moto", "flask", "flask_cors", "werkzeug")

# Loopback requests must never go through an HTTP(S)_PROXY from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def check_moto_server() -> None:
    """Raise :class:`MissingBinaryError` unless ``python -m moto.server`` can run here."""
    missing = [name for name in _SERVER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingBinaryError(
            f"s3: moto's server mode needs the Python modules {', '.join(missing)}, not installed; {_INSTALL_HINT}"
        )


def list_buckets(endpoint: str, timeout: float = 3.0) -> None:
    """An S3 ListBuckets request: returns if ``endpoint`` answers it like S3 does.

    Unsigned, which moto accepts; any other HTTP server on the port fails here.
    """
    with _DIRECT.open(endpoint.rstrip("/") + "/", timeout=timeout) as response:
        body = response.read(64 * 1024)
    if b"ListAllMyBucketsResult" not in body:
        raise ConnectionError(f"{endpoint} answered, but not with an S3 bucket list")


class S3Service(LocalService):
    """moto's S3-compatible server, in memory, listening on 127.0.0.1 only."""

    name: ClassVar[str] = "s3"

    def check_installed(self) -> None:
        check_moto_server()

    def launch(self, state: ServiceState) -> LaunchSpec:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"  # the request log reaches the log file as it happens
        env["NO_COLOR"] = "1"
        # The interpreter running eoskit is the one that has moto installed.
        argv = [sys.executable, "-m", "moto.server", "--host", self.address, "--port", str(state.port)]
        return LaunchSpec(argv=argv, env=env, cwd=self.dir)

    def probe(self, state: ServiceState) -> None:
        assert state.port is not None
        list_buckets(s3_endpoint_url(self.address, state.port))

    def describe(self, state: ServiceState) -> str:
        assert state.port is not None
        return s3_endpoint_url(self.address, state.port)
