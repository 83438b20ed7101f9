"""Spark's JDBC writer options on the SQL sinks (connectors/sql/jdbc.py):
JDBC URLs translated, every writer option taken or refused by name, the
table a sink creates shaped by createTableColumnTypes/createTableOptions.
Pure parsing and SQLAlchemy's DDL compiler; the real servers are in
integration_tests/test_spark_migration.py."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from pyspark.sql import types as T
from sqlalchemy.dialects import mysql as mysql_dialect
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.engine import make_url
from sqlalchemy.schema import CreateTable

from eoskit.connectors.mysql.connection import check_url as mysql_check_url
from eoskit.connectors.mysql.transactions import MySQLTransactions
from eoskit.connectors.postgres.transactions import PostgresTransactions
from eoskit.connectors.sql.jdbc import REFUSED, ColumnType, parse_column_types, table_kwargs
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.connectors.sql.types import can_fill, declared_type
from eoskit.core.options import OptionError

SECRET = "s3cr3t-Value"


def pg(**options):
    return SqlSinkSettings.parse({"dbtable": "t", **options}, "eoskit-postgres", PostgresTransactions)


def my(**options):
    return SqlSinkSettings.parse({"dbtable": "t", **options}, "eoskit-mysql", MySQLTransactions)


def refused(parse, **options) -> str:
    with pytest.raises(OptionError) as err:
        parse(**options)
    text = str(err.value)
    assert SECRET not in text
    return text


# -- JDBC URLs --------------------------------------------------------------------


def test_a_spark_jdbc_writer_s_options_are_taken_as_they_are():
    settings = pg(url="jdbc:postgresql://db.example:5433/shop?sslmode=require&ApplicationName=etl",
                  user="writer", password=SECRET, driver="org.postgresql.Driver",
                  batchsize="1000", isolationLevel="READ_COMMITTED", queryTimeout="30")
    url = make_url(settings.url)
    assert (url.get_backend_name(), url.host, url.port, url.database) == ("postgresql", "db.example", 5433, "shop")
    assert (url.username, url.password) == ("writer", SECRET)
    assert dict(url.query) == {"sslmode": "require", "application_name": "etl"}
    assert settings.isolation_level == "READ COMMITTED" and settings.query_timeout == 30
    assert settings.create_table  # Spark's JDBC writer creates a missing table


def test_ssl_true_is_pgjdbc_s_verify_full_unless_sslmode_says_otherwise():
    assert make_url(pg(url="jdbc:postgresql://h/db?ssl=true").url).query["sslmode"] == "verify-full"
    for query in ("ssl=true&sslmode=require", "sslmode=require&ssl=true"):
        assert make_url(pg(url=f"jdbc:postgresql://h/db?{query}").url).query["sslmode"] == "require"


def test_credentials_in_the_jdbc_url_itself():
    url = make_url(pg(url=f"jdbc:postgresql://h:5432/db?user=u&password={SECRET}").url)
    assert (url.username, url.password, url.port) == ("u", SECRET, 5432)
    url = make_url(my(url="jdbc:mysql://app:p%40ss,1@[::1]:3307/shop").url)
    assert (url.username, url.password, url.host, url.port, url.database) == (
        "app", "p@ss,1", "::1", 3307, "shop")
    assert "not a number" in refused(pg, url="jdbc:postgresql://h:54x/db")


def test_a_parameter_the_sink_cannot_honour_is_refused_by_name_never_by_value():
    text = refused(pg, url=f"jdbc:postgresql://h/db?password={SECRET}&cancelSignalTimeout={SECRET}")
    assert "'cancelSignalTimeout'" in text and "sslmode" in text  # what it takes instead
    text = refused(pg, url="jdbc:postgresql://h/db?currentSchema=sales")
    assert "'currentSchema'" in text and "dbtable (schema.table)" in text


def test_driver_performance_parameters_are_accepted():
    url = make_url(pg(url="jdbc:postgresql://h/db?reWriteBatchedInserts=true&stringtype=unspecified").url)
    assert dict(url.query) == {}


def test_several_hosts_a_wrong_subprotocol_and_a_wrong_driver_are_refused():
    assert "several hosts" in refused(pg, url="jdbc:postgresql://a:5432,b:5432/db")
    assert "jdbc:postgresql://" in refused(pg, url="jdbc:mysql://h/db")
    text = refused(pg, url="jdbc:postgresql://h/db", driver="com.mysql.cj.jdbc.Driver")
    assert "option 'driver'" in text and "org.postgresql.Driver" in text


def test_user_and_password_given_twice_differently_are_refused():
    assert "option 'user'" in refused(pg, url="postgresql://a@h/db", user="b")
    assert "option 'password'" in refused(pg, url="postgresql://a:x@h/db", password=SECRET)
    # The same user twice, or user/password options on a SQLAlchemy URL, are fine.
    assert make_url(pg(url="postgresql://h/db", user="a", password=SECRET).url).password == SECRET


def test_mysql_and_mariadb_jdbc_urls():
    settings = my(url="jdbc:mysql://h:3307/shop?useSSL=false&connectTimeout=5000&socketTimeout=20000"
                      "&serverTimezone=UTC&characterEncoding=UTF-8&rewriteBatchedStatements=true",
                  user="u", password=SECRET, driver="com.mysql.cj.jdbc.Driver")
    url = make_url(settings.url)
    assert (url.get_backend_name(), url.port, url.database) == ("mysql", 3307, "shop")
    assert dict(url.query) == {"ssl_disabled": "true", "connect_timeout": "5",
                               "read_timeout": "20", "write_timeout": "20"}
    mysql_check_url(url)  # every key translated is one the sink's sessions accept
    assert make_url(my(url="jdbc:mariadb://h/db", driver="org.mariadb.jdbc.Driver").url) \
        .get_backend_name() == "mariadb"


def test_mysql_parameters_that_would_unpin_the_session_or_weaken_tls_are_refused():
    assert "'sessionVariables'" in refused(my, url="jdbc:mysql://h/db?sessionVariables=sql_mode=''")
    assert "VERIFY_CA" in refused(my, url="jdbc:mysql://h/db?useSSL=true")
    assert "UTC" in refused(my, url="jdbc:mysql://h/db?serverTimezone=Europe/Paris")
    assert "UTF-8" in refused(my, url="jdbc:mysql://h/db?characterEncoding=gbk")


def test_query_timeout_becomes_mysql_s_socket_timeouts_unless_the_url_sets_them():
    url = make_url(my(url="mysql://u@h/db", queryTimeout="15").url)
    assert (url.query["read_timeout"], url.query["write_timeout"]) == ("15", "15")
    url = make_url(my(url="mysql://u@h/db?read_timeout=60", queryTimeout="15").url)
    assert url.query["read_timeout"] == "60"
    assert "read_timeout" not in make_url(pg(url="postgresql://h/db", queryTimeout="15").url).query


# -- writer options ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_spark_jdbc_options_the_sinks_do_not_take_are_named_with_what_to_do(name):
    text = refused(pg, url="postgresql://h/db", **{name: "1"})
    assert f"option '{name}' is a Spark JDBC option" in text and REFUSED[name] in text
    assert "unknown option" not in text and "Did you mean" not in text


def test_isolation_level_none_is_refused_and_the_others_are_sql_spellings():
    assert "transactions" in refused(pg, url="postgresql://h/db", isolationLevel="NONE")
    assert pg(url="postgresql://h/db", isolationLevel="serializable").isolation_level == "SERIALIZABLE"
    assert pg(url="postgresql://h/db").isolation_level is None


# -- createTableColumnTypes -------------------------------------------------------------


def test_column_types_are_read_as_spark_reads_them():
    assert parse_column_types("name CHAR(64), comments VARCHAR(1024), `odd, name` decimal(12, 2), n long") == (
        ("name", ColumnType("char", (64,))), ("comments", ColumnType("varchar", (1024,))),
        ("odd, name", ColumnType("decimal", (12, 2))), ("n", ColumnType("bigint")))


@pytest.mark.parametrize("text, says", [
    ("name CHAR", "takes 1 to 1 numbers"),
    ("name INT(4)", "takes no length"),
    ("name TEXT", "not a Spark SQL type"),
    ("name VARCHAR(10); DROP TABLE t", "is not `name TYPE`"),
    ("a INT, A BIGINT", "twice"),
    ("", "empty"),
])
def test_bad_column_types_are_refused_naming_the_option(text, says):
    with pytest.raises(OptionError) as err:
        pg(url="postgresql://h/db", createTableColumnTypes=text or " ")
    assert "createTableColumnTypes" in str(err.value) and says in str(err.value)


def test_declared_types_are_the_ones_spark_would_create():
    assert isinstance(declared_type("varchar", (64,)), sa.VARCHAR)
    assert declared_type("varchar", (64,)).length == 64
    assert (declared_type("decimal", ()).precision, declared_type("decimal", ()).scale) == (10, 0)
    assert can_fill(T.StringType(), declared_type("char", (3,)))
    assert not can_fill(T.StringType(), declared_type("int", ()))


# -- createTableOptions ---------------------------------------------------------------------


def ddl(settings: SqlSinkSettings, dialect) -> str:
    table = sa.Table("t", sa.MetaData(), sa.Column("id", sa.BigInteger), **table_kwargs(settings.table_options))
    return str(CreateTable(table).compile(dialect=dialect))


def test_postgres_table_options():
    settings = pg(url="postgresql://h/db", createTableOptions="WITH (fillfactor = 70) TABLESPACE pg_default")
    text = ddl(settings, pg_dialect.dialect())
    assert "WITH (fillfactor = 70)" in text and "TABLESPACE pg_default" in text


def test_mysql_table_options():
    settings = my(url="mysql://u@h/db",
                  createTableOptions="ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='it''s orders'")
    text = ddl(settings, mysql_dialect.dialect())
    assert "ENGINE=InnoDB" in text and "CHARSET=utf8mb4" in text and "COMMENT='it''s orders'" in text


@pytest.mark.parametrize("parse, text", [
    (pg, "WITH (fillfactor = 70); DROP TABLE t"),
    (pg, "PARTITION BY RANGE (id)"),
    (pg, "WITH (fillfactor = '70)'"),
    (my, "ENGINE=InnoDB; DROP TABLE t"),
    (my, "COMMENT='x' UNION SELECT 1"),
    (my, "ENGINE=InnoDB ENGINE=MyISAM"),
])
def test_table_options_outside_the_grammar_are_refused(parse, text):
    with pytest.raises(OptionError) as err:
        parse(url="postgresql://h/db" if parse is pg else "mysql://u@h/db", createTableOptions=text)
    assert "createTableOptions" in str(err.value)


def test_mysql_verifying_ssl_modes_map_to_pymysql_s_and_the_others_are_refused():
    url = make_url(my(url="jdbc:mariadb://h/db?sslMode=verify-full&serverSslCert=/ca.pem").url)
    assert dict(url.query) == {"ssl_verify_cert": "true", "ssl_verify_identity": "true",
                               "ssl_ca": "/ca.pem"}
    mysql_check_url(url)
    for mode in ("REQUIRED", "PREFERRED", "trust"):
        assert "VERIFY_CA" in refused(my, url=f"jdbc:mysql://h/db?sslMode={mode}")


def test_mariadb_s_semicolon_parameters():
    url = make_url(my(url=f"jdbc:mariadb://h:3306/db;user=u;password={SECRET}").url)
    assert (url.database, url.username, url.password) == ("db", "u", SECRET)


def test_table_comment_is_sqlalchemy_s_escaped_comment():
    settings = my(url="mysql://u@h/db", tableComment="it's; DROP TABLE t")
    assert "COMMENT='it''s; DROP TABLE t'" in ddl(settings, mysql_dialect.dialect())
    assert "give it once" in refused(my, url="mysql://u@h/db", tableComment="a", createTableOptions="COMMENT='b'")


def test_the_pipeline_component_takes_url_and_dbtable_once():
    from eoskit.connectors.postgres import PostgresSink

    with pytest.raises(OptionError) as err:
        PostgresSink("postgresql://u@h/db", "t", {"dbtable": "other"})
    assert "option 'dbtable' is given twice" in str(err.value)
