"""Warm Python processes for Spark: the JVM's Python helpers forked, not started.

Spark starts a fresh Python interpreter for each kind of helper a query
needs: a daemon per planner module (the data source lookup, the source's
creation and read planning, the sink's write planning, the streaming sink's
commit), a daemon for the task workers, and the streaming source's runner.
Each imports PySpark, pyarrow and the connector's client libraries before it
does any work, and they start one after another as a query reaches them: on
two cores, about 0.5 to 1 s each, most of a job's first micro-batch and of
a restart (``benchmarks/README.md``, "What changed today").

In local mode eoskit's ``get_session`` gives Spark ``eoskit-spark-python``
as its Python (``PYSPARK_PYTHON``; ``eoskit.runtime.spark.python``) and
sets ``EOSKIT_PREFORK=1`` before the JVM starts, so that every helper
inherits both. Such a process hands itself over to a *zygote*: one process
per JVM that imported all of it once and forks a ready copy on request.
Nothing of this runs in an interpreter Spark did not start through the
wrapper. The hand-over, top to bottom:

1. The process Spark started (``eoskit-spark-python -m pyspark.daemon
   <worker module>``, ``... -m eoskit.runtime.spark.worker_daemon ...`` or the
   source runner; the *launcher*) calls :func:`take_over` before it runs
   its module. It connects to the zygote of its JVM (an abstract Unix
   socket named by the user, the JVM's pid and a key of what the imports
   depend on: the interpreter, the working directory, the module path,
   ``EOSKIT_*`` settings), starting it first if there is none (a plain
   ``python -m eoskit.runtime.spark.zygote``); a zygote forks only for a
   launcher of its own key. Nothing has been written to the launcher's
   standard streams, so any failure up to here falls back to running the
   module itself: never worse than without. (A zygote started by the driver
   beside its JVM, to import while the JVM boots, was tried and measured no
   faster: on two cores it slowed the JVM's start by as much.)
2. It sends its argv, environment and working directory, and its stdin,
   stdout and stderr themselves (``SCM_RIGHTS``): the pipes the JVM reads
   the daemon's port from and writes its kill requests to.
3. The zygote forks a *child* that takes those descriptors, that
   environment and directory, and runs the module as ``__main__``: to the
   JVM it is the daemon (its port arrives on the pipe, its stdin's end is
   its shutdown). The child sends its pid to the launcher. PySpark's daemon
   runs as eoskit's worker daemon runs it, leaving its workers' tasks
   running when Spark restarts it (``spark_daemon.run_manager``).
4. The launcher stays as what the JVM holds: it forwards SIGTERM and
   SIGHUP (``Process.destroy``) to the child, and ignores SIGINT as the
   child does (see ``_run_module``) and exits with the child's
   exit code, which the zygote reports when it reaps it. Should the launcher
   be SIGKILLed, the JVM closes the pipes and the child sees its stdin end,
   as a daemon would.
5. The zygote lives in the JVM's process group (a kill of the driver's
   group takes it) and exits when the JVM does.

Linux only (abstract sockets, ``pidfd_open``); elsewhere, or unset, nothing
changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys

ENV = "EOSKIT_PREFORK"
#: The modules a launcher hands over; any other process runs as it is.
TAKEN_OVER = ("pyspark.daemon", "eoskit.runtime.spark.worker_daemon",
              "pyspark.sql.streaming.python_streaming_source_runner")
#: Imported by the zygote once, for every child: PySpark's worker and
#: planner modules, and (through ``spark_daemon.preload``) eoskit's
#: connectors and their client libraries.
PRELOAD = (
    "pyspark.daemon",
    "pyspark.worker",
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.write_into_data_source",
    "pyspark.sql.worker.python_streaming_sink_runner",
    "pyspark.sql.worker.commit_data_source_write",
    "pyspark.sql.streaming.python_streaming_source_runner",
)
#: The longest a launcher waits for a zygote to answer (it imports first).
READY_TIMEOUT_S = 120.0
#: The longest a launcher waits for a starting zygote to bind its socket.
BIND_WITHIN_S = 5.0
_MAX_REQUEST = 1 << 20


def _key() -> str:
    """What a zygote's imports depend on; a child is forked only for a
    launcher with the same: the interpreter, the working directory, the
    module path (less Spark's zip and jar entries, which the wrapper and
    the zygote drop) and eoskit's own settings."""
    # The working directory ``python -m`` puts first (the wrapper too) is in
    # the key on its own.
    here = os.getcwd()
    path = [p for p in sys.path if p not in ("", here) and not p.endswith((".zip", ".jar"))]
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("EOSKIT_"))
    key = json.dumps([sys.executable, here, path, settings])
    return hashlib.sha256(key.encode(errors="surrogateescape")).hexdigest()[:16]


