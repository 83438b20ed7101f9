"""The lab itself: :class:`Lab` makes the switch and the hosts
(:class:`Host`) and the faults between them (:class:`Fault`), and removes
them all when it ends. Stdlib only (see the package's docstring)."""

from __future__ import annotations

import atexit
import ipaddress
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .namespaces import (
    _LAB_NAME,
    NetlabError,
    _claim_prefix,
    _delete_netns,
    _in_netns,
    _list_netns,
    _run,
    _socket_in,
    _state_path,
    _tool,
    sweep,
)
from .proxy import DelayProxy, _abort

_HOST_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,19}$")
_SWITCH = "switch"
_IN = "eoskit-in"  # each host's chain of faults, jumped to from INPUT
_CHAIN = f"*filter\n:{_IN} - [0:0]\n-A INPUT -j {_IN}\nCOMMIT\n"
_HOST_SYSCTLS = {
    # IPv4 only, so that no traffic goes around the IPv4 rules.
    "net/ipv6/conf/all/disable_ipv6": "1",
    "net/ipv6/conf/default/disable_ipv6": "1",
    # A closed connection's unanswered FIN is given up after about a second
    # instead of minutes: a process killed while its host is cut off leaves
    # its peer half-open, as a crashed machine would (see Lab.isolate).
    "net/ipv4/tcp_orphan_retries": "1",
}


@dataclass(eq=False)
class Host:
    """One party of a test: a network namespace with ``eth0`` at ``ip``."""

    name: str
    ip: str
    netns: str
    _lab: Lab = field(repr=False)
    _port: str = field(repr=False)  # its cable's end on the switch

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run inside this host, for callers that start processes themselves."""
        return [_tool("ip"), "netns", "exec", self.netns, *map(str, argv)]

    def run(self, argv: Sequence[str], *, timeout: float = 60.0, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """``subprocess.run`` inside this host (always with a timeout)."""
        self._lab._check_open()
        return subprocess.run(self.argv(argv), timeout=timeout, **kwargs)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """A process inside this host, in a session of its own so that the
        lab can kill it and its children at exit."""
        self._lab._check_open()
        proc = subprocess.Popen(self.argv(argv), start_new_session=True, **kwargs)
        self._lab._processes.append(proc)
        return proc

    def socket(self, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """An IPv4 socket made inside this host: it binds and connects as the
        host does. The lab cuts it at exit (it would keep the namespace alive)."""
        self._lab._check_open()
        sock = _socket_in(self.netns, kind)
        self._lab._sockets.add(sock)
        return sock


@dataclass(frozen=True)
class _Rule:
    """An iptables rule in a host's ``eoskit-in`` chain."""

    netns: str
    spec: tuple[str, ...]


class Fault:
    """A fault in force until :meth:`heal` (idempotent). Every fault left is
    gone at lab exit, with the namespaces that hold it. ``with fault:`` heals
    on leaving the block."""

    def __init__(self, lab: Lab, description: str, tag: str, rules: list[_Rule],
                 qdiscs: Sequence[tuple[str, str]] = (), isolated: Host | None = None) -> None:
        self.description, self.tag = description, tag
        self._lab, self._rules, self._qdiscs, self._isolated = lab, rules, list(qdiscs), isolated
        self.healed = False

    def __repr__(self) -> str:
        return f"<Fault {self.tag}: {self.description}{' (healed)' if self.healed else ''}>"

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.heal()

    def packets(self) -> int:
        """Packets the fault's rules have matched (dropped, or answered with a reset)."""
        total = 0
        for netns in dict.fromkeys(rule.netns for rule in self._rules):
            listing = self._lab._iptables(netns, "-L", _IN, "-v", "-x", "-n")
            total += sum(int(line.split()[0]) for line in listing.splitlines() if f"/* {self.tag} */" in line)
        return total

    def heal(self) -> None:
        """Remove the fault. Healing an isolation first lets the host's kernel
        give up on connections closed meanwhile (see :meth:`Lab.isolate`)."""
        if self.healed:
            return
        if self._isolated is not None:
            self._lab._settle(self._isolated)
        for rule in self._rules:
            self._lab._iptables(rule.netns, "-D", _IN, *rule.spec)
        for netns, dev in self._qdiscs:
            _run([_tool("tc"), "-n", netns, "qdisc", "del", "dev", dev, "root"])
        self.healed = True
        self._lab._faults.remove(self)



