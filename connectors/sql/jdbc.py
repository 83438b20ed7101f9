"""Spark's JDBC writer options on the SQL sinks, so that a job written for
``format("jdbc")`` keeps its options when it moves to ``eoskit-postgres`` or
``eoskit-mysql``.

- ``url`` may be a JDBC URL (``jdbc:postgresql://host:5432/db?sslmode=require``,
  ``jdbc:mysql://...``, ``jdbc:mariadb://...``). It is translated here, once,
  into the SQLAlchemy URL the sink connects with; each of its parameters is
  mapped to the Python driver's by the database's ``JdbcDialect`` (in
  ``postgres/jdbc.py``, ``mysql/jdbc.py``) or refused by name. A parameter's
  value never appears in an error: it may be a password.
- ``user`` and ``password`` go into that URL, as Spark hands them to the
  JDBC driver.
- ``driver`` must be the database's JDBC driver class; nothing loads it (the
  sink speaks through psycopg or PyMySQL), but another class means the job
  was meant for another database.
- ``createTableColumnTypes`` and ``createTableOptions`` shape the table the
  sink creates (``column_types``, and the dialect's ``table_options``),
  both read by a grammar: no text of theirs reaches SQL unchecked.
- ``isolationLevel`` and ``queryTimeout`` set each task's transaction.
- ``batchsize`` is accepted and changes nothing: the sinks size their round
  trips themselves (see its help).
- The options of Spark's JDBC *reader*, of its overwrite mode and of
  Kerberos are refused by name with what to do instead (``REFUSED``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from eoskit.core.options import (
    Option,
    OptionError,
    parse_choice,
    parse_non_negative_int,
    parse_positive_int,
    parse_str,
)


USER = Option("user", parse_str, None,
              "The database user, as Spark's JDBC writer takes it (goes into the URL).")
PASSWORD = Option("password", parse_str, None,
                  "The user's password (goes into the URL). Never printed.", secret=True)
DRIVER = Option("driver", parse_str, None,
                "Spark's JDBC driver class. Accepted if it is this database's driver "
                "(`org.postgresql.Driver`; `com.mysql.cj.jdbc.Driver`, `com.mysql.jdbc.Driver`, "
                "`org.mariadb.jdbc.Driver`); nothing loads it, the sink writes through its "
                "Python driver.")
BATCHSIZE = Option("batchsize", parse_positive_int, None,
                   "Spark's rows per JDBC round trip. Accepted, and changes nothing: "
                   "PostgreSQL takes a task's rows in one COPY stream, MySQL in multi-row "
                   "INSERTs of up to 4 MiB (half of `max_allowed_packet` when that is smaller).")
_LEVELS = parse_choice("READ_UNCOMMITTED", "READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE")


def _parse_isolation(text: str) -> str:
    if text.strip().upper() == "NONE":
        raise ValueError("NONE turns transactions off, and the sinks' exactly-once rests on "
                         "them: pick a level, or remove the option")
    return _LEVELS(text)


ISOLATION_LEVEL = Option(
    "isolationLevel", _parse_isolation, None,
    "The isolation level of each task's transaction, as Spark names it; unset, the "
    "server's default. `NONE` is refused: the sinks' exactly-once rests on transactions.")
QUERY_TIMEOUT = Option(
    "queryTimeout", parse_non_negative_int, 0,
    "Seconds a task's statement may run; 0, no limit. PostgreSQL: the transaction's "
    "`statement_timeout`. MySQL/MariaDB: PyMySQL's read and write timeouts on the "
    "sink's sessions (a statement unanswered that long fails the task and closes its "
    "session, so the server rolls its transaction back).")
CREATE_TABLE_COLUMN_TYPES = Option(
    "createTableColumnTypes", parse_str, None,
    "Column types for a table the sink creates, instead of the defaults, as in Spark: "
    "`name CHAR(64), comments VARCHAR(1024)`; each a Spark SQL type (BOOLEAN, TINYINT, "
    "SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL(p,s), DATE, TIMESTAMP, TIMESTAMP_NTZ, "
    "STRING, BINARY, CHAR(n), VARCHAR(n)) of a column the DataFrame has.")
TABLE_COMMENT = Option(
    "tableComment", parse_str, None,
    "A comment on a table the sink creates, as Spark's JDBC writer sets it (sent as a "
    "bound string, escaped by SQLAlchemy).")
CREATE_TABLE_OPTIONS = Option(
    "createTableOptions", parse_str, None,
    "Table options appended to the CREATE TABLE of a table the sink creates, as in Spark. "
    "PostgreSQL: `WITH (name = value, ...)` and `TABLESPACE name`; MySQL/MariaDB: "
    "`ENGINE`, `[DEFAULT] CHARSET` / `CHARACTER SET`, `COLLATE`, `ROW_FORMAT`, "
    "`KEY_BLOCK_SIZE`, `AUTO_INCREMENT` (each `= value`) and `COMMENT = '...'`. Anything "
    "else is refused: create the table yourself.")

OPTIONS = (USER, PASSWORD, DRIVER, BATCHSIZE, ISOLATION_LEVEL, QUERY_TIMEOUT,
           CREATE_TABLE_COLUMN_TYPES, CREATE_TABLE_OPTIONS, TABLE_COMMENT)

_READER = ("an option of Spark's JDBC reader; eoskit's SQL sinks only write: "
           "remove it")
_KERBEROS = ("Kerberos logins are not supported by the sinks' Python drivers here: log in "
             "with `user` and `password` (or the URL's), and remove it")
#: Spark JDBC options the sinks do not take, and what to do instead.
REFUSED: Mapping[str, str] = {
    "truncate": "it applies to Spark's overwrite save mode, and a streaming sink never "
                "overwrites (it appends, or upserts with mode=upsert): remove it",
    "cascadeTruncate": "it applies to Spark's overwrite save mode, and a streaming sink "
                       "never overwrites: remove it",
    "numPartitions": "each Spark partition writes through its own connection: to bound "
                     "the connections, repartition the DataFrame before writing "
                     "(df.coalesce(n)), and remove it",
    "sessionInitStatement": "the sink sets up its sessions itself and pins what its "
                            "statements rely on (character set, time zone, sql_mode); "
                            "PostgreSQL session settings can go in the URL "
                            "(options=-c name=value): remove it",
    "query": _READER, "prepareQuery": _READER, "partitionColumn": _READER,
    "lowerBound": _READER, "upperBound": _READER, "fetchsize": _READER,
    "customSchema": _READER, "pushDownPredicate": _READER, "pushDownAggregate": _READER,
    "pushDownLimit": _READER, "pushDownOffset": _READER, "pushDownTableSample": _READER,
    "preferTimestampNTZ": _READER, "hint": _READER,
    "keytab": _KERBEROS, "principal": _KERBEROS, "refreshKrb5Config": _KERBEROS,
    "connectionProvider": "the sinks connect through their Python drivers, not a JDBC "
                          "connection provider: remove it",
}

#: Isolation levels as SQL spells them (never user text).
ISOLATION_SQL: Mapping[str, str] = {
    "READ_UNCOMMITTED": "READ UNCOMMITTED", "READ_COMMITTED": "READ COMMITTED",
    "REPEATABLE_READ": "REPEATABLE READ", "SERIALIZABLE": "SERIALIZABLE",
}


# -- JDBC URLs ------------------------------------------------------------------


@dataclass(frozen=True)
class JdbcDialect:
    """How one database's JDBC URLs and options map to its Python driver."""

    #: The database, for errors ("PostgreSQL").
    database: str
    #: JDBC subprotocol -> SQLAlchemy backend (``jdbc:mariadb:`` -> ``mariadb``).
    subprotocols: Mapping[str, str]
    #: The database's JDBC driver classes (the ``driver`` option).
    drivers: tuple[str, ...]
    #: JDBC URL parameter (as the JDBC driver spells it, matched in any case)
    #: -> a function of its value giving the SQLAlchemy URL's query keys.
    parameters: Mapping[str, Callable[[str], Mapping[str, str]]]
    #: Parameters accepted that change nothing here, each with why.
    no_effect: Mapping[str, str] = field(default_factory=dict)
    #: Parameters refused, each with what to do instead.
    refused: Mapping[str, str] = field(default_factory=dict)
    #: Parameters read before the others, so that a more precise one given
    #: too wins (PostgreSQL's ``ssl=true`` against ``sslmode``).
    weaker: tuple[str, ...] = ()
    #: The SQLAlchemy URL's query keys for ``queryTimeout`` seconds (None:
    #: the dialect's writer applies it itself).
    query_timeout: Callable[[int], Mapping[str, str]] | None = None
    #: ``createTableOptions`` -> SQLAlchemy ``Table`` keyword arguments (as
    #: pairs, so that settings stay hashable and picklable).
    table_options: Callable[[str], tuple[tuple[str, object], ...]] = lambda text: ()

    def translate(self, jdbc_url: str) -> URL:
        """A ``jdbc:`` URL as the SQLAlchemy URL the sink connects with."""
        sub, sep, rest = jdbc_url[len("jdbc:"):].partition("://")
        backend = self.subprotocols.get(sub.lower()) if sep else None
        if backend is None:
            schemes = ", ".join(f"jdbc:{s}://" for s in self.subprotocols)
            raise OptionError(f"option 'url': a JDBC URL for the {self.database} sink starts "
                              f"with {schemes} (host:port/database?parameters)")
        location, _, query = rest.partition("?")
        if not query and ";" in location:  # host/db;name=value;... (MariaDB's form)
            location, _, query = location.partition(";")
        if "," in location.partition("/")[0].rpartition("@")[2]:
            raise OptionError(f"option 'url': the JDBC URL names several hosts; the "
                              f"{self.database} sink connects to one (give its host:port)")
        parts = urlsplit("//" + location)  # userinfo, host, [IPv6], port: urllib's parse
        try:
            port = parts.port
        except ValueError:
            raise OptionError("option 'url': the JDBC URL's port is not a number") from None
        username = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password else None
        keys: dict[str, str] = {}
        pairs = parse_qsl(query.replace(";", "&"), keep_blank_values=True)
        weaker = {w.lower() for w in self.weaker}
        for name, value in sorted(pairs, key=lambda pair: pair[0].lower() not in weaker):
            lowered = name.lower()
            if lowered == "user":
                username = value
            elif lowered == "password":
                password = value
            elif (mapped := _get(self.parameters, lowered)) is not None:
                keys.update(mapped(value))
            elif _get(self.no_effect, lowered) is None:
                why = _get(self.refused, lowered)
                known = ", ".join(sorted({"user", "password", *self.parameters, *self.no_effect}))
                raise OptionError(
                    f"option 'url': the JDBC URL parameter {name!r} is not taken by the "
                    f"{self.database} sink" + (f": {why}" if why else
                                               f"; it takes {known}, or give a SQLAlchemy URL"))
        return URL.create(backend, username=username or None, password=password,
                          host=parts.hostname or None, port=port,
                          database=unquote(parts.path.lstrip("/")) or None, query=keys)


