"""What setup.py derives from the tree is installed: every package, the
pyspark_* discovery modules, the eoskit.plugins registry and the console
scripts; and nothing that runs in every interpreter of the environment but
the startup hook's one small module."""

import importlib
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def eoskit_plugins():
    """eoskit's own plug-ins: the environment may hold others (the tests
    install the worked example, examples/sqlite-sink)."""
    from eoskit.connectors.plugins import plugins

    return [p for p in plugins() if p.data_source.startswith("eoskit.")]
FOLDERS = {"connectors": "eoskit.connectors", "twophase": "eoskit.twophase", "runtime": "eoskit.runtime",
           "core": "eoskit.core"}


def test_every_package_folder_is_installed():
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            name = ".".join([package, *rel.parts])
            module = importlib.import_module(name)
            assert "site-packages" in module.__file__, f"{name} is not imported from the install"


def test_pyspark_discovery_modules_point_at_registered_data_sources():
    from pyspark.sql.datasource import DataSource

    names = sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_eoskit"))
    formats = {p.format for p in eoskit_plugins()}
    # Written by setup.py from the declarations: one per format, none in the tree.
    assert names == sorted("pyspark_" + f.replace("-", "_") for f in formats)
    assert not list(ROOT.glob("pyspark_*.py")) and not list((ROOT / "connectors").rglob("pyspark_*.py"))
    for name in names:
        source = importlib.import_module(name).DefaultSource
        assert issubclass(source, DataSource)
        assert source.name() in formats, f"{name} serves {source.name()}, which no plugin registers"


def test_every_connector_folder_with_a_plugin_is_registered():
    from importlib.metadata import entry_points

    from eoskit.connectors.plugins import GROUP, plugins

    folders = sorted(p.parent.name for p in (ROOT / "connectors").glob("*/plugin.py"))
    # One entry point per folder; a folder may serve several formats (files: parquet, json).
    assert sorted(e.name for e in entry_points(group=GROUP) if e.dist.name == "eoskit") == folders
    assert len(plugins()) >= len(eoskit_plugins()) >= len(folders) >= 3
    for plugin in plugins():
        assert plugin.data_source_class().name() == plugin.format
        for module in plugin.modules_to_preload():
            importlib.import_module(module)


def test_spark_s_python_wrapper_is_installed_beside_the_interpreter():
    """``get_session`` names ``eoskit-spark-python`` as Spark's Python in
    local mode, found beside the interpreter (tests/test_spark_python.py
    holds what it does)."""
    import sys
    from importlib.metadata import entry_points

    from eoskit.runtime.spark.session import spark_python_wrapper

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "eoskit-spark-python"]
    assert script.value == "eoskit.runtime.spark.python:main"
    wrapper = spark_python_wrapper()
    assert wrapper is not None and Path(wrapper).parent == Path(sys.executable).parent


def test_an_interpreter_of_the_environment_runs_only_the_startup_hook_at_its_start(tmp_path):
    """Only the processes Spark starts for a local session run eoskit code
    (through the wrapper); any other interpreter runs the startup hook's
    one small module (``eoskit-warm-start.pth``: tests/test_warm_start.py)
    and nothing else: a plain interpreter with Spark's zip on its path and
    the zygote's setting on (where the ``.pth`` of versions before issue 22
    acted) loads nothing of the ``eoskit`` namespace and keeps its path."""
    import os
    import site
    import subprocess
    import sys

    import pyspark

    folders = [*site.getsitepackages(), site.getusersitepackages()]
    for folder in filter(os.path.isdir, folders):
        for pth in Path(folder).glob("*.pth"):
            if "eoskit" in pth.read_text(errors="replace"):
                assert pth.name == "eoskit-warm-start.pth", f"{pth} runs eoskit code in every interpreter"
    (tmp_path / "report.py").write_text(
        "import sys\nprint(sorted(m for m in sys.modules if 'eoskit' in m))\n"
        "print(any(p.endswith('pyspark.zip') for p in sys.path))\n")
    zip_path = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    env = {**os.environ, "EOSKIT_PREFORK": "1",
           "PYTHONPATH": os.pathsep.join([str(zip_path), os.environ.get("PYTHONPATH", "")])}
    for command in (["-m", "report"], [str(tmp_path / "report.py")]):
        result = subprocess.run([sys.executable, *command], cwd=tmp_path, env=env, capture_output=True,
                                text=True, check=True)
        assert result.stdout.split("\n")[:2] == ["['eoskit_warm_start']", "True"], (command, result.stdout)


# -- one extra per connector ----------------------------------------------------------

#: Each connector's client libraries, by the import name a missing one raises.
DRIVERS = ("psycopg", "pymysql", "sqlalchemy", "confluent_kafka")

_WITHOUT = """
import importlib.abc, sys

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {missing!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Missing())
"""


def _run_without(missing: tuple[str, ...], code: str) -> str:
    """``code`` in a fresh interpreter where ``missing`` cannot be imported,
    as in an installation without their extras."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _WITHOUT.format(missing=missing) + code],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_kafka_only_installation_loads_the_registry_the_cli_and_the_kafka_connector():
    out = _run_without(("psycopg", "pymysql", "sqlalchemy"), """
