"""eoskit's warm start for a Spark user's own script (issue 33, item 6).

``eoskit-warm-start.pth``, which the install puts in site-packages, imports
this module in every interpreter of the environment and calls
:func:`install`. That is all it does at start: it puts one finder first on
``sys.meta_path``, and imports nothing (``os`` and ``sys`` are loaded
before any ``.pth`` runs). It is a top-level module, outside the ``eoskit``
namespace, because importing that namespace scans the whole path (about
11 ms per interpreter measured here; this module: about 0.2 ms).

What happens then, top to bottom:

1. The finder answers for ``pyspark.java_gateway`` alone, once: it takes
   itself off the path, lets the usual finders find the module, and wraps
   the loader's ``exec_module`` for this one module. Every other import
   costs it one string comparison. Why this module: PySpark launches its
   JVM through ``pyspark.java_gateway.launch_gateway(conf)``, which
   ``pyspark.core.context`` imports by name, so the function must be
   wrapped before that import reads it.
2. Once the module has run, its ``launch_gateway`` is replaced by a wrapper
   (``launch_gateway.__wrapped__`` is PySpark's).
3. The wrapper acts only when this process launches a JVM itself: not under
   ``spark-submit`` (``PYSPARK_GATEWAY_PORT`` set: its JVM runs already,
   and nothing in Python can reach its options), and not with
   ``EOSKIT_WARM_START=0``. It then calls
   ``eoskit.runtime.spark.session.prepare_local_launch(conf)``, which for a
   local master does what ``get_session`` does before its JVM starts (the
   class archive, ``eoskit-spark-python`` and the zygote, the worker
   daemon), and for any other master nothing.
4. A failure there is reported on one line of standard error and the JVM
   is launched as PySpark would have launched it: the warm start is speed
   only, never a reason for a session not to start.

``python -S`` and ``python -I`` read no ``.pth`` file, so nothing of this
runs in them.
"""

import os
import sys

#: ``EOSKIT_WARM_START=0`` (or false, no, off) turns the warm start off.
ENV = "EOSKIT_WARM_START"
GATEWAY_MODULE = "pyspark.java_gateway"


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


class GatewayFinder:
    """Step 1: waits for ``pyspark.java_gateway``; finds nothing itself."""

    def find_spec(self, name, path=None, target=None):
        if name != GATEWAY_MODULE:
            return None
        uninstall()
        import importlib.util  # loaded already by now: PySpark's own imports need it

        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = WrappingLoader(spec.loader)
        return spec


class WrappingLoader:
    """The module's own loader, and step 2 after it ran the module. A
    loader of its own, never a patched one: a ``zipimporter`` (PySpark from
    ``pyspark.zip``, as under ``spark-submit``) loads every module of its
    zip, so a patch on it would reach them all."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self.loader.exec_module(module)
        module.launch_gateway = wrap(module.launch_gateway)

    def __getattr__(self, name):  # get_source, is_package, ...: the module's own loader's
        return getattr(self.loader, name)


def wrap(launch):
    """Steps 3 and 4: PySpark's ``launch_gateway`` with eoskit's preparation first."""

    def launch_gateway(conf=None, popen_kwargs=None):  # PySpark's signature
        if conf is not None and "PYSPARK_GATEWAY_PORT" not in os.environ and enabled():
            try:
                from eoskit.runtime.spark.session import prepare_local_launch

                prepare_local_launch(conf)
            except Exception as exc:  # noqa: BLE001 - speed only: launch as PySpark would
                print(f"eoskit: warm start skipped: {type(exc).__name__}: {exc} "
                      f"({ENV}=0 turns it off)", file=sys.stderr)
        return launch(conf, popen_kwargs)

    launch_gateway.__wrapped__ = launch
    launch_gateway.__doc__ = launch.__doc__
    return launch_gateway


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once; not when turned off,
    nor when PySpark's gateway module is loaded already)."""
    if enabled() and GATEWAY_MODULE not in sys.modules and not any(
            isinstance(f, GatewayFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, GatewayFinder())


def uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, GatewayFinder)]
