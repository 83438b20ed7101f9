"""MySQL's and MariaDB's JDBC URLs and ``createTableOptions``, for Spark
jobs moving to ``eoskit-mysql`` (see ``connectors/sql/jdbc.py``):
Connector/J's and MariaDB Connector/J's URL parameters as PyMySQL's (the
URL keys ``connection.py`` allows), and the table options MySQL's CREATE
TABLE takes, read by a grammar."""

from __future__ import annotations

import re

from eoskit.connectors.sql.jdbc import JdbcDialect
from eoskit.core.options import OptionError, parse_bool


def _milliseconds(*names: str):
    def mapped(value: str) -> dict[str, str]:
        try:
            seconds = int(value) / 1000
        except ValueError:
            raise OptionError(f"option 'url': a JDBC URL timeout ({', '.join(names)}) is not "
                              "a whole number of milliseconds") from None
        return {name: f"{seconds:g}" for name in names} if seconds > 0 else {}
    return mapped


def _use_ssl(value: str) -> dict[str, str]:
    if not parse_bool(value or "true"):
        return {"ssl_disabled": "true"}
    raise OptionError(_TLS)


#: sslMode (Connector/J's and MariaDB's spellings) -> PyMySQL's keys. The
#: modes that encrypt without verifying the server (REQUIRED, PREFERRED,
#: trust) are refused: PyMySQL encrypts only to verify.
_SSL_MODES = {
    "DISABLED": {"ssl_disabled": "true"}, "DISABLE": {"ssl_disabled": "true"},
    "VERIFY_CA": {"ssl_verify_cert": "true"}, "VERIFY-CA": {"ssl_verify_cert": "true"},
    "VERIFY_IDENTITY": {"ssl_verify_cert": "true", "ssl_verify_identity": "true"},
    "VERIFY-FULL": {"ssl_verify_cert": "true", "ssl_verify_identity": "true"},
}


def _ssl_mode(value: str) -> dict[str, str]:
    mapped = _SSL_MODES.get(value.strip().upper())
    if mapped is None:
        raise OptionError(_TLS)
    return mapped


_TLS = ("option 'url': the JDBC URL asks for TLS without verifying the server (useSSL=true, "
        "sslMode REQUIRED, PREFERRED or trust), which PyMySQL does not do: use sslMode=VERIFY_CA "
        "or VERIFY_IDENTITY (with serverSslCert=<CA PEM file> unless the system's CAs sign "
        "the server's certificate)")
_UTC = ("UTC", "GMT", "Z", "+00:00", "ETC/UTC")


def _utc_only(name: str):
    def mapped(value: str) -> dict[str, str]:
        if value.strip().upper() not in _UTC:
            raise OptionError(f"option 'url': the JDBC URL parameter {name!r} is refused unless "
                              "UTC: the sink writes Spark's timestamps as UTC (its sessions' "
                              "time_zone is +00:00)")
        return {}
    return mapped


def _utf8(value: str) -> dict[str, str]:
    if value.strip().lower().replace("-", "") not in ("utf8", "utf8mb4"):
        raise OptionError("option 'url': the JDBC URL parameter 'characterEncoding' is refused "
                          "unless UTF-8: the sink's sessions speak utf8mb4")
    return {}


_KEYWORDS = {
    "ENGINE": "mysql_engine", "CHARSET": "mysql_charset", "CHARACTER SET": "mysql_charset",
    "COLLATE": "mysql_collate", "ROW_FORMAT": "mysql_row_format",
    "KEY_BLOCK_SIZE": "mysql_key_block_size", "AUTO_INCREMENT": "mysql_auto_increment",
}
_OPTION = re.compile(
    r"^(?:DEFAULT\s+)?(?P<name>ENGINE|CHARSET|CHARACTER\s+SET|COLLATE|ROW_FORMAT|"
    r"KEY_BLOCK_SIZE|AUTO_INCREMENT)\s*=?\s*(?P<value>[A-Za-z0-9_]+)\s*,?\s*"
    r"|^COMMENT\s*=?\s*'(?P<comment>(?:[^'\\]|'')*)'\s*,?\s*", re.IGNORECASE)


def table_options(text: str) -> tuple[tuple[str, object], ...]:
    """MySQL's table options, as SQLAlchemy's ``mysql_*`` keywords (each
    value a word or a number) and ``comment`` (a quoted string)."""
    rest, options = text.strip(), {}
    while rest:
        match = _OPTION.match(rest)
        if match is None:
            raise OptionError(
                f"option 'createTableOptions': {rest[:40]!r} is not a table option this sink "
                "takes (ENGINE, [DEFAULT] CHARSET / CHARACTER SET, COLLATE, ROW_FORMAT, "
                "KEY_BLOCK_SIZE, AUTO_INCREMENT = value; COMMENT = '...'): create the table "
                "yourself for anything else")
        if match["name"]:
            key = _KEYWORDS[" ".join(match["name"].upper().split())]
            value: object = match["value"]
        else:
            key, value = "comment", match["comment"].replace("''", "'")
        if key in options:
            raise OptionError(f"option 'createTableOptions' gives {key.removeprefix('mysql_')} twice")
        options[key] = value
        rest = rest[match.end():].strip()
    return tuple(options.items())


_NOTHING = "the sink already sends multi-row statements and prepares none per row"
_SESSION = ("the sink sets up its sessions itself and pins what its statements rely on "
            "(character set, sql_mode, time zone)")

JDBC = JdbcDialect(
    database="MySQL",
    subprotocols={"mysql": "mysql", "mariadb": "mariadb"},
    drivers=("com.mysql.cj.jdbc.Driver", "com.mysql.jdbc.Driver", "org.mariadb.jdbc.Driver"),
    parameters={
        "connectTimeout": _milliseconds("connect_timeout"),
        "socketTimeout": _milliseconds("read_timeout", "write_timeout"),
        "useSSL": _use_ssl, "useSsl": _use_ssl, "sslMode": _ssl_mode,
        "serverSslCert": lambda value: {"ssl_ca": value},
        "serverTimezone": _utc_only("serverTimezone"),
        "connectionTimeZone": _utc_only("connectionTimeZone"),
        "characterEncoding": _utf8,
    },
    no_effect={
        "rewriteBatchedStatements": _NOTHING, "useServerPrepStmts": _NOTHING,
        "cachePrepStmts": _NOTHING, "prepStmtCacheSize": _NOTHING,
        "prepStmtCacheSqlLimit": _NOTHING, "useUnicode": "the sink's sessions speak utf8mb4",
        "allowPublicKeyRetrieval": "PyMySQL logs in with caching_sha2_password itself",
        "zeroDateTimeBehavior": "it applies to reading rows, which the sink does not do",
    },
    refused={
        "sessionVariables": _SESSION, "initSql": _SESSION,
        "allowLoadLocalInfile": "the sink never lets the server read the client's files",
        "allowMultiQueries": "the sink sends one statement at a time",
        "trustCertificateKeyStoreUrl": "convert the trust store to PEM and give a SQLAlchemy "
                                       "URL with ssl_ca=<PEM file>",
        "clientCertificateKeyStoreUrl": "convert the key store to PEM and give a SQLAlchemy "
                                        "URL with ssl_cert and ssl_key",
    },
    query_timeout=lambda seconds: {"read_timeout": str(seconds), "write_timeout": str(seconds)},
    table_options=table_options,
)