def _address(jvm_pid: int) -> str:
    """The zygote's abstract socket for this JVM and what its imports depend on."""
    return f"eoskit-zygote-{os.getuid()}-{jvm_pid}-{_key()}"


def _abstract(address: str) -> str:
    """The name in Linux's abstract socket namespace: no file to clean up."""
    return "\0" + address


# -- the launcher: the process Spark started -----------------------------------

def take_over(module: str, args: list[str]) -> None:
    """Called by ``eoskit-spark-python`` (``eoskit.runtime.spark.python``),
    the Python eoskit's local sessions give Spark, for ``-m module args...``:
    when this process is a Spark helper to hand over, hand it over and never
    return; otherwise (or on any failure before the hand-over) return and
    let the caller run the module as it is."""
    if os.environ.get(ENV) != "1" or not sys.platform.startswith("linux") or module not in TAKEN_OVER:
        return
    conn = None
    try:
        conn = _connect(os.getppid())
        child = _hand_over(conn, module, list(args))
    except Exception:  # noqa: BLE001 - any failure before the hand-over: run as usual
        child = None
    if child is None:
        if conn is not None:
            conn.close()  # a child forked late finds nobody waiting and ends
        return
    os._exit(_stand_in(conn, child))


def _spawn(address: str, watched_pid: int) -> int:
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        # The zygote must not hold the launcher's pipes: stdio to /dev/null.
        return os.posix_spawn(sys.executable, [sys.executable, "-m", "eoskit.runtime.spark.zygote",
                                               address, str(watched_pid)], os.environ,
                              file_actions=[(os.POSIX_SPAWN_DUP2, devnull, fd) for fd in (0, 1, 2)])
    finally:
        os.close(devnull)


def _connect_to(address: str, within_s: float = BIND_WITHIN_S) -> socket.socket | None:
    """A connection to the zygote at ``address``, which may still be
    starting (it binds first thing); None if it does not answer."""
    import time

    deadline = time.monotonic() + within_s
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(_abstract(address))
            return conn
        except OSError:
            conn.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)


def _connect(jvm_pid: int) -> socket.socket:
    """A connection to the JVM's zygote, started first if there is none."""
    address = _address(jvm_pid)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(_abstract(address))
        return conn
    except (ConnectionRefusedError, FileNotFoundError):
        pass
    conn.close()
    _spawn(address, jvm_pid)
    # It binds before it imports: the connection is accepted once it is ready.
    started = _connect_to(address)
    if started is None:
        raise TimeoutError("the zygote did not bind its socket")
    return started


def _hand_over(conn: socket.socket, module: str, args: list[str]) -> int | None:
    """Steps 2 and 3: send the request and the standard streams; the
    child's pid, or None if no child took them."""
    request = json.dumps({"module": module, "args": args, "cwd": os.getcwd(), "key": _key(),
                          "env": dict(os.environ)}).encode(errors="surrogateescape")
    socket.send_fds(conn, [len(request).to_bytes(4, "big") + request], [0, 1, 2])
    conn.settimeout(READY_TIMEOUT_S)
    line = _read_line(conn)
    if not line.startswith(b"pid "):
        return None
    return int(line[4:])


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            return data
        data += chunk
    return data.strip()


def _stand_in(conn: socket.socket, child: int) -> int:
    """Step 4: be the process the JVM holds until the child ends."""
    import signal

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The child holds the streams now; the launcher lets go of its copies.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    conn.settimeout(None)
    while True:
        try:
            line = _read_line(conn)
            break
        except InterruptedError:
            continue
    if line.startswith(b"exit "):
        return int(line[5:])
    # The zygote is gone (killed): wait for the child itself.
    try:
        fd = os.pidfd_open(child)
    except OSError:
        return 1
    import select

    select.select([fd], [], [])
    return 1


