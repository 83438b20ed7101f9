"""Only what pyproject.toml cannot say, derived from the tree so that adding a
connector edits no shared file:

- the packages: every folder with an ``__init__.py`` under the folders
  pyproject's ``package-dir`` maps onto ``eoskit.*``;
- the top-level ``pyspark_*`` modules, one per format a
  ``connectors/<name>/plugin.py`` declares, written at build time from its
  ``Plugin(format=..., data_source=...)`` (Spark 4 imports every installed
  ``pyspark_*`` module and registers its ``DefaultSource``), into the wheel
  and the editable wheel alike (``BuildPyWithDiscoveryModules``). A plug-in
  in another package writes none: ``eoskit.connectors.plugins.register_all``;
- the ``eoskit.plugins`` entry points: one per ``connectors/<name>/plugin.py``
  (see ``eoskit.connectors.plugins``); the pytest plugin is not one: it
  loads where asked for (``-p eoskit.testing.pytest_plugin``), not in every
  pytest run of the environment;
- the console scripts: ``eoskit``, and ``eoskit-spark-python``, the Python
  eoskit's local sessions give Spark (``eoskit.runtime.spark.python``).

- the extras: each connector's, named by its ``Plugin``'s ``extra`` and
  listed in its ``requires`` (literals, read like the format); the files
  sink's optional ``s3`` is declared here, and ``all``, ``test`` and
  ``dev`` are derived with the requirements written out, not as
  ``eoskit[...]``, which the pip Debian 12 ships (23.x) cannot resolve
  (tests/test_packaging.py).

- the startup hook: ``eoskit-warm-start.pth`` at the top of site-packages,
  one line that imports the top-level module ``eoskit_warm_start``
  (``startup/``) and installs its finder, so that a Spark user's own script
  gets the warm start ``get_session`` gives (issue 33; the module says what
  it costs and does). It is the only code eoskit runs in every interpreter
  of the environment (``eoskit-spark-python.pth`` of versions before issue
  22, which ran a check in each, is in their RECORD, and pip removes it on
  upgrade).
"""

import ast
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
PACKAGE_DIRS = {"eoskit.connectors": "connectors", "eoskit.twophase": "twophase",
                "eoskit.runtime": "runtime", "eoskit.testing": "testing", "eoskit.core": "core"}


#: Extras that are no connector's: the files sink on S3 (s3:// paths);
#: other fsspec file systems bring their own package.
OTHER_EXTRAS = {"s3": ["s3fs>=2024.2"]}
#: The benchmarks' charts (benchmarks/soak.py --plot), which tests/test_peers.py draws too.
BENCH = ["matplotlib>=3.8"]
#: What the tests need beside every connector's extra and the charts.
TEST = [
    "pytest>=8",
    "testcontainers>=4.4",
    "moto[server]>=5",
    "duckdb>=1.0",  # an independent reader of the files sink's output
]


def extras() -> dict[str, list[str]]:
    connectors = {**declared_extras(), **OTHER_EXTRAS}
    every = list(dict.fromkeys(r for reqs in connectors.values() for r in reqs))
    test = [*every, *TEST, *BENCH]
    return {**connectors, "all": every, "test": test, "bench": BENCH, "dev": test}


def plugin_calls() -> list[tuple[Path, ast.Call]]:
    """Every ``Plugin(...)`` call in a connector's ``plugin.py``, read (not
    imported: the build has no dependencies)."""
    return [(path, node) for path in sorted((ROOT / "connectors").glob("*/plugin.py"))
            for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Plugin"]


def declared_extras() -> dict[str, list[str]]:
    """Each connector's extra -> its requirements, from the literal ``extra``
    and ``requires`` of its ``Plugin(...)`` calls (a connector of several
    formats names the same extra in each)."""
    found: dict[str, list[str]] = {}
    for path, node in plugin_calls():
        given = {k.arg: k.value for k in node.keywords}
        try:
            extra, requires = ast.literal_eval(given["extra"]), ast.literal_eval(given["requires"])
        except (KeyError, ValueError) as exc:
            raise SystemExit(f"{path}: Plugin(...) needs literal extra= and requires= ({exc})") from None
        found.setdefault(extra, [])
        found[extra] += [r for r in requires if r not in found[extra]]
    return found


def packages() -> list[str]:
    found = []
    for package, folder in PACKAGE_DIRS.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / folder)
            found.append(".".join([package, *rel.parts]))
    return found


