"""A PySpark worker daemon that starts workers already warm.

Spark forks every Python worker from a daemon and each worker then imports
its module. Two costs dominate a job's first micro-batch on a small machine:
PySpark imported from ``pyspark.zip``, which Spark puts first on the
workers' path and which Python compiles from source every time (about 1.4 s
a process, against 0.25 s from site-packages), and the client libraries
(pyarrow, confluent-kafka, psycopg, SQLAlchemy) imported again by every
worker. This daemon, enabled with Spark's own ``spark.python.daemon.module``
setting, imports PySpark from site-packages when that is the same version as
the zip, imports the worker module and every registered connector once, and then
runs PySpark's daemon, whose forked workers inherit all of it.

Spark runs it as ``eoskit.runtime.spark.worker_daemon``, not as this module: in
local mode Spark starts it through ``eoskit-spark-python``
(``eoskit.runtime.spark.python``), which imports this one (for
:func:`prefer_installed_pyspark`) before it runs the module, and runpy
warns about a module imported before it runs. On a cluster's executors,
where Spark runs a plain interpreter, :func:`main` drops the zip itself.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import socket
import sys
import zipfile
from pathlib import Path

_VERSION = re.compile(r"""__version__[^=]*=\s*["']([^"']+)["']""")
#: The module Spark runs as its task workers' daemon (``spark.python.daemon.module``).
DAEMON_MODULE = "eoskit.runtime.spark.worker_daemon"
#: Besides what each registered plugin names (``eoskit.connectors.plugins``).
PRELOAD = ("pyarrow", "eoskit.connectors.spark.datasource")


def _zip_version(entry: str) -> str | None:
    try:
        with zipfile.ZipFile(entry) as archive:
            return _match(archive.read("pyspark/version.py").decode())
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def _match(text: str) -> str | None:
    found = _VERSION.search(text)
    return found.group(1) if found else None


def prefer_installed_pyspark() -> None:
    """Drop pyspark.zip from sys.path when an installed PySpark of the very
    same version is on the path too (a pip-installed PySpark always is)."""
    zips = [p for p in sys.path if p.endswith("pyspark.zip")]
    if not zips:
        return
    for entry in sys.path:
        if entry.endswith(".zip"):
            continue
        version_file = Path(entry or ".") / "pyspark" / "version.py"
        if version_file.is_file():
            installed = _match(version_file.read_text())
            if installed and all(_zip_version(z) == installed for z in zips):
                sys.path[:] = [p for p in sys.path if p not in zips]
            return


def preload(worker_module: str | None) -> None:
    names = ((worker_module,) if worker_module else ()) + PRELOAD
    try:
        # Here: every process Spark starts imports this module; the registry only when preloading.
        from eoskit.connectors.plugins import plugins

        names += tuple(module for plugin in plugins() for module in plugin.modules_to_preload())
    except Exception:  # noqa: BLE001 - a broken plug-in fails where it is used, with its name
        pass
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a failed preload only costs speed; the worker reports real errors
            pass


def freeze_imports() -> None:
    """Exempt everything imported so far from the garbage collector, in a
    process about to fork workers: PySpark's daemon runs ``gc.collect()`` in
    a worker after every task, and with the client libraries preloaded that
    full collection walked some 130,000 objects: 70 ms of CPU per task,
    taken from the JVM's commit of the batch (Python's ``gc.freeze``, meant
    for pre-forking servers; it also keeps the pages shared between forks)."""
    import gc

    gc.collect()
    gc.freeze()


class _DaemonSignals:
    """``pyspark.daemon``'s view of the ``signal`` module, with two changes:

    - the SIGTERM handler its manager installs is replaced by
      :func:`_exit_alone` (its workers restore SIGTERM's default, which is
      kept);
    - its workers keep SIGINT ignored, as the JVM that started the daemon
      does, instead of restoring Python's KeyboardInterrupt: Ctrl-C in a
      terminal signals the whole foreground process group, and it asks the
      driver (``eoskit run``) to stop at a batch boundary, which needs the
      batch in flight's tasks to finish, not to die of it.

    Every other call goes to ``signal`` itself."""

    def __getattr__(self, name: str) -> object:
        return getattr(signal, name)

    @staticmethod
    def signal(signum: int, handler: object) -> object:
        if signum == signal.SIGTERM and callable(handler):
            handler = _exit_alone
        elif signum == signal.SIGINT:
            handler = signal.SIG_IGN
        return signal.signal(signum, handler)


def _exit_alone(_signum: int, _frame: object) -> None:
    """The daemon's SIGTERM: remove its Unix socket if it made one (as
    PySpark's shutdown does) and exit, sending its workers nothing."""
    try:
        remove_listening_unix_sockets()
    finally:
        os._exit(1)  # PySpark's daemon exits 1 on SIGTERM too


def remove_listening_unix_sockets() -> list[str]:
    """Remove the file of every Unix socket this process listens on (the
    daemon's, in Spark's ``spark.python.unix.domain.socket.enabled`` mode),
    found through the process's own descriptors rather than the daemon's
    variables; returns the paths removed. Nothing where ``/proc`` is absent."""
    removed: list[str] = []
    try:
        descriptors = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return removed
    for fd in descriptors:
        try:
            copy = os.dup(fd)
        except OSError:
            continue  # closed meanwhile
        try:
            probe = socket.socket(fileno=copy)
        except OSError:
            os.close(copy)  # not a socket
            continue
        try:
            if probe.family != socket.AF_UNIX or not probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                continue
            path = probe.getsockname()
            if isinstance(path, str) and path and os.path.exists(path):
                os.remove(path)
                removed.append(path)
        except OSError:
            continue
        finally:
            probe.close()
    return removed


def run_manager() -> None:
    """PySpark's daemon (``pyspark.daemon.manager``, ``sys.argv`` as Spark
    gave it), with two changes: a SIGTERM ends the daemon alone, and the
    workers it forked go on with their tasks; its workers ignore SIGINT
    (``_DaemonSignals``).

    Spark SIGTERMs a daemon to stop it, and to restart it when asking it for
    a worker seems to time out. A task killed while it asks looks just like
    that (a query that stopped or failed has its tasks interrupted; the
    interrupted wait returns at once as "Timed out while waiting for the
    Python worker to connect back after 60000 ms"), and PySpark's daemon
    then SIGHUPs its process group: every worker it forked, so the running
    tasks of the session's other queries (a query restarted after a failure,
    beside its predecessor's cancelled tasks) fail with "Broken pipe" or
    EOFException. Those workers need no daemon: the JVM holds their sockets
    and kills any of them by pid through the new daemon; at Spark's shutdown
    it has closed the idle ones' sockets first, and a worker whose JVM is
    gone reads the end of its socket and exits. The daemon's other way to
    stop, its standard input closed (the JVM is gone), still takes every
    worker down with it."""
    from pyspark import daemon

    daemon.signal = _DaemonSignals()  # type: ignore[assignment]
    daemon.manager()


def main() -> None:
    prefer_installed_pyspark()
    worker_module = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1].startswith("pyspark") else "pyspark.worker"
    preload(worker_module)
    freeze_imports()
    run_manager()


if __name__ == "__main__":
    main()
