"""Latency between a lab's hosts: this kernel has no netem, so
:class:`DelayProxy`, a TCP proxy on threads of the test process whose
sockets are made inside the hosts' namespaces, holds the bytes instead.
Stdlib only (see the package's docstring)."""

from __future__ import annotations

import queue
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .namespaces import NetlabError, _socket_in

if TYPE_CHECKING:
    from .lab import Host


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
