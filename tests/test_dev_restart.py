"""``LocalServices.restart``: the same port after a stop, even while the
port holds the TIME_WAIT sockets of the connections the server closed."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from eoskit.runtime.devtools.services import LocalServices
from eoskit.runtime.devtools.services.base import LaunchSpec, LocalService
from eoskit.runtime.devtools.services.errors import DevServicesError
from eoskit.runtime.devtools.services.state import load_state

#: A server that accepts a connection and closes it first (so the closed
#: connection's TIME_WAIT stays on the server's port), as databases do on
#: shutdown. It binds with SO_REUSEADDR, as real servers do.
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
while True:
    c, _ = s.accept(); c.sendall(b"hi"); c.close()
"""


class Echo(LocalService):
    name = "echo"

    def check_installed(self) -> None:
        pass

    def launch(self, state):
        return LaunchSpec(argv=[sys.executable, "-c", SERVER, str(state.port)])

    def probe(self, state):
        with socket.create_connection(("127.0.0.1", state.port), timeout=1) as conn:
            assert conn.recv(2) == b"hi"


@pytest.fixture
def services(tmp_path: Path):
    services = LocalServices(tmp_path, timeout=10)
    services.services = [Echo(tmp_path)]
    services._endpoints = lambda state: object()  # type: ignore[method-assign]  # no real endpoints
    services.up()
    yield services
    services.down()


def test_restart_keeps_the_port_and_runs_while_down_in_between(services: LocalServices, tmp_path: Path):
    before = load_state(tmp_path).services["echo"]
    seen = []
    services.restart("echo", while_down=lambda: seen.append(services.status()["echo"]))
    after = load_state(tmp_path).services["echo"]
    assert seen == ["stopped"]
    assert after.port == before.port and after.pid != before.pid
    assert services.status()["echo"].startswith(f"running on 127.0.0.1:{before.port}")


def test_restart_starts_again_when_while_down_fails(services: LocalServices, tmp_path: Path):
    def fail() -> None:
        raise RuntimeError("the test's fault")

    with pytest.raises(RuntimeError, match="the test's fault"):
        services.restart("echo", while_down=fail)
    assert services.status()["echo"].startswith("running")


def test_restart_of_what_is_not_running_is_refused(services: LocalServices):
    services.down()
    with pytest.raises(DevServicesError, match="echo: not running"):
        services.restart("echo")
    with pytest.raises(ValueError, match="no such dev service: nope"):
        services.restart("nope")
