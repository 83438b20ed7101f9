"""The registry of eoskit's data sources and sinks: entry points.

Every connector describes itself with one ``Plugin`` value in its own folder
(``connectors/<name>/plugin.py``; a tuple of them, one per format, for a
connector with several formats, like the files sink's Parquet and JSON) and
is found through the ``eoskit.plugins`` entry-point group, which
``setup.py`` fills from those files; a plug-in
outside eoskit declares the same group in its own package metadata. Nothing
central lists connectors, so a new sink is a new folder:

- Spark finds eoskit's own data sources by itself, through the top-level
  ``pyspark_<format>`` modules ``setup.py`` writes at install time (normal
  or editable) from each ``Plugin``'s literal ``format`` and
  ``data_source``: Spark 4 imports every ``pyspark_*`` module on the path
  and registers its ``DefaultSource``, one format per module. A plug-in
  writes no such module: eoskit's components register the format they use
  in their session, and :func:`register_all` registers every plug-in's
  format in a session the user made (docs/conformance.md, "Registration");
- the worker daemon preloads each plugin's ``preload`` modules;
- ``eoskit txn`` asks each plugin's ``in_doubt`` for the sink that owns a
  target, to list and settle its in-doubt transactions;
- ``eoskit.connectors.failures`` asks each plugin's ``failures`` whether an
  error of its client library means the service is gone or refused us.

A ``Plugin`` must be cheap to import: it names modules as strings and imports
them only when asked.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, ClassVar

from eoskit.twophase.verdicts import Verdict

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from eoskit.twophase.contract import TwoPhaseCommitting

GROUP = "eoskit.plugins"

#: ``in_doubt(kind, target, options)``, asked by ``eoskit txn list|resolve``
#: (``runtime/cli/txn.py``) on the user's machine, never in a job:
#:
#: - ``kind``: ``"url"`` for ``--url``, the server that holds the prepared
#:   transactions as a URL (a database's SQLAlchemy URL), or ``"path"`` for
#:   ``--path``, the place in a file system the sink writes to (a local path
#:   or an fsspec URL such as ``s3://bucket/dir``); a sink takes the one its
#:   documentation names, and answers None to the other;
#: - ``target``: the flag's value, as typed;
#: - ``options``: ``--storage-option PROTOCOL.KEY=VALUE`` as
#:   ``fs.PROTOCOL.KEY`` -> value (the files sink's option names), and any
#:   hidden ``--option KEY=VALUE``.
#:
#: Returns the two-phase sink that owns ``target``, able to list and settle
#: prepared ids (``TwoPhaseCommitting``), or None if ``target`` is not this
#: sink's: plug-ins are asked in turn and the first sink wins, so claim only
#: what is surely yours (your URL scheme; a directory with your marker
#: file). Raising stops the command with the error; it should not raise for
#: a target that is not its own.
InDoubt = Callable[[str, str, Mapping[str, str]], "TwoPhaseCommitting | None"]


@dataclass(frozen=True)
class Plugin:
    """One connector: its Spark format, its data source, what workers preload."""

    #: Spark format name, e.g. ``eoskit-postgres``.
    format: str
    #: ``module:Class`` of the PySpark ``DataSource``.
    data_source: str
    #: Modules a Python worker imports before its first task, besides the
    #: data source's own (``modules_to_preload``).
    preload: tuple[str, ...] = ()
    #: Settles in-doubt transactions by hand (two-phase sinks only).
    in_doubt: InDoubt | None = field(default=None, compare=False)
    #: The pip extra that installs its client library (``eoskit[<extra>]``);
    #: empty for a plug-in that brings its own.
    extra: str = ""
    #: The extra's requirements, for eoskit's own connectors: setup.py reads
    #: them from the literal here, so that a connector is one folder (a
    #: plug-in outside eoskit lists them in its own package's metadata).
    requires: tuple[str, ...] = ()
    #: Which of its client library's errors mean the service is gone for now
    #: or refused us (``eoskit.connectors.failures``): the library's
    #: top-level module -> ``module:function``, imported for its errors only.
    failures: Mapping[str, str] = field(default_factory=dict, compare=False)

    def modules_to_preload(self) -> tuple[str, ...]:
        """The data source's module, then ``preload``."""
        first = self.data_source.partition(":")[0]
        return (first, *(m for m in self.preload if m != first))

    def data_source_class(self) -> type:
        return load_data_source(self.format, self.data_source, self.extra)