_AVAILABLE: list[str | None] = []  # Lab.available()'s answer, once per process


class Lab:
    """Hosts on one switch and the faults between them; a context manager.

    Faults are iptables rules in the *receiving* host's ``eoskit-in`` chain,
    so a dropped packet is lost on the wire as far as its sender can tell
    (no EPERM from a local OUTPUT rule). ``timeout`` bounds the lab's life:
    a watchdog thread tears it down after that many seconds.
    """

    def __init__(self, name_prefix: str | None = None, subnet: str = "10.213.0.0/24",
                 timeout: float = 600.0, keep_while: Path | None = None) -> None:
        """``keep_while``: a kept lab, which outlives this process for as long
        as that file exists (the dev services', ``eoskit dev up --network``):
        no watchdog, no exit hook; :meth:`attach` finds it again, and
        :meth:`close` or :func:`sweep` (once the file is gone) removes it."""
        self.prefix = name_prefix or f"eosk{secrets.token_hex(3)}-"
        if not _LAB_NAME.fullmatch(self.prefix):
            raise NetlabError(f"lab prefix {self.prefix!r} must look like eosk<1-8 of a-z0-9>-")
        self.subnet = ipaddress.IPv4Network(subnet)
        if self.subnet.num_addresses < 4:
            raise NetlabError(f"subnet {subnet} is too small for a lab")
        self.timeout = timeout
        self.keep_while = keep_while
        self.hosts: dict[str, Host] = {}
        self._addresses = self.subnet.hosts()
        self._namespaces: list[str] = []
        self._faults: list[Fault] = []
        self._proxies: list[DelayProxy] = []
        self._processes: list[subprocess.Popen[Any]] = []
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._lock = threading.RLock()
        self._tags = 0
        self._state = "not started"
        self._closed = threading.Event()
        self._tester: str | None = None
        self._root_links: list[str] = []  # links made in the root namespace (the tester's)

    @property
    def switch(self) -> str:
        """The namespace holding the bridge every host is cabled to."""
        return self.prefix + _SWITCH

    @staticmethod
    def available() -> str | None:
        """Why a lab cannot run here, or None: for a test's skip message."""
        if not _AVAILABLE:
            _AVAILABLE.append(_why_unavailable())
        return _AVAILABLE[0]

    def __enter__(self) -> Lab:
        return self.start()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.close()
        except NetlabError as err:
            if exc_type is None:
                raise
            print(f"netlab: {err}", file=sys.stderr)  # the body's own error goes on

    def start(self) -> Lab:
        """Sweep dead labs' leftovers, write this lab's owner down, make the switch."""
        if self._state != "not started":
            raise NetlabError(f"lab {self.prefix} is {self._state}: make a new Lab")
        try:
            sweep()
        except NetlabError as err:  # another lab's leftovers do not stop this one
            print(f"netlab: {err}", file=sys.stderr)
        _claim_prefix(self.prefix, self.keep_while, str(self.subnet))
        self._state = "open"
        if self.keep_while is None:
            atexit.register(self.close)
        try:
            self._add_netns(self.switch)
            ip = _tool("ip")
            _run([ip, "-n", self.switch, "link", "add", "br0", "type", "bridge"])
            _run([ip, "-n", self.switch, "link", "set", "br0", "up"])
        except BaseException:
            self.close()
            raise
        if self.keep_while is None:
            threading.Thread(target=self._watch, name=f"netlab-watchdog-{self.prefix}", daemon=True).start()
        return self

    @classmethod
    def attach(cls, prefix: str) -> Lab:
        """A kept lab made by another process, found again by its prefix:
        its hosts (from their namespaces) and its tester, to make and heal
        faults or to close it. Faults left by a process that died stay until
        healed by their tag or the lab's close."""
        owner = json.loads(_state_path(prefix).read_text()) if _state_path(prefix).is_file() else None
        if owner is None or not owner.get("keep_while"):
            raise NetlabError(f"no kept lab {prefix} on this machine")
        lab = cls(prefix, owner.get("subnet") or "10.213.0.0/24", keep_while=Path(owner["keep_while"]))
        lab._state = "open"
        ip = _tool("ip")
        lab._namespaces = [name for name in _list_netns() if name.startswith(prefix)]
        lab._namespaces.sort(key=lambda name: name != lab.switch)  # the switch first, as made
        ports = _run([ip, "-n", lab.switch, "-o", "link"]).stdout
        for netns in lab._namespaces:
            name = netns[len(prefix):]
            if name == _SWITCH:
                continue
            shown = _run([ip, "-n", netns, "-4", "-o", "addr", "show", "dev", "eth0"]).stdout.split()
            address = shown[shown.index("inet") + 1].split("/")[0]
            link = _run([ip, "-n", netns, "-o", "link", "show", "eth0"]).stdout
            peer = re.search(r"link-netns \S+|@if(\d+)", link)
            index = peer.group(1) if peer and peer.group(1) else None
            port = next((line.split(":")[1].strip().split("@")[0] for line in ports.splitlines()
                         if index and line.startswith(f"{index}:")), "")
            lab.hosts[name] = Host(name, address, netns, lab, port)
        root = prefix.rstrip("-") + "t"
        shown = _run([ip, "-4", "-o", "addr", "show", "dev", root], check=False).stdout.split()
        if "inet" in shown:
            lab._tester = shown[shown.index("inet") + 1].split("/")[0]
            lab._root_links.append(root)
        used = {ipaddress.IPv4Address(h.ip) for h in lab.hosts.values()}
        if lab._tester:
            used.add(ipaddress.IPv4Address(lab._tester))
        lab._addresses = iter([a for a in lab.subnet.hosts() if a not in used])
        lab._tags = int(time.time() * 1000) % 10**9  # tags of its own, apart from earlier attachers'
        return lab

    def host(self, name: str) -> Host:
        """A new host ``name`` with the subnet's next address, cabled to the switch."""
        if not _HOST_NAME.match(name) or name == _SWITCH:
            raise NetlabError(f"host name {name!r} must be 1-20 of a-z, 0-9 and '-', and not {_SWITCH!r}")
        with self._lock:
            self._check_open()
            if name in self.hosts:
                raise NetlabError(f"lab {self.prefix} already has a host {name!r}")
            address = next(self._addresses, None)
            if address is None:
                raise NetlabError(f"subnet {self.subnet} has no address left for host {name!r}")
            netns, port, ip = self.prefix + name, f"p{len(self.hosts) + 1}", _tool("ip")
            self._add_netns(netns)
            # Both ends made inside their namespaces: nothing passes through the root's.
            _run([ip, "link", "add", port, "netns", self.switch, "type", "veth",
                  "peer", "name", "eth0", "netns", netns])
            _run([ip, "-n", self.switch, "link", "set", port, "master", "br0", "up"])
            _run([ip, "-n", netns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0"])
            _run([ip, "-n", netns, "link", "set", "lo", "up"])
            _run([ip, "-n", netns, "link", "set", "eth0", "up"])
            _in_netns(netns, lambda: _write_sysctls(_HOST_SYSCTLS))
            _run([ip, "netns", "exec", netns, _tool("iptables-restore")], input=_CHAIN)
            host = Host(name, str(address), netns, self, port)
            self.hosts[name] = host
            for fault in self._faults:  # an isolated host is cut from newcomers too
                if fault._isolated is not None:
                    fault._rules.append(self._add_rule(netns, ("-s", fault._isolated.ip, "-j", "DROP"), fault.tag))
            return host

    def tester(self) -> str:
        """Cable the root namespace itself to the switch and return its
        address: the test's own view, from which it starts the parties'
        servers' clients and reads what they hold (psql, a read_committed
        consumer) at their hosts' addresses, whatever faults are made
        between the hosts (faults never name the tester). The link
        (``<prefix>t`` in the root namespace, on the lab's own subnet, with
        no forwarding) goes with the switch's namespace at close. Once per lab."""
        with self._lock:
            self._check_open()
            if self._tester is not None:
                return self._tester
            address = next(self._addresses, None)
            if address is None:
                raise NetlabError(f"subnet {self.subnet} has no address left for the tester")
            ip, link = _tool("ip"), self.prefix.rstrip("-") + "t"
            _run([ip, "link", "add", link, "type", "veth", "peer", "name", "tester", "netns", self.switch])
            self._root_links.append(link)
            _run([ip, "-n", self.switch, "link", "set", "tester", "master", "br0", "up"])
            _run([ip, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", link])
            _run([ip, "link", "set", link, "up"])
            self._tester = str(address)
            return self._tester

    def expose(self, host: Host, port: int) -> DelayProxy:
        """Reach ``host``'s ``port`` from the root namespace: connect to the
        returned proxy's ``.address`` (on 127.0.0.1). Its connections start
        inside ``host`` itself, so no fault between hosts touches them: this
        is the test's own view, e.g. to read a database to verify it."""
        self._own(host)
        return DelayProxy(None, 0, host.ip, port, 0.0, connect_from=host).start()

    # Faults. "a -> b" packets are dropped by a rule in b's namespace.

    def partition(self, a: Host, b: Host, *, one_way: bool = False) -> Fault:
        """No packet from ``a`` reaches ``b``, nor (unless ``one_way``) from ``b`` to ``a``."""
        self._own(a, b)
        rules = [(b.netns, ("-s", a.ip, "-j", "DROP"))]
        if not one_way:
            rules.append((a.netns, ("-s", b.ip, "-j", "DROP")))
        return self._fault(f"partition {a.name} {'->' if one_way else '<->'} {b.name}", rules)

    def lose_replies(self, server: Host, client: Host, port: int | None = None) -> Fault:
        """Requests reach ``server``, its replies to ``client`` are lost (only
        those from TCP ``port`` when given). Open connections keep sending;
        new ones cannot complete their handshake."""
        self._own(server, client)
        match = ("-p", "tcp", "--sport", str(port)) if port is not None else ()
        return self._fault(f"replies {server.name} -> {client.name}{f' from port {port}' if port else ''} lost",
                           [(client.netns, ("-s", server.ip, *match, "-j", "DROP"))])

    def reset(self, a: Host, b: Host, port: int | None = None) -> Fault:
        """``b`` answers every TCP packet from ``a`` (to ``port`` when given)
        with a reset: open connections break and new ones are refused at once."""
        self._own(a, b)
        match = ("--dport", str(port)) if port is not None else ()
        return self._fault(f"TCP {a.name} -> {b.name}{f':{port}' if port else ''} reset",
                           [(b.netns, ("-p", "tcp", "-s", a.ip, *match,
                                       "-j", "REJECT", "--reject-with", "tcp-reset"))])

    def packet_loss(self, a: Host, b: Host, probability: float) -> Fault:
        """Each packet from ``a`` to ``b`` is dropped with ``probability`` (one direction)."""
        self._own(a, b)
        if not 0.0 < probability <= 1.0:
            raise NetlabError(f"packet loss probability must be in (0, 1], not {probability}")
        return self._fault(f"{probability:.0%} of {a.name} -> {b.name} lost",
                           [(b.netns, ("-s", a.ip, "-m", "statistic", "--mode", "random",
                                       "--probability", f"{probability:.6f}", "-j", "DROP"))])

    def isolate(self, host: Host) -> Fault:
        """``host`` cut from every other host, present and future.

        For a half-open peer: kill a client process while its host is
        isolated, then heal. The heal first waits for the host's kernel to
        give up on the dead process's closing connections (about a second,
        see ``tcp_orphan_retries`` above), so no late FIN tells the server:
        it has to find out by itself, as after a machine's crash.
        """
        self._own(host)
        rules = [(host.netns, ("-i", "eth0", "-j", "DROP"))]
        rules += [(other.netns, ("-s", host.ip, "-j", "DROP")) for other in self.hosts.values() if other is not host]
        return self._fault(f"{host.name} isolated", rules, isolated=host)

    def slow_link(self, host: Host, rate: str = "1mbit", burst: str = "32kbit", latency: str = "400ms") -> Fault:
        """``host``'s cable shaped to ``rate`` both ways by a token bucket
        (tbf): on its ``eth0`` and on its port of the switch."""
        self._own(host)
        if any(f._qdiscs and f._qdiscs[0][0] == host.netns for f in self._faults):
            raise NetlabError(f"host {host.name} already has a slow link: heal it first")
        shape = ("tbf", "rate", rate, "burst", burst, "latency", latency)
        return self._fault(f"{host.name}'s link at {rate}", [],
                           qdiscs=[(host.netns, "eth0", shape), (self.switch, host._port, shape)])

    # Inner workings.

    def _fault(self, description: str, rules: list[tuple[str, tuple[str, ...]]],
               qdiscs: Sequence[tuple[str, str, tuple[str, ...]]] = (), isolated: Host | None = None) -> Fault:
        with self._lock:
            self._check_open()
            self._tags += 1
            fault = Fault(self, description, f"eoskit-f{os.getpid()}-{self._tags}", [], isolated=isolated)
            self._faults.append(fault)
            try:
                for netns, spec in rules:
                    fault._rules.append(self._add_rule(netns, spec, fault.tag))
                for netns, dev, shape in qdiscs:
                    _run([_tool("tc"), "-n", netns, "qdisc", "add", "dev", dev, "root", *shape])
                    fault._qdiscs.append((netns, dev))
            except BaseException:
                fault.heal()
                raise
            return fault

    def _add_rule(self, netns: str, spec: tuple[str, ...], tag: str) -> _Rule:
        rule = _Rule(netns, ("-m", "comment", "--comment", tag, *spec))
        self._iptables(netns, "-A", _IN, *rule.spec)
        return rule

    def _iptables(self, netns: str, *args: str) -> str:
        return _run([_tool("ip"), "netns", "exec", netns, _tool("iptables"), "-w", "5", *args]).stdout

    def _settle(self, host: Host, timeout: float = 15.0) -> None:
        """Wait until ``host`` has no connection left whose FIN is unanswered."""
        deadline = time.monotonic() + timeout
        argv = host.argv([_tool("ss"), "-H", "-tan", "state", "fin-wait-1", "state", "closing", "state", "last-ack"])
        while (closing := _run(argv).stdout.strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        if closing:
            raise NetlabError(f"host {host.name} still has closing connections after {timeout:g} s "
                              f"(their FINs would reach peers after the heal): {closing}")

    def _own(self, *hosts: Host) -> None:
        for host in hosts:
            if host._lab is not self:
                raise NetlabError(f"host {host.name} belongs to lab {host._lab.prefix}, not {self.prefix}")
        if len(hosts) == 2 and hosts[0] is hosts[1]:
            raise NetlabError(f"a fault between host {hosts[0].name} and itself")

    def _add_netns(self, name: str) -> None:
        self._namespaces.append(name)  # before: a half-made namespace is deleted too
        _run([_tool("ip"), "netns", "add", name])

    def _check_open(self) -> None:
        if self._state != "open":
            raise NetlabError(f"lab {self.prefix} is {self._state}")

    def _watch(self) -> None:
        if self._closed.wait(self.timeout):
            return
        print(f"netlab: lab {self.prefix} outlived its {self.timeout:g} s timeout; tearing it down", file=sys.stderr)
        try:
            self.close(f"torn down by its watchdog after {self.timeout:g} s")
        except NetlabError as err:
            print(f"netlab: {err}", file=sys.stderr)

    def close(self, reason: str = "closed") -> None:
        """Tear the lab down (idempotent): proxies closed, processes stopped
        (SIGTERM to their groups, then SIGKILL to all in the namespaces),
        namespaces deleted with every link, rule and qdisc in them."""
        with self._lock:
            if self._state != "open":
                return
            self._state = reason
        self._closed.set()
        atexit.unregister(self.close)
        for proxy in self._proxies:
            proxy.close()
        for sock in list(self._sockets):
            _abort(sock)
        for fault in self._faults:
            fault.healed = True  # the rules and qdiscs go with their namespaces
        self._faults.clear()
        _stop(self._processes)
        for link in self._root_links:  # gone with its peer in the switch, normally
            _run([_tool("ip"), "link", "delete", link], check=False)
        errors = _delete_netns(self._namespaces[::-1])
        if errors:
            raise NetlabError(f"lab {self.prefix} not fully removed (`sweep` retries): " + "; ".join(errors))
        _state_path(self.prefix).unlink(missing_ok=True)


def _write_sysctls(values: dict[str, str]) -> None:
    """Write /proc/sys/ entries of the calling thread's network namespace
    (skipping IPv6's when the kernel has no IPv6)."""
    for key, value in values.items():
        try:
            Path("/proc/sys", key).write_text(value)
        except FileNotFoundError:
            if "ipv6" not in key:
                raise


def _stop(processes: list[subprocess.Popen[Any]], grace: float = 3.0) -> None:
    """SIGTERM the groups of those still running; the lab's SIGKILL sweep of
    its namespaces follows. A reaped leader's pid is never signalled again."""
    for proc in processes:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for proc in processes:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5.0)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass  # what is left in the namespaces is killed next


def _why_unavailable() -> str | None:
    if os.geteuid() != 0:
        return f"network labs need root (this is uid {os.geteuid()})"
    try:
        with Lab(timeout=60.0) as lab:  # every step a real lab takes
            lab.isolate(lab.host("probe")).heal()
    except (NetlabError, OSError) as err:
        return f"cannot make a network lab here: {err}"
    return None
