"""``dbtable`` as SQL text: ``table`` or ``schema.table``, each part bare or
quoted, read the way the database would read it.

Spark's JDBC source pastes ``dbtable`` into its SQL, so Spark users write
it as SQL: ``orders``, ``shop.orders``, ``"OrderItems"``,
``"my schema"."Order.Items"`` (a doubled quote inside quotes is one quote),
and on MySQL ``` `OrderItems` ```. eoskit never pastes it: this parser
turns the text into names, and every statement quotes them again through
the driver (``psycopg.sql.Identifier``, SQLAlchemy's identifier preparer).
Whether a part was quoted is kept, because the database folds bare names
(PostgreSQL to lower case) and leaves quoted ones as they are; how each
database folds is in ``tables.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Every character either database treats as an identifier quote.
QUOTES = '"`'
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_QUOTE_NAMES = {'"': "double quotes", "`": "backticks"}
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class IdentifierError(ValueError):
    """Text that is not a (qualified) identifier; the message says where."""


@dataclass(frozen=True)
class Part:
    """One name of a qualified identifier, its quotes removed."""

    name: str
    quoted: bool = False


@dataclass(frozen=True)
class TableName:
    """``dbtable`` parsed: an optional schema (a database, on MySQL) and a table."""

    schema: Part | None
    table: Part
    text: str

    def __str__(self) -> str:
        return self.text


def ascii_lower(name: str) -> str:
    """PostgreSQL's folding of a bare name: ASCII letters only (in a
    multibyte encoding such as UTF8 it leaves every other letter alone)."""
    return name.translate(_ASCII_LOWER)


def display(parts: list[str | None], quote: str = '"', folds: bool = False) -> str:
    """Names for an error message, quoted only where they would not read
    back as the same name bare (``folds``: bare names are lower-cased)."""
    shown = []
    for name in parts:
        if name is None:
            continue
        plain = _PLAIN.fullmatch(name) is not None and (not folds or ascii_lower(name) == name)
        shown.append(name if plain else quote + name.replace(quote, quote * 2) + quote)
    return ".".join(shown)


def parse_parts(text: str, quotes: str = QUOTES) -> list[Part]:
    """The dot-separated parts of ``text``; ``quotes`` are the quote
    characters this database accepts. Whitespace around a part is allowed,
    as in SQL; inside a bare part it is not."""
    parts: list[Part] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            raise IdentifierError("a name is missing" + (f" after {text[:i].strip()!r}" if parts else ""))
        char = text[i]
        if char in quotes:
            opened = i + 1
            end = i + 1
            name = []
            while True:
                close = text.find(char, end)
                if close < 0:
                    raise IdentifierError(f"the quote {char} opened at position {opened} is never closed")
                name.append(text[end:close])
                if text.startswith(char * 2, close):
                    name.append(char)
                    end = close + 2
                    continue
                i = close + 1
                break
            if not "".join(name):
                raise IdentifierError(f"the quoted name at position {opened} is empty")
            parts.append(Part("".join(name), quoted=True))
        elif char in QUOTES:
            close = text.find(char, i + 1)
            example = text[i + 1:close] if close > i + 1 else "Name"
            raise IdentifierError(
                f"{char} does not quote names in this database: use "
                + " or ".join(_QUOTE_NAMES[q] for q in quotes)
                + f", e.g. {quotes[0]}{example.replace(quotes[0], quotes[0] * 2)}{quotes[0]}"
            )
        elif char == ".":
            raise IdentifierError(f"a name is missing before the dot at position {i + 1}")
        else:
            start = i
            while i < n and text[i] != "." and text[i] not in QUOTES and not text[i].isspace():
                i += 1
            parts.append(Part(text[start:i]))
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            return parts
        if text[i] != ".":
            got = text[i:].split(".")[0].strip()
            if parts[-1].quoted:
                raise IdentifierError(f"unexpected {got!r} after the quoted name {parts[-1].name!r}")
            whole = f"{parts[-1].name} {got}" if text[i - 1].isspace() else parts[-1].name + got
            q = quotes[0]
            raise IdentifierError(
                f"unexpected {got!r} after the name {parts[-1].name!r}: quote a name that holds "
                f"spaces or quotes, e.g. {q}{whole.replace(q, q * 2)}{q}"
            )
        i += 1


def parse_table_name(text: str, quotes: str = QUOTES) -> TableName:
    """``table`` or ``schema.table``."""
    parts = parse_parts(text, quotes)
    if len(parts) > 2:
        raise IdentifierError(
            f"{len(parts)} names; give `table` or `schema.table` (quote a name that holds a "
            f"dot: {quotes[0]}Order.Items{quotes[0]})"
        )
    schema = parts[0] if len(parts) == 2 else None
    return TableName(schema, parts[-1], text.strip())
