"""Podman on this machine, set up for testcontainers and undone after.

``PodmanHost(root).up()`` makes a Docker-compatible engine out of Debian's
Podman 4.3 and returns the environment a testcontainers user needs;
``down()`` puts the machine back as it was found. The steps, each with why
it is needed here:

1. **Record the host's network state first** (``host-before.json``): the
   ``ip_forward`` switches, the root namespace's nftables ruleset (Debian's
   ``iptables`` is its nf_tables front end, so this holds the CNI chains
   too) and the network links. Podman's bridge network turns forwarding on
   and adds NAT chains; only a record taken before it can undo that. A
   record left by a run that died is kept, so the next ``down`` still
   restores the state before that run.
2. **A containers.conf of our own** (``CONTAINERS_CONF``, nothing in
   ``/etc``): runc, because crun fails on this kernel's hybrid cgroups;
   default ulimits with equal soft and hard values no higher than this
   process's own, because Podman's compatibility API swaps soft and hard
   and the sandbox cannot raise a hard limit (no CAP_SYS_RESOURCE).
3. **The Docker-compatible socket**: ``podman system service`` in a process
   group of its own, at ``<root>/podman.sock``; testcontainers and the
   ``docker`` SDK talk to it through ``DOCKER_HOST``.
4. **testcontainers' settings**: no Ryuk (its image is on Docker Hub, and
   ``down`` removes what it would have), and the ``docker_host`` connection
   mode, because this machine has ``/.dockerenv`` and testcontainers would
   otherwise look for a gateway that is not there.

``down`` removes every container of eoskit's images and testcontainers',
every network made since ``up`` (the record names those before), stops
the socket, deletes the links that were not
there before, restores the nftables ruleset and the forwarding switches,
and only then deletes the record.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..services.errors import DevServicesError, MissingBinaryError
from ..services.processes import ProcessRef, is_alive, start_process, stop_process, tail

#: The label every container, network and image eoskit makes carries.
LABEL = "eoskit.podman"
#: The ``ip_forward`` switches Podman's bridge turns on.
FORWARDING = ("/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding")
#: Podman's own network, which it makes again whenever it is missing.
DEFAULT_NETWORK = "podman"
#: Links Podman's networks create in the root namespace.
LINK_PREFIXES = ("cni-podman", "podman", "veth")
_INSTALL = "install it with `bash scripts/containers.sh install` (Debian: apt-get install podman runc)"


def podman_binary() -> str:
    """The ``podman`` program, or a clear error naming how to install it."""
    found = shutil.which("podman")
    if found is None:
        raise MissingBinaryError(f"podman: not installed; {_INSTALL}")
    return found


def _ulimits() -> list[str]:
    """Equal soft and hard limits, within this process's own hard limits."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    # runc sets the limits from a process whose own NPROC may sit below the
    # hard value seen here (refused at 96365 where 32768 passed): stay low.
    nofile = 65536 if nofile == resource.RLIM_INFINITY else min(nofile, 65536)
    nproc = 32768 if nproc == resource.RLIM_INFINITY else min(nproc // 2, 32768)
    return [f"nofile={nofile}:{nofile}", f"nproc={nproc}:{nproc}"]


def containers_conf() -> str:
    """The text of step 2's containers.conf."""
    limits = ", ".join(json.dumps(limit) for limit in _ulimits())
    return f'[containers]\ndefault_ulimits = [{limits}]\n\n[engine]\nruntime = "runc"\n'


#: How long a local network command (``ip``, ``nft``) may take.
COMMAND_TIMEOUT_S = 30.0


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, **kwargs)


def _links() -> tuple[str, ...]:
    out = _run(["ip", "-o", "link", "show"]).stdout
    return tuple(line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.count(":") >= 2)


def _nft_ruleset() -> str:
    # Stateless (-s): without the counters, which change with every packet.
    return _run(["nft", "-s", "list", "ruleset"]).stdout


@dataclass(frozen=True)
class HostState:
    """Step 1's record of the root namespace: the forwarding switches (path ->
    value), the nftables ruleset, the links."""

    forwarding: dict[str, str]
    nft: str
    links: tuple[str, ...]

    @classmethod
    def read(cls) -> HostState:
        forwarding = {path: Path(path).read_text().strip() for path in FORWARDING if Path(path).exists()}
        return cls(forwarding, _nft_ruleset(), _links())

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> HostState:
        return cls(dict(record["forwarding"]), str(record["nft"]), tuple(record["links"]))

    def differences(self, now: HostState) -> list[str]:
        """What differs in ``now`` from this record (links: only new ones)."""
        found = [f"{path} is {value}, was {self.forwarding.get(path)}"
                 for path, value in now.forwarding.items() if self.forwarding.get(path) != value]
        if now.nft != self.nft:
            found.append("the nftables ruleset differs")
        new_links = sorted(set(now.links) - set(self.links))
        if new_links:
            found.append(f"new links {', '.join(new_links)}")
        return found

    def restore(self) -> list[str]:
        """Put the root namespace back as recorded; what was undone."""
        undone = []
        for link in _links():
            if link not in self.links and link.startswith(LINK_PREFIXES):
                _run(["ip", "link", "delete", link])
                undone.append(f"link {link}")
        if _nft_ruleset() != self.nft:
            _run(["nft", "flush", "ruleset"], check=True)
            if self.nft.strip():
                _run(["nft", "-f", "-"], input=self.nft, check=True)
            undone.append("nftables ruleset")
        for path, value in self.forwarding.items():
            if Path(path).read_text().strip() != value:
                Path(path).write_text(value + "\n")
                undone.append(f"{path}={value}")
        return undone


