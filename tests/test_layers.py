"""The import graph points downward: the protocol (``twophase``) and the
connectors import no runtime, and nothing of the product imports the test
kit (``testing``). Read from the source with ``ast``, every import counted,
whether at a module's top or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The product's folders (import names ``eoskit.<name>``), and what each may not import.
FORBIDDEN = {
    "twophase": ("eoskit.runtime", "eoskit.connectors", "eoskit.testing"),
    "connectors": ("eoskit.runtime", "eoskit.testing"),
    "runtime": ("eoskit.testing",),
}


def imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_no_layer_imports_upward(folder):
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {name}"
             for path in sorted((ROOT / folder).rglob("*.py"))
             for line, name in imports(path)
             if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[folder])]
    assert wrong == []


def test_the_layers_exist():
    """The test above reads files: it must find them."""
    for folder in FORBIDDEN:
        assert len(list((ROOT / folder).rglob("*.py"))) > 5, folder
