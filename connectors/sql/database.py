"""One SQL database, declared once: what the SQL sink's shared parts
(``sql/sink.py``, ``sql/datasource.py``, ``sql/settings.py``,
``sql/scratch.py``) need to know of it.

A dialect's ``transactions.py`` declares one ``SqlDatabase`` (``DATABASE``)
beside its sink class; its statements are in the writer and committer
classes the declaration names, its checks in its ``checks.py``, which of its
driver's errors mean a lost connection in its ``failures.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eoskit.connectors.sql.committer import SqlCommitter
    from eoskit.connectors.sql.jdbc import JdbcDialect
    from eoskit.connectors.sql.writer import SqlWriter


@dataclass(frozen=True)
class SqlDatabase:
    #: The database as messages name it (``PostgreSQL``).
    name: str
    #: The SQLAlchemy URL backends the sink takes (``postgresql``).
    backends: tuple[str, ...]
    #: The SQLAlchemy driver the sink connects with (``postgresql+psycopg``).
    driver: str
    #: The server's port when a URL names none.
    default_port: int
    #: How Spark's JDBC URLs and options map to this database (``sql/jdbc.py``).
    jdbc: "JdbcDialect"
    #: The quotes ``dbtable`` may use, the first the one names are written with.
    identifier_quotes: str
    #: The statement that creates table ``{new}`` like table ``{old}`` (both
    #: quoted by the driver): a scratch copy for ``eoskit chaos`` (``sql/scratch.py``).
    create_like: str
    #: A task's statements (``sql/writer.py``); eoskit makes one of each kind from it.
    writer: "type[SqlWriter]"
    #: The driver's statements for prepared transactions (``sql/committer.py``).
    committer: "type[SqlCommitter]"
    #: Whether a driver error means the connection is lost (its ``failures.lost``).
    lost: Callable[[BaseException], bool]