class PodmanHost:
    """Podman's socket and settings under ``root`` (default ``.eoskit/podman``)."""

    def __init__(self, root: str | os.PathLike[str] = ".eoskit/podman", timeout: float = 60.0) -> None:
        self.root = Path(root).absolute()
        self.timeout = timeout

    @property
    def socket(self) -> Path:
        return self.root / "podman.sock"

    @property
    def conf(self) -> Path:
        return self.root / "containers.conf"

    @property
    def record(self) -> Path:
        return self.root / "host-before.json"

    def env(self) -> dict[str, str]:
        """What podman, testcontainers and the docker SDK need to use this host."""
        return {
            "CONTAINERS_CONF": str(self.conf),
            "DOCKER_HOST": f"unix://{self.socket}",
            "TESTCONTAINERS_RYUK_DISABLED": "true",
            "TESTCONTAINERS_CONNECTION_MODE": "docker_host",
        }

    def podman(self, *args: str, check: bool = True, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
        """Run the podman CLI with this host's settings."""
        done = subprocess.run([podman_binary(), *args], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env()}, check=False)
        if check and done.returncode != 0:
            raise DevServicesError(f"podman {' '.join(args[:2])}: {(done.stderr or done.stdout).strip()[-800:]}")
        return done

    def up(self) -> dict[str, str]:
        """Steps 1-4: record, configure, start the socket; the environment to use."""
        podman_binary()
        self.root.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(containers_conf())  # first: podman refuses to run without it
        if not self.record.exists():
            record = {**asdict(HostState.read()), "networks": self._networks()}
            self.record.write_text(json.dumps(record, indent=1) + "\n")
        if not self.serving():
            self.socket.unlink(missing_ok=True)
            ref = start_process([podman_binary(), "system", "service", "--time=0", f"unix://{self.socket}"],
                                self.root / "service.log", env={**os.environ, **self.env()})
            (self.root / "service.pid").write_text(f"{ref.pid} {ref.start_time}\n")
            self._wait_for_socket(ref)
        return self.env()

    def down(self) -> list[str]:
        """Undo everything :meth:`up` and the containers did; what was removed."""
        removed: list[str] = []
        before = json.loads(self.record.read_text()) if self.record.exists() else None
        if shutil.which("podman") is not None and self.conf.exists():
            removed += self._remove_labelled(None if before is None else before.get("networks"))
        ref = self._service_ref()
        if ref is not None:
            stop_process(ref)
            (self.root / "service.pid").unlink(missing_ok=True)
        self.socket.unlink(missing_ok=True)
        if before is not None:
            recorded = HostState.from_record(before)
            removed += recorded.restore()
            left = recorded.differences(HostState.read())
            if left:
                raise DevServicesError(f"podman: the host is not as it was before `up`: {'; '.join(left)} "
                                       f"(the record stays in {self.record})")
            self.record.unlink()
        return removed

    # -- internals --------------------------------------------------------

    def _networks(self) -> list[str]:
        return self.podman("network", "ls", "--format", "{{.Name}}").stdout.split()

    def _remove_labelled(self, networks_before: list[str] | None) -> list[str]:
        """Every container of eoskit's images or testcontainers', then every
        network made since ``up`` (compose's among them), or labelled ours."""
        removed = []
        for label in (LABEL, "org.testcontainers"):
            ids = self.podman("ps", "-aq", "--filter", f"label={label}", check=False).stdout.split()
            if ids:
                self.podman("rm", "-f", "-v", *ids, check=False)
                removed += [f"container {i[:12]}" for i in ids]
        ours = self.podman("network", "ls", "-q", "--filter", f"label={LABEL}", check=False).stdout.split()
        made = [] if networks_before is None else [n for n in self._networks() if n not in networks_before]
        for network in dict.fromkeys(ours + made):
            if network != DEFAULT_NETWORK and self.podman("network", "rm", "-f", network,
                                                          check=False).returncode == 0:
                removed.append(f"network {network}")
        return removed

    def _service_ref(self) -> ProcessRef | None:
        try:
            pid, start = (self.root / "service.pid").read_text().split()
        except (FileNotFoundError, ValueError):
            return None
        return ProcessRef(int(pid), None if start == "None" else int(start))

    def serving(self) -> bool:
        """Whether this folder's ``podman system service`` runs."""
        ref = self._service_ref()
        return ref is not None and is_alive(ref) and self.socket.exists()

    def _wait_for_socket(self, ref: ProcessRef) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if not is_alive(ref):
                raise DevServicesError(f"podman system service exited:\n{tail(self.root / 'service.log')}")
            if self.socket.exists() and self.podman("--url", f"unix://{self.socket}", "version",
                                                    check=False, timeout=10).returncode == 0:
                return
            time.sleep(0.2)
        raise DevServicesError(f"podman system service: no socket at {self.socket} after {self.timeout:.0f}s")
