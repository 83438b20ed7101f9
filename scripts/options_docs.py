"""Regenerate the option tables in docs/ from the declarations.

Each page marks its table with ``<!-- options:begin -->`` /
``<!-- options:end -->``; ``PAGES`` says which declaration fills it.
``tests/test_kafka_settings.py`` and ``tests/test_files_settings.py`` fail
when a table is out of date.

    .venv/bin/python scripts/options_docs.py
"""

from __future__ import annotations

import importlib
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = {
    "kafka-source.md": "eoskit.connectors.kafka.settings",
    "postgres-sink.md": "eoskit.connectors.sql.settings",
    "mysql-sink.md": "eoskit.connectors.sql.settings",
    "kafka-sink.md": "eoskit.connectors.kafka.sink_settings",
    "files-sink.md": "eoskit.connectors.files.settings",
    "operations.md": "eoskit.runtime.job.settings",
}
BEGIN, END = "<!-- options:begin -->\n", "<!-- options:end -->"


def table(module: str) -> str:
    """A data source's OPTIONS, or the runtime's SETTINGS (its ``docs()``)."""
    declared = importlib.import_module(module)
    rows = declared.OPTIONS.docs() if hasattr(declared, "OPTIONS") else declared.docs()
    return "\n".join(rows)


def main() -> None:
    for page, module in PAGES.items():
        path = DOCS / page
        text = path.read_text()
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        path.write_text(f"{head}{BEGIN}{table(module)}\n{END}{tail}")


if __name__ == "__main__":
    main()