def declared_formats() -> dict[str, tuple[str, str]]:
    """Spark format -> (``module:Class`` of its data source, its pip extra),
    read (not imported: the build has no dependencies) from every
    ``Plugin(...)`` call with literal ``format``, ``data_source`` and
    ``extra`` in a ``plugin.py``."""
    found: dict[str, tuple[str, str]] = {}
    for path, node in plugin_calls():
        given = {k.arg: k.value.value for k in node.keywords
                 if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)}
        if not {"format", "data_source", "extra"} <= set(given):
            raise SystemExit(f"{path}: Plugin(...) needs literal format=, data_source= "
                             "and extra=")
        found[given["format"]] = (given["data_source"], given["extra"])
    return found


def discovery_module(fmt: str, declared: tuple[str, str]) -> tuple[str, str]:
    """(file name, text) of the ``pyspark_*`` module that serves ``fmt``.
    Without the connector's extra installed it serves a stand-in that says
    what to install: Spark's discovery stops at a module it cannot import."""
    data_source, extra = declared
    text = (f'"""Spark 4 registers ``DefaultSource`` of every installed ``pyspark_*``\n'
            f'module: this one makes ``{fmt}`` available in every session. Written by\n'
            f'eoskit\'s setup.py from the connector\'s plugin.py."""\n\n'
            f"from eoskit.connectors.plugins import load_data_source\n\n"
            f"DefaultSource = load_data_source({fmt!r}, {data_source!r}, {extra!r})\n\n"
            f'__all__ = ["DefaultSource"]\n')
    return "pyspark_" + fmt.replace("-", "_") + ".py", text


def plugin_entry_points() -> list[str]:
    return [f"{p.parent.name} = eoskit.connectors.{p.parent.name}.plugin:PLUGIN"
            for p in sorted((ROOT / "connectors").glob("*/plugin.py"))]


#: The startup hook's file and its one line (site runs a .pth line that starts with ``import``).
STARTUP_HOOK = ("eoskit-warm-start.pth", "import eoskit_warm_start; eoskit_warm_start.install()\n")


def top_level_files() -> list[tuple[str, str]]:
    """(name, text) of what goes at the top of site-packages besides the
    packages: the ``pyspark_*`` discovery modules and the startup hook."""
    return [*(discovery_module(f, d) for f, d in declared_formats().items()), STARTUP_HOOK]


def write_discovery_modules(folder: str) -> None:
    for name, text in top_level_files():
        (Path(folder) / name).write_text(text)


class BuildPyWithDiscoveryModules(build_py):
    """The top of site-packages gets what is not a package: the ``pyspark_*``
    discovery modules (written from the plugin declarations) and the
    startup hook's ``.pth``.

    A wheel takes them from ``build_lib``. An editable wheel (``pip install
    -e``, PEP 660) does not: in setuptools' default (lenient) mode the
    package is imported from the tree through a meta path finder, which
    serves only the mapped packages, and Spark's discovery lists modules
    with ``pkgutil.iter_modules``, which sees files on ``sys.path`` and not
    what a meta path finder serves. So in editable mode they are also
    written where setuptools builds the editable wheel's root
    (``install_lib``, which ``editable_wheel`` points at the unpacked wheel,
    as it does for scripts and data): pip installs them into site-packages
    as real files, and they import ``eoskit`` through the finder. Like the
    entry points, they change only when a ``plugin.py``'s format does, and
    a reinstall refreshes both.
    """

    def run(self) -> None:
        super().run()
        write_discovery_modules(self.build_lib)
        if self.editable_mode:
            wheel_root = self.get_finalized_command("install").install_lib
            if wheel_root and os.path.isdir(wheel_root):
                write_discovery_modules(wheel_root)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        written = [name for name, _ in top_level_files()]
        return [*super().get_outputs(include_bytecode), *(str(Path(self.build_lib) / n) for n in written)]


if __name__ == "__main__":  # as setuptools' build backend runs it; tests/test_packaging.py imports it
    setup(
        packages=packages(),
        extras_require=extras(),
        entry_points={
            "console_scripts": ["eoskit = eoskit.runtime.cli.main:main",
                                "eoskit-spark-python = eoskit.runtime.spark.python:main"],
            "eoskit.plugins": plugin_entry_points(),
        },
        cmdclass={"build_py": BuildPyWithDiscoveryModules},
    )