# -- the zygote ----------------------------------------------------------------

def serve(address: str, jvm_pid: int) -> None:
    """Bind, import everything once, then fork a child per request until the JVM exits."""
    import select
    import signal

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(_abstract(address))
    except OSError:
        return  # another launcher started this JVM's zygote first
    listener.listen(64)
    key = _key()
    _preload()
    from eoskit.runtime.spark.daemon import freeze_imports  # in the zygote only: the launchers import this module

    freeze_imports()
    try:
        jvm = os.pidfd_open(jvm_pid)
    except OSError:
        return
    waiting: dict[int, socket.socket] = {}  # child pid -> its launcher's connection
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while True:
        ready, _, _ = select.select([listener, jvm], [], [], 0.2)
        _reap(waiting)
        if jvm in ready:
            return
        if listener in ready:
            conn, _ = listener.accept()
            try:
                child = _fork_child(listener, conn, key)
            except Exception:  # noqa: BLE001 - a bad request: its launcher runs as usual
                conn.close()
                continue
            waiting[child] = conn


def _preload() -> None:
    import importlib

    from eoskit.runtime.spark.daemon import preload  # in the zygote only: the launchers import this module

    preload(None)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module this PySpark lacks: its child imports what it has
            pass


def _reap(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            conn.close()


def _fork_child(listener: socket.socket, conn: socket.socket, key: str) -> int:
    """Step 3: a child with the launcher's streams, environment and directory."""
    conn.settimeout(10)
    header, fds, _, _ = socket.recv_fds(conn, 4, 3)
    try:
        size = int.from_bytes(header, "big")
        if size > _MAX_REQUEST or len(fds) != 3:
            raise ValueError("not a launcher's request")
        body = b""
        while len(body) < size:
            chunk = conn.recv(size - len(body))
            if not chunk:
                raise ConnectionError("the launcher went away")
            body += chunk
        request = json.loads(body.decode(errors="surrogateescape"))
        if request.get("key") != key:
            raise ValueError("the launcher's imports would differ from this zygote's")
        conn.settimeout(None)
        pid = os.fork()
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    if pid:
        for fd in fds:
            os.close(fd)
        return pid
    code = 1
    try:
        listener.close()
        # First tell the launcher: one that gave up waiting (and runs the
        # module itself) refuses this, and the child ends before it has
        # touched the streams.
        conn.sendall(f"pid {os.getpid()}\n".encode())
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _name_process(request["args"][0] if request["args"] else request["module"])
        code = _run_module(request["module"], request["args"])
    except BaseException:  # noqa: BLE001 - the child must never return into the zygote's loop
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _name_process(name: str) -> None:
    """The child's name in ``ps -o comm`` and ``/proc/<pid>/comm`` (its
    command line is the zygote's): the module Spark asked for, e.g.
    ``pyspark.worker`` for the task workers' daemon, so that tools that look
    for Spark's Python workers find them."""
    try:
        import ctypes

        short = name if len(name) <= 15 else name.rsplit(".", 1)[-1]
        ctypes.CDLL(None).prctl(15, short[:15].encode())  # PR_SET_NAME
    except Exception:  # noqa: BLE001 - only a name
        pass


def _run_module(module: str, args: list[str]) -> int:
    """``python -m module args...``, in this process."""
    import runpy
    import signal

    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    # As a helper started by PySpark's JVM (launched with SIGINT ignored)
    # starts: Ctrl-C in the terminal is the driver's to act on (a stop at a
    # batch boundary), and must not kill the batch's planners or its commit.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.argv = [module, *args]
    try:
        if module == "pyspark.daemon":
            # PySpark's daemon, as eoskit's own worker daemon runs it: a
            # restart by Spark leaves the workers' tasks running.
            from eoskit.runtime.spark.daemon import run_manager  # in the child only: launchers import this module

            run_manager()
        else:
            # Run afresh as __main__, not from the zygote's imported copy
            # (runpy warns about a module imported before it runs).
            sys.modules.pop(module, None)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    # Started as plain ``python -m`` with Spark's PYTHONPATH: the installed
    # PySpark, not the zip's, for the zygote and every child it forks.
    from eoskit.runtime.spark.daemon import prefer_installed_pyspark

    prefer_installed_pyspark()
    serve(sys.argv[1], int(sys.argv[2]))
