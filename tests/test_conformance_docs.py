"""docs/conformance.md's plug-in examples run as written: the data source
checks its options as documented, and the conformance test uses only the
fixtures a plug-in gets (eoskit's pytest plugin's and pytest's own)."""

import ast
import inspect
import re
import sqlite3
import sys
import types
from pathlib import Path

import pytest

DOC = Path(__file__).parents[1] / "docs" / "conformance.md"


def _block(first_line: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    (found,) = [b for b in blocks if b.startswith(first_line)]
    return found


def test_the_data_source_example_checks_its_options_as_documented(monkeypatch):
    from pyspark.sql.datasource import CaseInsensitiveDict

    from eoskit.twophase.contract import Sink
    from eoskit.core.options import OptionError

    package, sink = types.ModuleType("acme_sqlite"), types.ModuleType("acme_sqlite.sink")
    sink.SQLiteSink = type("SQLiteSink", (Sink,), {})
    monkeypatch.setitem(sys.modules, "acme_sqlite", package)
    monkeypatch.setitem(sys.modules, "acme_sqlite.sink", sink)
    namespace: dict = {}
    exec(_block("# acme_sqlite/datasource.py"), namespace)
    source = namespace["SQLiteDataSource"]
    assert source.name() == "acme-sqlite"
    made = source(CaseInsensitiveDict({"path": "/data/x.db", "dbTable": "orders", "commitMode": "idempotent"}))
    assert (made.path, made.table) == ("/data/x.db", "orders")
    with pytest.raises(OptionError, match="Did you mean 'dbtable'"):
        source(CaseInsensitiveDict({"path": "/data/x.db", "dbtabel": "orders"}))
    with pytest.raises(OptionError, match="needs the options path and dbtable"):
        source(CaseInsensitiveDict({"path": "/data/x.db"}))


def _plugin_fixtures() -> set[str]:
    import eoskit.testing.pytest_plugin as plugin

    tree = ast.parse(inspect.getsource(plugin))
    return {f.name for f in tree.body if isinstance(f, ast.FunctionDef)
            and any("fixture" in ast.unparse(d) for d in f.decorator_list)}


def test_the_conformance_example_runs_with_the_fixtures_a_plug_in_gets(tmp_path):
    code = _block("# tests/test_conformance.py of the plug-in")
    namespace: dict = {}
    exec(code, namespace)
    target = namespace["SQLiteTarget"](str(tmp_path / "out.db"))
    target.create_table("t1")
    with sqlite3.connect(target.path) as db:
        db.execute('INSERT INTO "t1" VALUES (1, 10, \'c1\')')
    assert target.rows("t1") == [(1, 10)] and target.prepared("eoskit:") == []

    names = {s.name for s in namespace["scenarios_for"]("idempotent", namespace["SQLiteTarget"])}
    assert "replay_with_other_parallelism_is_refused" in names

    available = _plugin_fixtures() | {"tmp_path", "request", "monkeypatch", "scenario"}
    assert "kafka" in available and "spark" not in available
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.FunctionDef) and (node.name.startswith("test_") or node.decorator_list):
            if any("fixture" in ast.unparse(d) for d in node.decorator_list):
                available.add(node.name)
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.FunctionDef) and (node.name.startswith("test_")
                                                 or any("fixture" in ast.unparse(d) for d in node.decorator_list)):
            wanted = {a.arg for a in node.args.args}
            assert wanted <= available, f"{node.name} asks for {sorted(wanted - available)}"
