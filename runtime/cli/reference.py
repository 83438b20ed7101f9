"""The command line's reference, read off its parser: every verb, its help
and every option of it, as docs/runtime.md shows them (``scripts/options_docs.py``
writes the table, ``tests/test_cli_conventions.py`` checks it), so that the
page cannot drift from the code. Runs wherever the docs are built; imports
no PySpark (the parser does not)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

#: On every verb (``add_everywhere``): listed once, not per verb.
GLOBAL_DESTS = frozenset({"help", "verbose", "log_format", "version"})
#: ``eoskit run``'s setting flags: their own table in docs/operations.md.
SETTING_PREFIX = "setting_"
SETTINGS_LINK = "operations.md#settings-flink-checkpointing-and-restart-options"


def verbs(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = (), help: str = ""
          ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """Every leaf verb below ``parser``: (its words, its parser, its help)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser, help
        return
    helps = {a.dest: a.help or "" for a in subs[0]._choices_actions}
    for name, sub in subs[0].choices.items():
        yield from verbs(sub, (*prefix, name), helps.get(name, ""))


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """A verb's own arguments as its help shows them: no global ones, no hidden ones."""
    return [a for a in parser._actions if a.dest not in GLOBAL_DESTS and a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._SubParsersAction)]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _rows(words: tuple[str, ...], parser: argparse.ArgumentParser, help: str) -> Iterator[str]:
    formatter = parser._get_formatter()
    yield f"| `eoskit {' '.join(words)}` | | {_cell(help)} |"
    settings = []
    for action in options(parser):
        if action.dest.startswith(SETTING_PREFIX):
            settings.append(f"`{action.option_strings[-1]}`")
            continue
        invocation = formatter._format_action_invocation(action)
        meaning = formatter._expand_help(action) if action.help else ""
        if action.required and action.option_strings:
            meaning += " (required)"
        yield f"| | `{_cell(invocation)}` | {_cell(meaning)} |"
    if settings:
        yield (f"| | {', '.join(settings)} | one flag per setting, over the job file's: "
               f"[the settings' table]({SETTINGS_LINK}) |")


def cli_docs(parser: argparse.ArgumentParser) -> list[str]:
    """The Markdown rows of docs/runtime.md's table of every verb's options."""
    rows = ["| verb | option | meaning |", "| --- | --- | --- |"]
    for words, sub, help in verbs(parser):
        rows.extend(_rows(words, sub, help))
    return rows
