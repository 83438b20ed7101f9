"""Only what pyproject.toml cannot say, derived from the tree so that adding a
connector edits no shared file:

- the packages: every folder with an ``__init__.py`` under the folders
  pyproject's ``package-dir`` maps onto ``eoskit.*``;
- the top-level ``pyspark_*`` modules in ``connectors/pyspark_modules/``
  (Spark 4 imports every installed ``pyspark_*`` module and registers its
  ``DefaultSource``);
- the ``eoskit.plugins`` entry points: one per ``connectors/<name>/plugin.py``
  (see ``eoskit.connectors.plugins``); the pytest plugin is not one: it
  loads where asked for (``-p eoskit.testing.pytest_plugin``), not in every
  pytest run of the environment;
- one file installed at the top of site-packages
  (``connectors/pyspark_modules/eoskit-spark-python.pth``).
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
PACKAGE_DIRS = {"eoskit.connectors": "connectors", "eoskit.twophase": "twophase",
                "eoskit.runtime": "runtime", "eoskit.testing": "testing"}
MODULES_DIR = Path("connectors/pyspark_modules")
PTH = MODULES_DIR / "eoskit-spark-python.pth"


def packages() -> list[str]:
    found = []
    for package, folder in PACKAGE_DIRS.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / folder)
            found.append(".".join([package, *rel.parts]))
    return found


def pyspark_modules() -> list[str]:
    return sorted(p.stem for p in (ROOT / MODULES_DIR).glob("pyspark_*.py"))


def plugin_entry_points() -> list[str]:
    return [f"{p.parent.name} = eoskit.connectors.{p.parent.name}.plugin:PLUGIN"
            for p in sorted((ROOT / "connectors").glob("*/plugin.py"))]


class BuildPyWithPth(build_py):
    """A ``.pth`` file is not a module or package data; copy it to the root
    of the build so that the wheel installs it into site-packages."""

    def run(self) -> None:
        super().run()
        self.copy_file(str(PTH), str(Path(self.build_lib) / PTH.name), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH.name)]


setup(
    packages=packages(),
    py_modules=pyspark_modules(),
    entry_points={
        "console_scripts": ["eoskit = eoskit.runtime.cli:main"],
        "eoskit.plugins": plugin_entry_points(),
    },
    cmdclass={"build_py": BuildPyWithPth},
)