def _get(table: Mapping[str, object], lowered: str):
    for name, value in table.items():
        if name.lower() == lowered:
            return value
    return None


def connection_url(text: str, raw: Mapping[str, str], dialect: JdbcDialect,
                   query_timeout: int) -> str:
    """The SQLAlchemy URL (as text) for option ``url`` = ``text``, a
    SQLAlchemy or a JDBC URL, with the ``user`` and ``password`` options in it
    and the dialect's query keys for ``queryTimeout``."""
    if text.lower().startswith("jdbc:"):
        url = dialect.translate(text)
    else:
        try:
            url = make_url(text)
        except ArgumentError:
            raise OptionError("option 'url' is neither a SQLAlchemy URL "
                              "(dialect+driver://user:password@host:port/db) nor a JDBC one "
                              "(jdbc:...)") from None
    user, password = USER.read(raw), PASSWORD.read(raw)
    if user is not None:
        if url.username and url.username != user:
            raise OptionError("option 'user' names another user than the URL does: give it once")
        url = url.set(username=user)
    if password is not None:
        if url.password and url.password != password:
            raise OptionError("option 'password' differs from the URL's: give it once")
        url = url.set(password=password)
    if query_timeout and dialect.query_timeout is not None:
        url = url.update_query_dict(
            {k: v for k, v in dialect.query_timeout(query_timeout).items() if k not in url.query})
    return url.render_as_string(hide_password=False)


