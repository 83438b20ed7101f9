"""Network labs: each party of a distributed test on a host of its own.

A :class:`Lab` puts hosts, each a Linux network namespace with one ``eth0``,
on a bridge that lives in a "switch" namespace of its own, and makes faults
between them with iptables rules inside the hosts' namespaces: partitions,
lost replies, resets, packet loss, isolation (for half-open peers), slow links
(tbf). The kernel here has no netem, so latency comes from :class:`DelayProxy`.

Nothing is created in the root namespace: the test process reaches a host's
service through :meth:`Lab.expose` (a forwarder listening on the root's
loopback whose outgoing socket is made inside the host's namespace) or opens
sockets inside a host with :meth:`Host.socket`. An address in the root
namespace would be seen by every process on the machine and would collide
with a concurrent lab on the same subnet.

Cleanup: every namespace name starts with the lab's prefix, ``eosk<6 hex>-``,
and a state file under :data:`STATE_DIR` names the owning process (pid and
start time) before anything is made. ``Lab.__exit__`` (or the ``atexit`` hook,
or the watchdog after ``timeout``) kills the processes in the namespaces and
deletes the namespaces, which takes their links, rules and qdiscs with them;
:func:`sweep` does the same for labs whose owner died (run at every lab's
start, and by ``python -m eoskit.runtime.dev.netlab sweep``).

Stdlib only, so that the file also runs by path (``python netlab.py sweep``).
See docs/network-faults.md.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import ipaddress
import json
import os
import queue
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["STATE_DIR", "DelayProxy", "Fault", "Host", "Lab", "NetlabError", "sweep"]

#: Where each lab's owner is written down, so that :func:`sweep` can tell a
#: live lab from one left by a killed process.
STATE_DIR = Path("/run/eoskit-netlab")
_LAB_NAME = re.compile(r"^(eosk[a-z0-9]{1,8}-)")
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
_COMMAND_TIMEOUT = 20.0
_CLONE_NEWNET = 0x40000000
_LIBC = ctypes.CDLL(None, use_errno=True)
_T = TypeVar("_T")


class NetlabError(RuntimeError):
    """A lab could not be made, changed or removed; the message names what."""


def _tool(name: str) -> str:
    """Full path of ``name`` (sbin directories are not on every PATH)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise NetlabError(f"`{name}` is not installed (apt-get install iptables iproute2)")
    return found


