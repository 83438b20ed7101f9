"""The network lab (runtime/devtools/services/netlab/) on this machine's kernel: hosts
reach each other, every fault is shown with a check that fails without it,
and nothing of a lab is left in the root namespace, after an error in the
test, a watchdog's timeout or its owner's SIGKILL. Root only: elsewhere the
tests are skipped with the reason.

Traffic goes only to addresses inside the namespaces the tests make, and to
the root's loopback (the lab's exposed ports)."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

from eoskit.runtime.devtools.services import netlab


_WHY_NOT = netlab.Lab.available()
pytestmark = pytest.mark.skipif(_WHY_NOT is not None, reason=f"no network lab here: {_WHY_NOT}")

PY = [sys.executable, "-I", "-S", "-c"]


@pytest.fixture
def lab():
    with netlab.Lab(timeout=50.0) as made:
        yield made


def listen(host, kind=socket.SOCK_STREAM) -> socket.socket:
    """A server socket inside ``host`` on a free port."""
    sock = host.socket(kind)
    sock.bind((host.ip, 0))
    if kind == socket.SOCK_STREAM:
        sock.listen()
    sock.settimeout(5)
    return sock


def connect(host, server: socket.socket, timeout: float = 2.0) -> socket.socket:
    """A connection from ``host`` to ``server``'s address (or an error)."""
    sock = host.socket()
    sock.settimeout(timeout)
    try:
        sock.connect(server.getsockname())
    except BaseException:
        sock.close()
        raise
    return sock


def datagrams_received(sock: socket.socket, wait: float = 0.3) -> int:
    """How many datagrams arrive at ``sock`` until it is quiet for ``wait`` s."""
    sock.settimeout(wait)
    count = 0
    try:
        while True:
            sock.recv(2048)
            count += 1
    except TimeoutError:
        return count


def alive(pid: int) -> bool:
    """``pid`` is running (an orphaned zombie that init has not reaped is not)."""
    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


