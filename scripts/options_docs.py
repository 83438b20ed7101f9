"""Regenerate the option tables in docs/ from the declarations.

Each page marks its table with ``<!-- options:begin -->`` /
``<!-- options:end -->``; ``PAGES`` says which declaration fills it.
``tests/test_kafka_settings.py`` and ``tests/test_files_settings.py`` fail
when a table is out of date. The command line's tables are read off the
code the same way (``BLOCKS``: every verb's options from its parser in
docs/runtime.md, the exit codes in docs/operations.md, the container image
settings in docs/dev-services.md);
``tests/test_cli_conventions.py`` checks them.

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


def cli_table() -> str:
    from eoskit.runtime.cli.main import build_parser
    from eoskit.runtime.cli.reference import cli_docs

    return "\n".join(cli_docs(build_parser()))


def exit_codes_table() -> str:
    from eoskit.runtime.cli.errors import exit_code_docs

    return "\n".join(exit_code_docs())


def image_settings_table() -> str:
    from eoskit.runtime.devtools.services.docker import image_settings_docs

    return "\n".join(image_settings_docs())


#: (page, marker) -> what fills ``<!-- marker:begin -->`` ... ``<!-- marker:end -->``.
BLOCKS = {("runtime.md", "cli"): cli_table, ("operations.md", "exit-codes"): exit_codes_table,
          ("dev-services.md", "images"): image_settings_table}


def replace_block(path: Path, marker: str, body: str) -> None:
    begin, end = f"<!-- {marker}:begin -->\n", f"<!-- {marker}:end -->"
    text = path.read_text()
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}{body}\n{end}{tail}")


def main() -> None:
    for page, module in PAGES.items():
        replace_block(DOCS / page, "options", table(module))
    for (page, marker), fill in BLOCKS.items():
        replace_block(DOCS / page, marker, fill())


if __name__ == "__main__":
    main()