def _run(argv: Sequence[str], *, input: str | None = None, check: bool = True,
         timeout: float = _COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run a setup command; a failure names the command and what it printed."""
    command = " ".join(argv)
    try:
        done = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise NetlabError(f"`{command}` did not finish within {timeout:g} s") from None
    except FileNotFoundError:
        raise NetlabError(f"`{argv[0]}` is not installed") from None
    if check and done.returncode != 0:
        raise NetlabError(f"`{command}` failed (exit {done.returncode}): {done.stderr.strip()}")
    return done


def _in_netns(netns: str | None, work: Callable[[], _T], timeout: float = 10.0) -> _T:
    """``work()`` run on a fresh thread that has entered ``netns``.

    setns(2) moves only the calling thread, and a socket stays in the
    namespace it was made in, so this is how a socket (or a /proc/sys/net
    write) is made inside a host without a subprocess. The thread ends
    afterwards instead of going back: nothing else ever runs in it.
    """
    if netns is None:
        return work()
    outcome: dict[str, Any] = {}

    def enter_and_work() -> None:
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if _LIBC.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise NetlabError(f"cannot enter namespace {netns}: {os.strerror(err)}")
            finally:
                os.close(fd)
            outcome["value"] = work()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=enter_and_work, name=f"netlab-{netns}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise NetlabError(f"work inside namespace {netns} did not finish within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _socket_in(netns: str | None, kind: int = socket.SOCK_STREAM) -> socket.socket:
    return _in_netns(netns, lambda: socket.socket(socket.AF_INET, kind))


def _start_time(pid: int) -> int | None:
    """Start time of a live (not zombie) ``pid`` in clock ticks, or None.

    The same check as :mod:`.processes`, repeated so this module stays
    stdlib-only: a recycled pid is not taken for a lab's owner.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _state_path(prefix: str) -> Path:
    return STATE_DIR / f"{prefix.rstrip('-')}.json"


def _owner_alive(prefix: str) -> bool:
    """A process's lab lives while its process does; a kept lab
    (``Lab(keep_while=...)``, the dev services') while its owner's file exists."""
    try:
        owner = json.loads(_state_path(prefix).read_text())
        if owner.get("keep_while"):
            return Path(owner["keep_while"]).exists()
        started = _start_time(int(owner["pid"]))
        return started is not None and started == owner["start_time"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _list_netns() -> list[str]:
    out = _run([_tool("ip"), "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _delete_netns(names: Sequence[str]) -> list[str]:
    """Kill every process inside ``names``, then delete them; the errors."""
    ip, errors = _tool("ip"), []
    for name in names:
        pids = _run([ip, "netns", "pids", name], check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    for name in names:
        done = _run([ip, "netns", "delete", name], check=False)
        if done.returncode != 0 and name in _list_netns():
            errors.append(f"namespace {name}: {done.stderr.strip()}")
    return errors


def sweep(prefix: str = "eosk") -> list[str]:
    """Remove the namespaces (their processes, links and rules with them) of
    labs whose owning process is gone; the namespace names removed.

    A state file is written before a lab makes anything, so a namespace
    without a live owner is a leftover, never a lab being built.
    """
    labs: dict[str, list[str]] = {}
    for name in _list_netns():
        match = _LAB_NAME.match(name)
        if match and name.startswith(prefix):
            labs.setdefault(match.group(1), []).append(name)
    if STATE_DIR.is_dir():
        for path in STATE_DIR.glob(f"{prefix}*.json"):
            labs.setdefault(f"{path.stem}-", [])
    removed = []
    for lab_prefix, names in sorted(labs.items()):
        if _owner_alive(lab_prefix):
            continue
        errors = _delete_netns(names)
        if errors:
            raise NetlabError(f"sweeping lab {lab_prefix}: " + "; ".join(errors))
        _state_path(lab_prefix).unlink(missing_ok=True)
        removed += names
    return removed


def _claim_prefix(prefix: str, keep_while: Path | None = None, subnet: str = "") -> None:
    """Write down the owner of ``prefix`` before anything of it exists: this
    process, or (a kept lab) a file whose existence keeps it.

    Written aside and linked into place, so that a sweeper never reads a
    half-written file (and takes the lab for a dead one) and two labs never
    share a prefix.
    """
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    path, aside = _state_path(prefix), STATE_DIR / f".{prefix}{os.getpid()}.tmp"
    owner: dict[str, Any] = {"pid": os.getpid(), "start_time": _start_time(os.getpid())}
    if keep_while is not None:
        owner.update(keep_while=str(Path(keep_while).absolute()), subnet=subnet)
    aside.write_text(json.dumps(owner))
    try:
        os.link(aside, path)
    except FileExistsError:
        raise NetlabError(f"lab prefix {prefix} is taken ({path} exists)") from None
    finally:
        aside.unlink()


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


class DelayProxy:
    """A TCP proxy that holds each direction's bytes ``delay_s`` before
    passing them on, in order: latency, since this kernel has no netem.

    It listens on ``listen_host`` (None: the root namespace's loopback) and
    connects to the target from ``connect_from`` (default: the listening
    host), on threads of this process, its sockets made inside the
    namespaces. A reset on one side is passed on as a reset.
    """

    def __init__(self, listen_host: Host | None, listen_port: int, target_ip: str, target_port: int,
                 delay_s: float, *, connect_from: Host | None = None) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, not {delay_s}")
        source = connect_from or listen_host
        self._listen = (listen_host.netns if listen_host else None, listen_host.ip if listen_host else "127.0.0.1")
        self._listen_port, self._target = listen_port, (target_ip, target_port)
        self._source_netns = source.netns if source else None
        owner = listen_host or connect_from
        self._lab = owner._lab if owner is not None else None
        self.delay_s = delay_s
        self.address: tuple[str, int] = (self._listen[1], listen_port)
        self._stop = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None

    def start(self) -> DelayProxy:
        listener = _socket_in(self._listen[0])
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self._listen[1], self._listen_port))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener, self.address = listener, listener.getsockname()
        if self._lab is not None:
            self._lab._proxies.append(self)
        threading.Thread(target=self._accept_loop, name=f"netlab-proxy-{self.address[1]}", daemon=True).start()
        return self

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening and cut every connection (idempotent)."""
        self._stop.set()
        with self._lock:
            sockets, self._sockets = list(self._sockets), set()
        for sock in [*sockets, *([self._listener] if self._listener else [])]:
            _abort(sock)

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(None)
        try:
            upstream = _socket_in(self._source_netns)
        except (OSError, NetlabError):
            _abort(client)
            return
        with self._lock:
            if self._stop.is_set():
                _abort(client)
                _abort(upstream)
                return
            self._sockets |= {client, upstream}
        try:
            upstream.settimeout(10.0)
            upstream.connect(self._target)
            upstream.settimeout(None)
        except OSError:
            _abort(client)
            _abort(upstream)
            return
        remaining = [2]

        def finished() -> None:
            with self._lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
                self._sockets -= {client, upstream}
            client.close()
            upstream.close()

        for src, dst in ((client, upstream), (upstream, client)):
            self._pipe(src, dst, finished)

    def _pipe(self, src: socket.socket, dst: socket.socket, finished: Callable[[], None]) -> None:
        """One direction: a reader stamps each chunk with when it is due, a writer sends it then."""
        pending: queue.SimpleQueue[tuple[float, bytes | None]] = queue.SimpleQueue()

        def read() -> None:
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    pending.put((time.monotonic(), None))  # None: the source broke
                    return
                pending.put((time.monotonic() + self.delay_s, data))
                if not data:
                    return

        def write() -> None:
            try:
                while True:
                    due, data = pending.get()
                    if self._stop.wait(max(0.0, due - time.monotonic())):
                        return
                    if data is None:
                        _abort(dst)
                        return
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(data)
            except OSError:
                _abort(dst)
                _abort(src)
            finally:
                finished()

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()


def _abort(sock: socket.socket) -> None:
    """Cut a connection with a reset: linger 0, and SHUT_RD (which sends
    nothing, unlike SHUT_WR's FIN) to wake a thread blocked reading it."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RD)
    except OSError:
        pass
    sock.close()


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eoskit.runtime.dev.netlab",
                                     description="eoskit's network lab (docs/network-faults.md)")
    commands = parser.add_subparsers(dest="command", required=True)
    sweeping = commands.add_parser("sweep", help="remove what labs of dead processes left behind")
    sweeping.add_argument("--prefix", default="eosk", help="only namespaces starting with this")
    commands.add_parser("check", help="say whether a lab can run on this machine")
    args = parser.parse_args(argv)
    try:
        if args.command == "sweep":
            removed = sweep(args.prefix)
            print(f"removed {len(removed)} namespace(s){': ' if removed else ''}{' '.join(removed)}")
            return 0
        reason = Lab.available()
        print(reason or "network labs can run here")
        return 1 if reason else 0
    except NetlabError as err:
        print(f"netlab: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
