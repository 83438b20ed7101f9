"""Only what pyproject.toml cannot say: one file installed at the top of
site-packages (see ``connectors/pyspark_modules/eoskit-prefer-installed-pyspark.pth``)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = Path("connectors/pyspark_modules/eoskit-prefer-installed-pyspark.pth")


class BuildPyWithPth(build_py):
    """A ``.pth`` file is not a module or package data; copy it to the root
    of the build so that the wheel installs it into site-packages."""

    def run(self) -> None:
        super().run()
        self.copy_file(str(PTH), str(Path(self.build_lib) / PTH.name), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH.name)]


setup(cmdclass={"build_py": BuildPyWithPth})