def check_driver(raw: Mapping[str, str], dialect: JdbcDialect) -> None:
    driver = DRIVER.read(raw)
    if driver is not None and driver.strip() not in dialect.drivers:
        raise OptionError(f"option 'driver' = {driver.strip()!r} is not a {dialect.database} "
                          f"JDBC driver (this sink takes {', '.join(dialect.drivers)}): the "
                          "job was written for another database, or remove the option")


def table_kwargs(options: tuple[tuple[str, object], ...]) -> dict[str, object]:
    """A dialect's ``table_options`` as SQLAlchemy ``Table`` keywords (a
    value given as pairs, such as PostgreSQL's WITH parameters, a dict)."""
    return {k: dict(v) if isinstance(v, tuple) else v for k, v in options}


# -- createTableColumnTypes -------------------------------------------------------

#: Spark SQL type names createTableColumnTypes takes -> canonical name.
SPARK_TYPES: Mapping[str, str] = {
    "boolean": "boolean", "tinyint": "tinyint", "byte": "tinyint",
    "smallint": "smallint", "short": "smallint", "int": "int", "integer": "int",
    "bigint": "bigint", "long": "bigint", "float": "float", "real": "float",
    "double": "double", "date": "date", "timestamp": "timestamp",
    "timestamp_ltz": "timestamp", "timestamp_ntz": "timestamp_ntz", "string": "string",
    "binary": "binary", "decimal": "decimal", "dec": "decimal", "numeric": "decimal",
    "char": "char", "character": "char", "varchar": "varchar",
}
#: How many numbers in parentheses each type takes (min, max).
_PARAMETERS = {"decimal": (0, 2), "char": (1, 1), "varchar": (1, 1)}
_COLUMN = re.compile(
    r"\s*(?:`(?P<quoted>(?:[^`]|``)+)`|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
    r"\s+(?P<type>[A-Za-z_]+)\s*(?:\(\s*(?P<args>\d+(?:\s*,\s*\d+)?)\s*\))?\s*$")


