"""MySQL spelling: identifiers quoted by SQLAlchemy's MySQL dialect, and
server errors as numbers and readable text (PyMySQL wraps both in args)."""

from __future__ import annotations

from sqlalchemy.dialects.mysql import pymysql as mysql_pymysql

_PREPARER = mysql_pymysql.dialect().identifier_preparer


def quote(name: str) -> str:
    """An identifier in backticks (an embedded backtick doubled), always
    quoted: user-given names never reach SQL any other way."""
    return _PREPARER.quote_identifier(name)


def qualified(schema: str | None, name: str) -> str:
    """`schema`.`name`, or `name` in the connection's database."""
    return ".".join(quote(part) for part in ([schema] if schema else []) + [name])


def error_code(exc: BaseException | None) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def error_text(exc: BaseException | None) -> str:
    """The server's message and number, without PyMySQL's tuple wrapping."""
    args = getattr(exc, "args", ())
    if len(args) >= 2 and isinstance(args[0], int):
        return f"{args[1]} (error {args[0]})"
    return str(exc)


def server_version(info: str) -> tuple[bool, tuple[int, ...]]:
    """(is MariaDB, version) from the handshake's version string. MariaDB
    10.x announces itself as ``5.5.5-10.11.19-MariaDB...`` for old clients."""
    mariadb = "mariadb" in info.lower()
    text = info[len("5.5.5-"):] if mariadb and info.startswith("5.5.5-") else info
    parts = []
    for piece in text.split("-")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return mariadb, tuple(parts)