def lazy_exports(exports: Mapping[str, str]) -> Callable[[str], object]:
    """A package's module ``__getattr__`` (PEP 562) that imports each name
    of ``exports`` (name -> module) on first use. A connector's package is
    imported with its ``plugin.py``, which the registry loads for every
    connector: its client library must load only when the connector is used,
    so that a connector's extra need not be installed for the others."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(name)
        return getattr(importlib.import_module(module), name)

    return __getattr__


def load_data_source(format: str, data_source: str, extra: str) -> type:
    """The data source class ``data_source`` (``module:Class``) serving
    ``format``; a stand-in (``unavailable``) if its library is missing. The
    ``pyspark_*`` discovery modules setup.py writes call this, and
    :meth:`Plugin.data_source_class`."""
    module, _, name = data_source.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        if (exc.name or "eoskit").partition(".")[0] == "eoskit":
            raise  # eoskit's own code: a bug to see, not an extra to install
        return unavailable(format, extra, exc)


def unavailable(format: str, extra: str, missing: ImportError) -> type:
    """A stand-in data source for ``format`` whose library is not installed:
    Spark's discovery of ``pyspark_*`` modules (which fails as a whole on a
    module that cannot be imported) goes on, and a query that names the
    format is told what to install."""
    from pyspark.sql.datasource import DataSource

    library = missing.name or str(missing)
    install = f"pip install 'eoskit[{extra}]'" if extra else f"install {library}"

    class Unavailable(DataSource):
        @classmethod
        def name(cls) -> str:
            return format

        def __init__(self, options: dict[str, str]) -> None:
            raise PluginError(f"{format} needs {library}, which is not installed: {install}")

    Unavailable.__qualname__ = Unavailable.__name__ = f"Unavailable_{format.replace('-', '_')}"
    return Unavailable


class PluginError(RuntimeError):
    """A registered plug-in cannot be loaded; names the entry point."""

    #: eoskit.twophase.verdicts: the installation is at fault (also exit code 2).
    verdict: ClassVar[Verdict] = Verdict.BAD_INPUT


@lru_cache(maxsize=1)
def plugins() -> tuple[Plugin, ...]:
    """Every installed plugin, eoskit's own and others', by entry-point name."""
    found = []
    for entry in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            plugin = entry.load()
        except Exception as exc:  # noqa: BLE001 - named in the error
            raise PluginError(f"eoskit plug-in {entry.name!r} ({entry.value}) cannot be "
                              f"loaded: {type(exc).__name__}: {exc}") from exc
        # One connector may serve several formats: a tuple of Plugins, one per format.
        for one in plugin if isinstance(plugin, tuple) else (plugin,):
            if not isinstance(one, Plugin):
                raise PluginError(f"eoskit plug-in {entry.name!r} ({entry.value}) is not an "
                                  "eoskit.connectors.plugins.Plugin or a tuple of them")
            found.append(one)
    return tuple(found)


def by_format(name: str) -> Plugin | None:
    for plugin in plugins():
        if plugin.format == name:
            return plugin
    return None


def in_doubt_sink(kind: str, target: str, options: Mapping[str, str]) -> "TwoPhaseCommitting":
    """The two-phase sink that owns ``target``, from the first plugin that
    claims it."""
    for plugin in plugins():
        if plugin.in_doubt is not None:
            sink = plugin.in_doubt(kind, target, options)
            if sink is not None:
                return sink
    formats = ", ".join(p.format for p in plugins() if p.in_doubt is not None)
    raise PluginError(f"no eoskit sink handles the {kind} {target!r} "
                      f"(two-phase sinks installed: {formats})")


def register_data_source(spark: "SparkSession", data_source: type) -> None:
    """Register a Python data source, unless Spark already knows its format.

    Runs on the driver, where a component or :func:`register_all` is about
    to use the format. Spark registers every installed ``pyspark_<name>``
    module's data source by itself (eoskit ships one per format of its own);
    registering the same format again replaces it and makes Spark log
    "replaced a statically registered data source" on every run, and again
    for every session clone. Spark's own lookup answers
    (:func:`_spark_knows`); where it cannot be asked (Spark Connect), the
    data source is registered.
    """
    name = data_source.name()  # type: ignore[attr-defined]
    if not _spark_knows(spark, name):
        spark.dataSource.register(data_source)  # type: ignore[arg-type]


def register_all(spark: "SparkSession") -> list[str]:
    """Register in ``spark`` every installed plug-in's format that Spark did
    not find by itself; returns the formats registered.

    Spark finds a Python data source by itself only through a top-level
    ``pyspark_*`` module, one format per module (it keeps each module's
    ``DefaultSource`` under its ``name()``): eoskit's own formats have one,
    written at install time, and a plug-in has none, its ``Plugin`` in the
    ``eoskit.plugins`` entry point being its only declaration. eoskit's
    components register the format they use in the session they write to
    (``output_modes.write_stream``, the Kafka source), so a ``Pipeline``
    needs nothing more; a session of the user's own that names a
    plug-in's format in ``spark.readStream.format(...)`` or
    ``df.writeStream.format(...)`` calls this once after it is made (a
    session from ``spark.newSession()`` starts without registrations and
    needs the call again; clones of it, such as a streaming query's, keep
    them).

    Runs on the driver. A format Spark already knows is not imported at all;
    a plug-in whose client library is missing is registered as a stand-in
    that names what to install when a query uses it. Raises
    :class:`PluginError` if a plug-in cannot be loaded.
    """
    registered = []
    for plugin in plugins():
        if not _spark_knows(spark, plugin.format):
            spark.dataSource.register(plugin.data_source_class())  # type: ignore[arg-type]
            registered.append(plugin.format)
    return registered


def _spark_knows(spark: "SparkSession", name: str) -> bool:
    """Whether ``spark`` has a data source ``name``: Spark's own lookup
    (``DataSourceManager.dataSourceExists``, which loads the ``pyspark_*``
    data sources Spark would load at the first query anyway); False where
    the JVM cannot be asked (Spark Connect): registering is always correct."""
    try:
        manager = spark._jsparkSession.sessionState().dataSourceManager()  # type: ignore[attr-defined]
        return bool(manager.dataSourceExists(name))
    except Exception:  # noqa: BLE001 - no JVM to ask
        return False