def root_view() -> dict[str, str]:
    """What the root namespace shows: its namespaces, links and firewall."""
    def out(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    return {"netns": out("ip", "netns", "list"), "links": out("ip", "-o", "link"),
            "addresses": out("ip", "-o", "addr"), "routes": out("ip", "route"),
            "iptables": "".join(line for line in out("iptables-save").splitlines(True) if not line.startswith("#")),
            "nft": out("nft", "list", "ruleset")}


def test_hosts_reach_each_other_by_tcp_and_the_root_reaches_a_host_through_expose(lab):
    before = root_view()
    a, b = lab.host("a"), lab.host("b")
    assert a.ip != b.ip and a.netns.startswith(lab.prefix) and lab.prefix.startswith("eosk")
    server = b.popen([*PY, "import socket; s = socket.socket(); s.bind((%r, 0)); s.listen(); "
                      "print(s.getsockname()[1], flush=True); c, _ = s.accept(); "
                      "c.sendall(b'pong:' + c.recv(10) + b' from ' + c.getpeername()[0].encode())" % b.ip],
                     stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    client = a.run([*PY, "import socket; c = socket.create_connection((%r, %d), timeout=5); "
                    "c.sendall(b'ping'); print(c.recv(100).decode())" % (b.ip, port)],
                   capture_output=True, text=True, timeout=20)
    assert client.stdout.strip() == f"pong:ping from {a.ip}", client.stderr
    assert server.wait(10) == 0

    service = listen(b)
    exposed = lab.expose(b, service.getsockname()[1])
    assert exposed.address[0] == "127.0.0.1"
    with socket.create_connection(exposed.address, timeout=5) as conn:
        accepted, peer = service.accept()
        conn.sendall(b"from the root")
        assert accepted.recv(100) == b"from the root" and peer[0] == b.ip
    after = root_view()
    assert lab.prefix in after.pop("netns")  # the hosts are namespaces...
    before.pop("netns")
    assert after == before  # ...and the lab put nothing else in the root namespace


def test_the_tester_reaches_hosts_at_their_addresses_whatever_the_faults_between_them():
    before = root_view()
    with netlab.Lab(timeout=60.0) as lab:
        a, b = lab.host("a"), lab.host("b")
        address = lab.tester()
        assert lab.tester() == address  # once per lab
        service = listen(b)
        lab.partition(a, b)
        lab.isolate(a)
        with socket.create_connection(service.getsockname(), timeout=5) as conn:
            accepted, peer = service.accept()
            conn.sendall(b"from the tester")
            assert accepted.recv(100) == b"from the tester" and peer[0] == address
        with pytest.raises(OSError):
            connect(a, service, timeout=1.0)  # the hosts stay cut from each other
    assert root_view() == before  # the tester's link went with the lab


def test_a_partition_both_ways_times_connections_out_until_healed(lab):
    a, b = lab.host("a"), lab.host("b")
    on_a, on_b = listen(a), listen(b)
    fault = lab.partition(a, b)
    for here, there in ((a, on_b), (b, on_a)):
        with pytest.raises(TimeoutError):
            connect(here, there, timeout=0.5)
    assert fault.packets() >= 2  # the SYNs, each dropped by the receiver's rule
    fault.heal()
    fault.heal()  # idempotent
    connect(a, on_b).close()
    connect(b, on_a).close()


def test_a_one_way_partition_drops_a_to_b_while_b_still_reaches_a(lab):
    a, b = lab.host("a"), lab.host("b")
    on_a, on_b = listen(a, socket.SOCK_DGRAM), listen(b, socket.SOCK_DGRAM)
    sender_a, sender_b = a.socket(socket.SOCK_DGRAM), b.socket(socket.SOCK_DGRAM)
    with lab.partition(a, b, one_way=True) as fault:
        for _ in range(5):
            sender_a.sendto(b"a->b", on_b.getsockname())
            sender_b.sendto(b"b->a", on_a.getsockname())
        assert datagrams_received(on_b) == 0 and fault.packets() == 5
        assert datagrams_received(on_a) == 5
    sender_a.sendto(b"a->b", on_b.getsockname())
    assert datagrams_received(on_b) == 1


def test_lost_replies_let_the_request_arrive_but_never_answer_it(lab):
    server_host, client_host = lab.host("db"), lab.host("app")
    lost, kept = listen(server_host), listen(server_host)
    to_lost, to_kept = connect(client_host, lost), connect(client_host, kept)
    on_lost, _ = lost.accept()
    on_kept, _ = kept.accept()
    lab.lose_replies(server_host, client_host, port=lost.getsockname()[1])
    to_lost.sendall(b"COMMIT")
    assert on_lost.recv(100) == b"COMMIT"  # the server has it...
    on_lost.sendall(b"OK")
    to_lost.settimeout(1.0)
    with pytest.raises(TimeoutError):
        to_lost.recv(100)  # ...the client never hears back
    to_kept.sendall(b"ping")  # the server's other port still answers
    assert on_kept.recv(100) == b"ping"
    on_kept.sendall(b"pong")
    assert to_kept.recv(100) == b"pong"
    lab.lose_replies(server_host, client_host)  # now every port
    to_kept.sendall(b"again")
    assert on_kept.recv(100) == b"again"
    on_kept.sendall(b"pong")
    to_kept.settimeout(1.0)
    with pytest.raises(TimeoutError):
        to_kept.recv(100)


def test_a_reset_breaks_an_open_connection_and_refuses_new_ones_at_once(lab):
    a, b = lab.host("a"), lab.host("b")
    server = listen(b)
    conn = connect(a, server, timeout=5.0)
    accepted, _ = server.accept()  # kept open: only the reset may end the connection
    fault = lab.reset(a, b)
    started = time.monotonic()
    conn.sendall(b"hello")
    with pytest.raises(ConnectionResetError):
        conn.recv(100)
    with pytest.raises(ConnectionRefusedError):
        connect(a, server, timeout=5.0)
    assert time.monotonic() - started < 2.0
    assert fault.packets() >= 2
    accepted.close()


def test_packet_loss_drops_about_its_share_counted_by_the_rule(lab):
    a, b = lab.host("a"), lab.host("b")
    receiver, sender = listen(b, socket.SOCK_DGRAM), a.socket(socket.SOCK_DGRAM)
    fault = lab.packet_loss(a, b, 0.5)
    received: list[int] = []
    drain = threading.Thread(target=lambda: received.append(datagrams_received(receiver, wait=1.0)))
    drain.start()
    sent = 400
    for _ in range(sent):
        sender.sendto(b"x" * 32, receiver.getsockname())
        time.sleep(0.0005)
    drain.join(10)
    dropped = fault.packets()
    assert received[0] + dropped == sent  # every datagram either arrived or was dropped by the fault
    assert 0.3 * sent < dropped < 0.7 * sent


def test_a_slow_link_takes_at_least_size_over_rate(lab):
    a, b = lab.host("a"), lab.host("b")
    server = listen(b)
    size, rate_bits = 250_000, 2_000_000
    fault = lab.slow_link(a, rate="2mbit", burst="32kbit", latency="400ms")
    assert "tbf" in a.run(["tc", "qdisc", "show", "dev", "eth0"], capture_output=True, text=True).stdout
    conn = connect(a, server, timeout=10.0)
    accepted, _ = server.accept()
    started = time.monotonic()
    conn.sendall(b"x" * size)
    got = 0
    accepted.settimeout(10)
    while got < size:
        got += len(accepted.recv(65536))
    elapsed = time.monotonic() - started
    assert elapsed >= 0.8 * (size - 4096) * 8 / rate_bits, elapsed  # 4096: the bucket's burst
    fault.heal()
    assert "tbf" not in a.run(["tc", "qdisc", "show", "dev", "eth0"], capture_output=True, text=True).stdout


def test_a_delay_proxy_holds_each_direction_for_its_delay_keeping_order(lab):
    a, b = lab.host("a"), lab.host("b")
    server = listen(b)

    def echo() -> None:
        conn, _ = server.accept()
        while data := conn.recv(65536):
            conn.sendall(data)
        conn.close()

    threading.Thread(target=echo, daemon=True).start()
    proxy = netlab.DelayProxy(a, 0, b.ip, server.getsockname()[1], 0.25).start()
    client = a.socket()
    client.settimeout(5)
    client.connect(proxy.address)
    started = time.monotonic()
    for chunk in (b"one ", b"two ", b"three"):
        client.sendall(chunk)
    echoed = b""
    while len(echoed) < len(b"one two three"):
        echoed += client.recv(100)
    assert time.monotonic() - started >= 0.5  # 0.25 s there, 0.25 s back
    assert echoed == b"one two three"
    client.shutdown(socket.SHUT_WR)
    assert client.recv(100) == b""  # the end of the stream passes too

    threading.Thread(target=echo, daemon=True).start()
    client = a.socket()
    client.settimeout(5)
    client.connect(proxy.address)
    lab.reset(a, b)
    client.sendall(b"into a reset")
    with pytest.raises(ConnectionResetError):  # and so does a reset
        client.recv(100)


def test_a_client_killed_while_isolated_leaves_its_server_a_half_open_peer(lab):
    client_host, server_host = lab.host("client"), lab.host("server")
    server = listen(server_host)
    client = client_host.popen([*PY, "import socket, time; c = socket.create_connection((%r, %d)); "
                                "print('connected', flush=True); time.sleep(60)" % server.getsockname()],
                               stdout=subprocess.PIPE, text=True)
    assert client.stdout.readline().strip() == "connected"
    peer, _ = server.accept()
    isolation = lab.isolate(client_host)
    client.send_signal(signal.SIGKILL)
    client.wait(5)
    isolation.heal()  # waits for the client's kernel to give up on the dead socket's FIN
    time.sleep(0.3)
    peer.setblocking(False)
    with pytest.raises(BlockingIOError):
        peer.recv(100, socket.MSG_PEEK)  # no EOF, no reset: the server still sees its peer
    established = server_host.run(["ss", "-H", "-tn", "state", "established"], capture_output=True, text=True)
    assert f"{client_host.ip}:" in established.stdout
    peer.send(b"anyone?")  # only talking finds it out: the client's kernel answers with a reset
    time.sleep(0.3)
    with pytest.raises(ConnectionResetError):
        peer.recv(100)


@pytest.mark.parametrize("body_fails", [False, True])
def test_nothing_of_a_lab_is_left_after_it_exits(body_fails):
    before = root_view()
    with pytest.raises(RuntimeError) if body_fails else contextlib.nullcontext():
        with netlab.Lab(timeout=50.0) as lab:
            a, b = lab.host("a"), lab.host("b")
            sleeper = a.popen(["sleep", "60"])
            lab.partition(a, b)
            lab.slow_link(b)
            lab.isolate(a)
            proxy = lab.expose(b, 5432)
            assert lab.prefix in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            if body_fails:
                raise RuntimeError("the test's own failure")
    assert sleeper.poll() is not None
    assert not (netlab.STATE_DIR / f"{lab.prefix.rstrip('-')}.json").exists()
    assert root_view() == before
    with pytest.raises(OSError):
        socket.create_connection(proxy.address, timeout=1).close()
    with pytest.raises(netlab.NetlabError, match="closed"):
        lab.host("c")


def test_the_watchdog_tears_a_lab_down_after_its_timeout():
    before = root_view()
    lab = netlab.Lab(timeout=1.0).start()
    lab.host("a")
    deadline = time.monotonic() + 10
    while lab.prefix in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, "the watchdog did not tear the lab down"
        time.sleep(0.2)
    with pytest.raises(netlab.NetlabError, match="watchdog"):
        lab.host("b")
    lab.close()  # nothing left to do
    assert root_view() == before


FORGOTTEN = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("netlab", sys.argv[1])
netlab = importlib.util.module_from_spec(spec); sys.modules["netlab"] = netlab; spec.loader.exec_module(netlab)
lab = netlab.Lab(timeout=120.0).start()
lab.isolate(lab.host("a"))
print(lab.prefix, lab.host("b").popen(["sleep", "120"]).pid, flush=True)
"""


def test_a_lab_never_exited_is_torn_down_when_its_process_exits():
    before = root_view()
    done = subprocess.run([*PY, FORGOTTEN, netlab.__file__], capture_output=True, text=True, timeout=60)
    prefix, sleeper = done.stdout.split()
    assert done.returncode == 0, done.stderr
    assert not alive(int(sleeper))
    assert not (netlab.STATE_DIR / f"{prefix.rstrip('-')}.json").exists()
    assert root_view() == before


ORPHAN = """
import importlib.util, json, subprocess, sys, time
spec = importlib.util.spec_from_file_location("netlab", sys.argv[1])
netlab = importlib.util.module_from_spec(spec); sys.modules["netlab"] = netlab; spec.loader.exec_module(netlab)
lab = netlab.Lab(timeout=120.0).start()
a, b = lab.host("a"), lab.host("b")
lab.partition(a, b)
sleeper = a.popen(["sleep", "120"])
print(json.dumps({"prefix": lab.prefix, "sleeper": sleeper.pid}), flush=True)
time.sleep(120)
"""


def test_sweep_removes_a_lab_whose_owner_was_killed_and_leaves_live_ones_alone():
    before = root_view()
    owner = subprocess.Popen([*PY, ORPHAN, netlab.__file__], stdout=subprocess.PIPE, text=True)
    try:
        left = json.loads(owner.stdout.readline())
    finally:
        owner.kill()
        owner.wait(10)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{left['prefix']}a" in listed and f"{left['prefix']}switch" in listed
    with netlab.Lab(timeout=50.0) as live:  # starting a lab sweeps too
        live.host("a")
        assert netlab.sweep() == []  # a live lab is not swept
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert left["prefix"] not in listed and f"{live.prefix}a" in listed
    assert not alive(left["sleeper"])  # its processes were killed
    assert not (netlab.STATE_DIR / f"{left['prefix'].rstrip('-')}.json").exists()
    assert root_view() == before


def test_mistakes_are_named():
    with netlab.Lab(timeout=50.0) as lab, netlab.Lab(timeout=50.0) as other:
        a = lab.host("a")
        with pytest.raises(netlab.NetlabError, match="already has a host 'a'"):
            lab.host("a")
        with pytest.raises(netlab.NetlabError, match="must be 1-20"):
            lab.host("Bad_Name")
        with pytest.raises(netlab.NetlabError, match="and itself"):
            lab.partition(a, a)
        with pytest.raises(netlab.NetlabError, match=f"belongs to lab {other.prefix}"):
            lab.partition(a, other.host("b"))
        with pytest.raises(netlab.NetlabError, match=r"in \(0, 1\]"):
            lab.packet_loss(a, lab.host("b"), 1.5)
        lab.slow_link(a)
        with pytest.raises(netlab.NetlabError, match="already has a slow link"):
            lab.slow_link(a)
    assert a.argv(["true", 1])[-4:] == ["exec", a.netns, "true", "1"]


def test_a_kept_lab_outlives_its_process_is_found_again_and_swept_once_its_file_is_gone(tmp_path):
    """The dev services' lab (``eoskit dev up --network``): no watchdog or
    exit hook; another process attaches to it by its prefix and finds its
    hosts and tester; a sweep leaves it alone while its file exists."""
    before = root_view()
    keep = tmp_path / "network.json"
    keep.write_text("{}")
    made = netlab.Lab(subnet="10.216.0.0/24", keep_while=keep).start()
    try:
        a, b = made.host("a"), made.host("b")
        tester = made.tester()
        found = netlab.Lab.attach(made.prefix)
        assert {n: (h.ip, h.netns) for n, h in found.hosts.items()} == {"a": (a.ip, a.netns), "b": (b.ip, b.netns)}
        assert found.tester() == tester and str(found.subnet) == "10.216.0.0/24"
        server = listen(found.hosts["b"])
        with found.partition(found.hosts["a"], found.hosts["b"]):
            with pytest.raises(OSError):
                connect(found.hosts["a"], server, timeout=1.0)
        connect(found.hosts["a"], server).close()
        assert netlab.sweep() == []  # kept: its file exists
        assert made.prefix in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        keep.unlink()
        assert sorted(netlab.sweep()) == sorted(made._namespaces)  # its file gone: a leftover
    finally:
        made.close()
    assert root_view() == before
    with pytest.raises(netlab.NetlabError, match="no kept lab"):
        netlab.Lab.attach(made.prefix)
