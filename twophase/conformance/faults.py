"""Service faults for tests: cut a broker's connections the way a restart
does, without losing its data.

The local broker (Tansu) keeps topics in memory, so restarting it empties
it. What a client sees of a broker restart that keeps its data is every
connection cut at once and new ones refused for a while, then accepted
again on the same address. ``TcpForwarder`` does exactly that in front of
a broker, and ``ForwardedBroker`` is a Tansu broker of its own whose
*advertised* address is such a forwarder, so that every client connection
(bootstrap and the ones metadata points to) goes through it:

    with ForwardedBroker(tmp_path) as broker:
        ...produce to broker.bootstrap, start a job on it...
        broker.cut()        # all connections closed, the port refuses
        time.sleep(5)
        broker.restore()    # the same port accepts again; the data is there

Loopback only, and bounded: at most ``max_connections`` at once, a
connect timeout upstream, fixed-size reads with back-pressure (a write
waits for the other side to drain before the next read).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from types import TracebackType

from eoskit.runtime.dev.endpoints import HOST
from eoskit.runtime.dev.kafka import broker_binary, list_topics
from eoskit.runtime.dev.ports import pick_free_port
from eoskit.runtime.dev.processes import ProcessRef, start_process, stop_process, tail

#: Bytes read per chunk, per direction of each connection.
CHUNK = 64 << 10
#: How long a new connection waits for the upstream connect.
UPSTREAM_CONNECT_TIMEOUT_S = 10.0
#: How long start() and stop() wait for the forwarder's thread.
CONTROL_TIMEOUT_S = 10.0


class TcpForwarder:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target_port`` from a thread
    of its own. ``stop()`` closes the listening socket and aborts every
    connection (the peers see a reset, as when a server process dies);
    ``start()`` listens again on the same port."""

    def __init__(self, target_port: int, port: int = 0, max_connections: int = 256) -> None:
        self.target_port = target_port
        self.port = port
        self.max_connections = max_connections
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="eoskit-tcp-forwarder",
                                        daemon=True)
        self._thread.start()
        self._server: asyncio.base_events.Server | None = None
        self._transports: set[asyncio.BaseTransport] = set()
        #: Connections forwarded so far (a test can see clients come back).
        self.accepted = 0

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Listen (again): on ``port``, or on a free port chosen now if 0."""
        self._call(self._start())

    def stop(self) -> int:
        """Refuse new connections and abort every open one; how many were open."""
        return self._call(self._stop())

    def close(self) -> None:
        """Stop, and end the forwarder's thread."""
        if self._loop.is_closed():
            return
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CONTROL_TIMEOUT_S)
        self._loop.close()

    def __enter__(self) -> "TcpForwarder":
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def _call(self, coroutine):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(CONTROL_TIMEOUT_S)

    async def _start(self) -> None:
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._accept, HOST, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> int:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        open_connections = len(self._transports) // 2
        for transport in list(self._transports):
            transport.abort()
        self._transports.clear()
        return open_connections

    async def _accept(self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        if self._server is None or len(self._transports) >= 2 * self.max_connections:
            client.transport.abort()
            return
        try:
            upstream_reader, upstream = await asyncio.wait_for(
                asyncio.open_connection(HOST, self.target_port), UPSTREAM_CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            client.transport.abort()
            return
        if self._server is None:  # stopped while connecting
            client.transport.abort()
            upstream.transport.abort()
            return
        pair = (client.transport, upstream.transport)
        self._transports.update(pair)
        self.accepted += 1
        try:
            await asyncio.gather(_pipe(client_reader, upstream), _pipe(upstream_reader, client))
        finally:
            for transport in pair:
                self._transports.discard(transport)
                transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction until it ends or breaks, then end the other side's writes."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.transport.abort()


class ForwardedBroker:
    """A Tansu broker of its own (memory storage, loopback) behind a
    ``TcpForwarder``: it listens on one port and advertises the
    forwarder's, so ``cut()`` / ``restore()`` look to every client like the
    broker going away and coming back with its data. Never the shared
    broker of the test session: cutting that would break other tests."""

    def __init__(self, workdir: str | os.PathLike[str], ready_timeout: float = 30.0) -> None:
        self.workdir = Path(workdir)
        self.ready_timeout = ready_timeout
        self.broker_port = pick_free_port()
        self.forwarder = TcpForwarder(self.broker_port, pick_free_port(exclude={self.broker_port}))
        self._process: ProcessRef | None = None

    @property
    def bootstrap(self) -> str:
        return self.forwarder.address

    @property
    def log_path(self) -> Path:
        return self.workdir / "tansu.log"

    def start(self) -> "ForwardedBroker":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.forwarder.start()
        argv = [broker_binary(), "broker",
                "--listener-url", f"tcp://{HOST}:{self.broker_port}",
                "--advertised-listener-url", f"tcp://{self.bootstrap}",
                "--storage-engine", "memory://tansu/"]
        self._process = start_process(argv, self.log_path, env={**os.environ, "NO_COLOR": "1"},
                                      cwd=self.workdir)
        deadline = time.monotonic() + self.ready_timeout
        while True:
            try:
                list_topics(self.bootstrap, timeout=2.0)
                return self
            except Exception as exc:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"the forwarded broker did not answer on {self.bootstrap} "
                                       f"within {self.ready_timeout:.0f} s ({exc}); log:\n"
                                       f"{tail(self.log_path)}") from None
                time.sleep(0.2)

    def cut(self) -> int:
        """Every client connection closed; new ones refused until ``restore``.
        How many connections were open."""
        return self.forwarder.stop()

    def restore(self) -> None:
        self.forwarder.start()

    def stop(self) -> None:
        if self._process is not None:
            stop_process(self._process)
            self._process = None
        self.forwarder.close()

    def __enter__(self) -> "ForwardedBroker":
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()
