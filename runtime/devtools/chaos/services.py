"""The job's servers that ``eoskit chaos`` may stop and start: eoskit's dev
services, and only those.

A database or broker fault stops a server and starts it again. That is
only ever done to a server eoskit itself runs for development
(``eoskit dev up``): never to a server the job merely names, which may be
shared or in production. So each fault kind asks whether the job's servers
(``runtime.components.Served``: the sink's database, the source's and the
sink's brokers) are the dev services of ``--dev-dir``, matched by port on
the loopback host the dev services listen on. A fault kind whose server is
not one of them is skipped, with a line saying so (``plan.NEEDS``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from eoskit.runtime.devtools.services.local import LocalServices
from eoskit.runtime.devtools.services.network import is_networked
from eoskit.runtime.devtools.services.state import STATE_FILE, load_state
from eoskit.runtime.job.components import Served

#: The dev service that serves each kind of server a component names.
DEV_SERVICE = {"postgresql": "postgres", "mysql": "mariadb", "mariadb": "mariadb", "kafka": "kafka"}
#: Where the dev services listen.
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass
class DevServers:
    """The dev services (in ``root``) that are the job's: ``database`` is
    the sink's database server's service name, ``brokers`` the Kafka nodes
    the job talks to (``kafka``, ``kafka-2``...); empty when none is."""

    root: Path | None = None
    database: str | None = None
    brokers: list[str] = field(default_factory=list)
    #: The dev services run on a network lab's hosts (``eoskit dev up --network``).
    networked: bool = False

    def available(self) -> set[str]:
        """The :data:`plan.NEEDS` these servers meet."""
        found = ({"dev-database"} if self.database else set()) | ({"dev-broker"} if self.brokers else set())
        return found | ({"dev-network"} if self.networked and found else set())

    def network_target(self) -> str:
        """The dev service a ``network`` fault cuts the job's host from:
        the sink's database where the job has one, else its broker."""
        name = self.database or (self.brokers[0] if self.brokers else None)
        if name is None:
            raise ValueError("no dev service for a network fault")
        return name

    def service(self, kind: str) -> str:
        """The dev service a ``database`` or ``broker`` fault stops."""
        name = self.database if kind == "database" else (self.brokers[0] if self.brokers else None)
        if name is None:
            raise ValueError(f"no dev service for a {kind} fault")
        return name

    def restart(self, kind: str, down_s: float) -> str:
        """Stop the server of a ``kind`` fault as ``eoskit dev down`` does,
        keep it down ``down_s`` seconds, start it again on the same port with
        its data; the service's name."""
        name = self.service(kind)
        assert self.root is not None
        LocalServices(self.root).restart(name, while_down=lambda: time.sleep(down_s))
        return name


def find(root: Path | None, *components: object) -> DevServers:
    """Which of the components' servers are the running dev services of
    ``root`` (None, or a folder with no dev services: none)."""
    if root is None or not (Path(root) / STATE_FILE).is_file():
        return DevServers()
    services = LocalServices(root)
    running = {name for name, status in services.status().items() if status.startswith("running")}
    # A service's main port and the others it listens on (Kafka's SASL_SSL listener).
    state = load_state(services.root).services
    ports = {name: entry.all_ports() for name, entry in state.items() if name in running}
    # Where each listens: loopback, or its own host's address (on a network lab).
    addresses = {name: entry.extra.get("address") for name, entry in state.items()}
    found = DevServers(services.root, networked=is_networked(services.root))
    for component in components:
        if not isinstance(component, Served):
            continue
        for kind, host, port in component.servers():
            wanted = DEV_SERVICE.get(kind)
            for name, listening in ports.items():
                if port not in listening or not (name == wanted or name.startswith(f"{wanted}-")):
                    continue
                if host != addresses.get(name) and not (host in LOOPBACK and addresses.get(name) is None):
                    continue
                if kind == "kafka" and name not in found.brokers:
                    found.brokers.append(name)
                elif kind != "kafka" and found.database is None:
                    found.database = name
    return found
