"""Sizes a reader can hold: print every function over 80 lines and every
module over 600 lines, in the product (``connectors``, ``twophase``,
``runtime``, ``testing``) and in ``benchmarks/``.

A function's size runs from its ``def`` line (decorators not counted) to
its last line, docstring and comments included; a module's is its line
count. Read with ``ast``, nothing imported, so it runs in any Python 3.9+
without eoskit's dependencies. ``tests/test_sizes.py`` runs it over the
tree and fails on anything over that its allow-list does not name.

    python scripts/sizes.py          # exit status 1 when anything is over
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
#: The folders measured: the product's packages, then the benchmarks.
FOLDERS = ("connectors", "twophase", "core", "runtime", "testing", "benchmarks")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600


class Oversize(NamedTuple):
    """One thing over its limit: ``name`` is the module's path relative to
    the root (``connectors/kafka/security.py``), and for a function that
    path, ``:``, and its qualified name (``runtime/cli/main.py:build_parser``,
    ``runtime/state/savepoints.py:Savepoints.restore``)."""

    kind: str  # "module" or "function"
    name: str
    lines: int
    limit: int


def _functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, node) of every function and method, nested ones too."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def measure(path: Path, root: Path = ROOT) -> list[Oversize]:
    """What in one file is over its limit."""
    text = path.read_text()
    rel = path.relative_to(root).as_posix()
    found = []
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(Oversize("module", rel, lines, MAX_MODULE_LINES))
    for name, node in _functions(ast.parse(text, str(path))):
        size = node.end_lineno - node.lineno + 1
        if size > MAX_FUNCTION_LINES:
            found.append(Oversize("function", f"{rel}:{name}", size, MAX_FUNCTION_LINES))
    return found


def oversized(root: Path = ROOT) -> list[Oversize]:
    """Everything over its limit under ``FOLDERS`` of ``root``."""
    return [o for folder in FOLDERS for path in sorted((root / folder).rglob("*.py"))
            for o in measure(path, root)]


def main(argv: list[str] | None = None) -> int:
    root = Path(argv[0]) if argv else ROOT
    found = oversized(root)
    for o in found:
        print(f"{o.kind:8} {o.lines:5} > {o.limit:3}  {o.name}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