@dataclass(frozen=True)
class ColumnType:
    """A column's type from ``createTableColumnTypes``: a canonical Spark
    type name and its numbers (``varchar``, (64,))."""

    name: str
    args: tuple[int, ...] = ()

    def __str__(self) -> str:
        return self.name.upper() + (f"({', '.join(map(str, self.args))})" if self.args else "")


def parse_column_types(text: str) -> tuple[tuple[str, ColumnType], ...]:
    """``name TYPE, ...`` as (column, type) pairs, in order."""
    pairs: list[tuple[str, ColumnType]] = []
    for part in _split_columns(text):
        match = _COLUMN.match(part)
        if match is None:
            raise OptionError(f"option 'createTableColumnTypes': {part.strip()!r} is not "
                              "`name TYPE` (e.g. `name VARCHAR(64)`)")
        column = match["bare"] or match["quoted"].replace("``", "`")
        name = SPARK_TYPES.get(match["type"].lower())
        if name is None:
            raise OptionError(f"option 'createTableColumnTypes': column {column!r}: "
                              f"{match['type']!r} is not a Spark SQL type this sink creates "
                              f"(one of {', '.join(sorted(set(SPARK_TYPES.values())))})")
        args = tuple(int(a) for a in (match["args"] or "").replace(" ", "").split(",") if a)
        low, high = _PARAMETERS.get(name, (0, 0))
        if not low <= len(args) <= high:
            raise OptionError(f"option 'createTableColumnTypes': column {column!r}: "
                              f"{match['type'].upper()} takes "
                              + ("no length" if high == 0 else f"{low} to {high} numbers"))
        if any(c.lower() == column.lower() for c, _ in pairs):
            raise OptionError(f"option 'createTableColumnTypes' names column {column!r} twice")
        pairs.append((column, ColumnType(name, args)))
    return tuple(pairs)


def _split_columns(text: str) -> list[str]:
    """Split at commas outside parentheses and backticks."""
    parts, depth, quoted, current = [], 0, False, []
    for char in text:
        if char == "`":
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
        if char == "," and depth == 0 and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    if not any(p.strip() for p in parts):
        raise OptionError("option 'createTableColumnTypes' is empty")
    return parts
