"""Choosing TCP ports for the dev services.

Ports are picked by the kernel (bind to port 0) so that several checkouts,
CI jobs and other developers' brokers can run side by side; a picked port is
remembered and reused on the next start so exported URLs stay valid.
"""

from __future__ import annotations

import socket
from collections.abc import Collection

from .endpoints import HOST


def is_port_free(port: int, host: str = HOST) -> bool:
    """True if a server could listen on ``host:port`` now. Binds as servers
    do, with SO_REUSEADDR, so that the TIME_WAIT sockets a stopped or killed
    server leaves behind (its clients were connected) do not count: the
    server takes its port back on its next start."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_free_port(exclude: Collection[int] = (), host: str = HOST) -> int:
    """A port the kernel considers free, not in ``exclude``.

    ``exclude`` holds ports already promised to the other services, which are
    not bound yet at this point.
    """
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port not in exclude:
            return port
    raise RuntimeError("could not find a free TCP port on " + host)


def choose_port(remembered: int | None, exclude: Collection[int] = (), host: str = HOST) -> int:
    """The remembered port if it is still free, otherwise a new free one."""
    if remembered and remembered not in exclude and is_port_free(remembered, host):
        return remembered
    return pick_free_port(exclude, host)


def accepts_connections(port: int, host: str = HOST, timeout: float = 1.0) -> bool:
    """True if a TCP connection to ``host:port`` succeeds (cheap pre-check)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
