"""``eoskit-spark-python``: the Python that eoskit's local sessions give Spark.

Spark starts its Python helpers as ``$PYSPARK_PYTHON -m MODULE ARGS...``:
the data source planners (``pyspark.daemon pyspark.sql.worker.<x>``), the
task workers' daemon (``spark.python.daemon.module``), the streaming source
runner. In local mode (``local``, ``local[...]``) eoskit's ``get_session``
names this console script there, unless the user named a Python
(``PYSPARK_PYTHON`` or ``spark.pyspark.python``), so that only the
processes Spark starts for an eoskit session run eoskit code, and no other
interpreter of the environment does (before, a ``.pth`` file ran a check in
every one).

For ``-m MODULE ARGS...`` it does, in this order:

1. what ``python -m`` does to the path: the current working directory
   first, in place of this script's folder;
2. drops ``pyspark.zip`` from the path when the installed PySpark is the
   very same version (``spark_daemon.prefer_installed_pyspark``): Spark puts
   the zip first, and PySpark compiled from it costs each process about
   1.4 s, against 0.25 s from site-packages, which keeps the bytecode;
3. with ``EOSKIT_PREFORK=1`` (``get_session`` sets it), hands the process
   over to the JVM's warm zygote (``zygote.take_over``: only for the
   modules of ``zygote.TAKEN_OVER``; it never returns once it handed over);
4. otherwise runs the module as ``python -m`` would: ``__main__``,
   ``sys.argv`` the module's file and ``ARGS``; its exit code is the
   process's.

Anything else (``-c CODE``, a script, an interpreter option) replaces this
process with the plain interpreter and the same arguments: what it does is
exactly what ``python`` does.
"""

from __future__ import annotations

import os
import sys

#: The console script's name (pyproject's scripts, declared in setup.py).
NAME = "eoskit-spark-python"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] != "-m" or args[1].startswith("-"):
        _plain_python(args)
    module, module_args = args[1], args[2:]
    _path_as_dash_m()
    if any(p.endswith("pyspark.zip") for p in sys.path):
        try:
            from eoskit.runtime.spark.daemon import prefer_installed_pyspark  # with the zip only

            prefer_installed_pyspark()
        except Exception:  # noqa: BLE001 - only speed: the zip's PySpark works too
            pass
    if os.environ.get("EOSKIT_PREFORK") == "1":
        try:
            from eoskit.runtime.spark.zygote import take_over  # with EOSKIT_PREFORK only

            take_over(module, module_args)  # returns only if it did not hand over
        except Exception:  # noqa: BLE001 - any failure before the hand-over: run as usual
            pass
    _run_module(module, module_args)


def _plain_python(args: list[str]) -> None:
    """Become ``python ARGS...``; never returns."""
    command = [sys.executable, *args]
    if os.name == "posix":
        os.execv(sys.executable, command)
    import subprocess  # no exec that keeps the process elsewhere: wait for it

    raise SystemExit(subprocess.call(command))


def _path_as_dash_m() -> None:
    """``python -m`` puts the working directory first on the path; a
    console script has its own folder there (unless ``-P`` or ``-I``
    left it out, and then ``-m`` would leave the directory out too)."""
    script = sys.argv[0] if sys.argv else ""
    if script and sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(script)):
        sys.path[0] = os.getcwd()


def _run_module(module: str, args: list[str]) -> None:
    """``python -m module args...`` in this process: its ``SystemExit`` or
    exception ends the process as it would end ``python -m``."""
    import runpy

    sys.argv = [module, *args]  # runpy puts the module's file first while it runs
    runpy.run_module(module, run_name="__main__", alter_sys=True)