from eoskit.connectors.plugins import plugins, by_format
print(sorted(p.format for p in plugins() if p.data_source.startswith("eoskit.")))
print(by_format("eoskit-kafka").data_source_class().__name__)
import eoskit.runtime.cli.main, eoskit.connectors.kafka.source, eoskit.connectors.kafka
print(eoskit.connectors.kafka.KafkaSink.__name__)
print(sorted(m for m in sys.modules if m.partition(".")[0] in ("psycopg", "pymysql", "sqlalchemy")))
""")
    formats, source, sink, loaded = out.splitlines()
    assert formats == "['eoskit-json', 'eoskit-kafka', 'eoskit-mysql', 'eoskit-parquet', 'eoskit-postgres']"
    assert (source, sink, loaded) == ("KafkaDataSource", "KafkaSink", "[]")


@pytest.mark.parametrize("fmt, extra, missing", [
    ("eoskit-postgres", "postgres", ("psycopg",)),
    ("eoskit-mysql", "mysql", ("pymysql",)),
    ("eoskit-kafka", "kafka", ("confluent_kafka",)),
])
def test_a_format_whose_extra_is_missing_says_what_to_install(fmt, extra, missing):
    """Spark imports every pyspark_* module to discover data sources, and one
    that fails to import fails the discovery of all: the module stands in
    with a data source that names the extra when a query uses it."""
    out = _run_without(missing, f"""
import importlib
from pyspark.sql.datasource import DataSource
source = importlib.import_module("pyspark_" + {fmt!r}.replace("-", "_")).DefaultSource
print(issubclass(source, DataSource), source.name())
try:
    source({{}})
except Exception as exc:
    print(type(exc).__name__, exc)
""")
    found, error = out.splitlines()
    assert found == f"True {fmt}"
    assert error.startswith("PluginError ") and f"pip install 'eoskit[{extra}]'" in error
    assert missing[0] in error


def test_every_connector_s_libraries_are_in_its_extra():
    """The third-party modules each connector folder imports are installed
    by the core dependencies or by that connector's extra."""
    import ast
    import re
    import sys
    import tomllib
    from importlib.metadata import packages_distributions

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = lambda reqs: {re.split(r"[\[<>=; ]", r)[0].lower().replace("_", "-") for r in reqs}  # noqa: E731
    core = names(project["dependencies"])
    extras = {k: names(v) for k, v in _installed_extras().items()}
    distributions = packages_distributions()
    for plugin in sorted((ROOT / "connectors").glob("*/plugin.py")):
        folder = plugin.parent
        extra = re.search(r'extra="(\w+)"', plugin.read_text())[1]
        needed = set()
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                           else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                           else [])
                for module in modules:
                    top = module.partition(".")[0]
                    if top in sys.stdlib_module_names or top in ("eoskit", "pyspark"):
                        continue
                    needed |= {d.lower().replace("_", "-") for d in distributions.get(top, [top])}
        missing = needed - core - extras[extra]
        assert not missing, f"connectors/{folder.name} imports {sorted(missing)}, not in eoskit[{extra}]"


def _installed():
    """The installed eoskit's metadata: the dist-info beside the package, not
    the eoskit.egg-info an in-tree build leaves in the working folder (first
    on sys.path under python -m pytest, and without the licence file)."""
    from importlib.metadata import Distribution

    site = Path(importlib.import_module("eoskit.runtime").__file__).parents[2]
    (info,) = site.glob("eoskit-*.dist-info")
    return Distribution.at(info)


def _installed_extras() -> dict[str, list[str]]:
    """Each extra of the installed eoskit -> its requirements, as its
    metadata says (setup.py declares them)."""
    import re

    meta = _installed().metadata
    extras: dict[str, list[str]] = {name: [] for name in meta.get_all("Provides-Extra") or []}
    for line in meta.get_all("Requires-Dist") or []:
        requirement, _, marker = line.partition(";")
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        if extra is not None:
            extras[extra[1]].append(requirement.strip())
    return extras


def test_all_test_and_dev_hold_every_connector_s_requirements_written_out():
    """setup.py derives ``all``, ``test`` and ``dev`` from the connectors'
    extras, so they cannot drift; and no extra names eoskit's own extras
    (``eoskit[kafka]``), which the pip Debian 12 ships (23.x) cannot
    resolve (ResolutionImpossible)."""
    import re

    extras = _installed_extras()
    derived = {"all", "test", "dev", "bench"}
    connectors = set(extras) - derived
    plugins = {re.search(r'extra="(\w+)"', p.read_text())[1]
               for p in (ROOT / "connectors").glob("*/plugin.py")}
    assert plugins <= connectors and {"kafka", "postgres", "mysql", "files", "s3"} <= connectors
    for name, requirements in extras.items():
        assert requirements, f"eoskit[{name}] installs nothing"
        assert not [r for r in requirements if re.match(r"eoskit\b", r, re.I)], (name, requirements)
    every = {r for c in connectors for r in extras[c]}
    assert set(extras["all"]) == every
    for name in ("test", "dev"):
        assert set(extras[name]) >= every | set(extras["bench"]), name
    assert extras["dev"] == extras["test"]


