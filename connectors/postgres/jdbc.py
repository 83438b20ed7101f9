"""PostgreSQL's JDBC URLs and ``createTableOptions``, for Spark jobs moving
to ``eoskit-postgres`` (see ``connectors/sql/jdbc.py``): pgjdbc's URL
parameters as libpq's, and the table options PostgreSQL's CREATE TABLE
takes after its columns, read by a grammar."""

from __future__ import annotations

import re

from eoskit.connectors.sql.jdbc import JdbcDialect
from eoskit.core.options import OptionError, parse_bool


def _same(name: str):
    return lambda value: {name: value}


def _ssl(value: str) -> dict[str, str]:
    # pgjdbc: ssl=true verifies the server fully unless sslmode says otherwise.
    try:
        return {"sslmode": "verify-full" if parse_bool(value or "true") else "disable"}
    except ValueError:
        raise OptionError("option 'url': the JDBC URL parameter 'ssl' is not true or false") from None


def _keepalives(value: str) -> dict[str, str]:
    return {"keepalives": "1" if parse_bool(value) else "0"}


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_WITH = re.compile(r"^WITH\s*\((?P<params>[^()]*)\)\s*", re.IGNORECASE)
_PARAM = re.compile(rf"^\s*(?P<name>{_NAME}(?:\.{_NAME})?)\s*=\s*(?P<value>[A-Za-z0-9_.]+)\s*$")
_TABLESPACE = re.compile(rf"^TABLESPACE\s+(?P<name>{_NAME})\s*", re.IGNORECASE)


def table_options(text: str) -> tuple[tuple[str, object], ...]:
    """``WITH (name = value, ...)`` and ``TABLESPACE name``, in any order,
    as SQLAlchemy's ``postgresql_with`` / ``postgresql_tablespace``."""
    rest, options = text.strip(), {}
    while rest:
        if (match := _WITH.match(rest)) and "postgresql_with" not in options:
            params = {}
            for part in match["params"].split(","):
                param = _PARAM.match(part)
                if param is None:
                    raise OptionError(f"option 'createTableOptions': {part.strip()!r} in WITH "
                                      "(...) is not `name = value` (a word or a number)")
                params[param["name"]] = param["value"]
            options["postgresql_with"] = params
        elif (match := _TABLESPACE.match(rest)) and "postgresql_tablespace" not in options:
            options["postgresql_tablespace"] = match["name"]
        else:
            raise OptionError(
                f"option 'createTableOptions': PostgreSQL table options here are WITH "
                f"(name = value, ...) and TABLESPACE name; {rest[:40]!r} is neither: create "
                "the table yourself for anything else")
        rest = rest[match.end():].strip()
    return tuple((k, tuple(v.items()) if isinstance(v, dict) else v) for k, v in options.items())


JDBC = JdbcDialect(
    database="PostgreSQL",
    subprotocols={"postgresql": "postgresql"},
    drivers=("org.postgresql.Driver",),
    parameters={
        "ssl": _ssl, "sslmode": _same("sslmode"), "sslrootcert": _same("sslrootcert"),
        "sslcert": _same("sslcert"), "sslkey": _same("sslkey"),
        "sslpassword": _same("sslpassword"), "ApplicationName": _same("application_name"),
        "connectTimeout": _same("connect_timeout"), "loginTimeout": _same("connect_timeout"),
        "options": _same("options"), "tcpKeepAlive": _keepalives,
    },
    weaker=("ssl",),
    no_effect={
        "reWriteBatchedInserts": "the sink already sends a task's rows in one COPY stream",
        "stringtype": "the sink sends text by COPY, which the server casts to the column's "
                      "type (uuid, json, an enum) as stringtype=unspecified lets JDBC do",
        "prepareThreshold": "the sink prepares no statements per row",
        "binaryTransfer": "the sink sends rows by COPY",
        "defaultRowFetchSize": "the sink reads no rows back",
    },
    refused={
        "currentSchema": "name the schema in dbtable (schema.table)",
        "socketTimeout": "use the option queryTimeout",
        "targetServerType": "the sink connects to the one host of the URL",
        "loadBalanceHosts": "the sink connects to the one host of the URL",
        "sslfactory": "give sslmode and sslrootcert (PEM) instead",
        "gssEncMode": "Kerberos logins are not supported: use a user and password",
        "kerberosServerName": "Kerberos logins are not supported: use a user and password",
        "jaasLogin": "Kerberos logins are not supported: use a user and password",
    },
    table_options=table_options,
)