def test_the_installed_package_is_typed_and_licensed():
    """PEP 561: eoskit is a namespace package, so each subpackage carries
    py.typed; the Apache-2.0 licence is in the metadata and the wheel."""
    for package in ("eoskit.connectors", "eoskit.twophase", "eoskit.runtime", "eoskit.testing"):
        folder = Path(importlib.import_module(package).__file__).parent
        assert (folder / "py.typed").is_file(), f"{package} has no py.typed"
    dist = _installed()
    assert dist.metadata["License-Expression"] == "Apache-2.0"
    assert dist.metadata.get_all("License-File") == ["LICENSE"]
    licence = dist.read_text("licenses/LICENSE")
    assert licence is not None and "Apache License" in licence and "Version 2.0, January 2004" in licence


# -- discovery: editable installs, plug-ins ---------------------------------------------

def _setup_py():
    """setup.py as a module (its ``setup()`` call runs only as ``__main__``,
    as setuptools' build backend runs it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("eoskit_setup_py", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _iter_modules_in(folder: Path) -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(folder)]) if m.name.startswith("pyspark_"))


@pytest.mark.parametrize("editable", [False, True])
def test_the_discovery_modules_land_where_spark_lists_modules_in_both_installs(tmp_path, editable):
    """A wheel carries build_lib; an editable wheel (PEP 660) carries what is
    written to its root (``install_lib``, where ``editable_wheel`` points the
    install command), not build_lib: the package comes from the tree through
    a meta path finder, which ``pkgutil.iter_modules`` (Spark's discovery)
    does not list. So in editable mode the modules must be in the wheel's
    root too, to be installed as files in site-packages."""
    from setuptools.dist import Distribution

    setup_py = _setup_py()
    build_lib, wheel_root = tmp_path / "build-lib", tmp_path / "unpacked-wheel"
    build_lib.mkdir(), wheel_root.mkdir()
    dist = Distribution({"name": "eoskit", "packages": [],
                         "cmdclass": {"build_py": setup_py.BuildPyWithDiscoveryModules}})
    install = dist.get_command_obj("install")
    install.install_lib = install.install_purelib = install.install_platlib = str(wheel_root)
    install.ensure_finalized()
    build_py = dist.get_command_obj("build_py")
    build_py.build_lib, build_py.editable_mode = str(build_lib), editable
    build_py.ensure_finalized()
    build_py.run()

    expected = sorted("pyspark_" + f.replace("-", "_") for f in setup_py.declared_formats())
    assert len(expected) >= 5
    assert _iter_modules_in(build_lib) == expected
    assert _iter_modules_in(wheel_root) == (expected if editable else [])


class _Session:
    """What ``register_all`` uses of a SparkSession: Spark's lookup of a
    format (``dataSourceExists``) and ``dataSource.register``."""

    def __init__(self, known: set[str]) -> None:
        self.known, self.registered = set(known), []
        self._jsparkSession = self
        self.dataSource = self

    def sessionState(self):
        return self

    def dataSourceManager(self):
        return self

    def dataSourceExists(self, name: str) -> bool:
        return name in self.known

    def register(self, data_source: type) -> None:
        self.registered.append(data_source.name())
        self.known.add(data_source.name())


def test_register_all_registers_the_plug_ins_spark_did_not_find(monkeypatch):
    """A plug-in declares its format once, in its ``Plugin``: no
    ``pyspark_*`` module of its own. ``register_all`` registers what Spark
    did not find by itself, and imports nothing for a format it knows."""
    import eoskit.connectors.plugins as registry
    from eoskit.connectors.plugins import Plugin, plugins, register_all

    ours = plugins()
    plug_in = Plugin(format="acme-sqlite", data_source="eoskit_acme_sqlite_test:SQLiteDataSource")
    not_imported = Plugin(format="acme-known", data_source="no_such_module_anywhere:Source")
    monkeypatch.setattr(registry, "plugins", lambda: (*ours, plug_in, not_imported))
    from pyspark.sql.datasource import DataSource

    class SQLiteDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "acme-sqlite"

    module = type(importlib)("eoskit_acme_sqlite_test")
    module.SQLiteDataSource = SQLiteDataSource
    monkeypatch.setitem(__import__("sys").modules, "eoskit_acme_sqlite_test", module)

    static = {p.format for p in ours} | {"acme-known"}  # what the pyspark_* modules give Spark
    session = _Session(static)
    assert register_all(session) == ["acme-sqlite"]
    assert session.registered == ["acme-sqlite"]
    assert register_all(session) == []  # a second call registers nothing again

    editable_before_the_fix = _Session({"acme-known"})  # no pyspark_eoskit_* module found
    assert sorted(register_all(editable_before_the_fix)) == sorted([*(p.format for p in ours), "acme-sqlite"])
