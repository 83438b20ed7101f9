"""dbtable read as SQL text, and DataFrame columns matched to table columns,
the way Spark's JDBC source does both."""

from __future__ import annotations

import pytest

from eoskit.core.options import OptionError
from eoskit.connectors.sql.identifiers import (
    IdentifierError,
    Part,
    TableName,
    ascii_lower,
    display,
    parse_table_name,
)
from eoskit.connectors.sql.tables import NameRules, match_columns, match_key

PG = '"'
MYSQL = '`"'


@pytest.mark.parametrize("text, schema, table", [
    ("orders", None, Part("orders")),
    ("OrderItems", None, Part("OrderItems")),
    ("shop.orders", Part("shop"), Part("orders")),
    ('"OrderItems"', None, Part("OrderItems", quoted=True)),
    ('"my schema"."Order.Items"', Part("my schema", True), Part("Order.Items", True)),
    ('"say ""hi"""', None, Part('say "hi"', True)),
    (' shop . "Orders" ', Part("shop"), Part("Orders", True)),
    ('public."x"', Part("public"), Part("x", True)),
])
def test_postgres_names(text, schema, table):
    parsed = parse_table_name(text, PG)
    assert (parsed.schema, parsed.table) == (schema, table)
    assert parsed.text == text.strip()


@pytest.mark.parametrize("text, schema, table", [
    ("`OrderItems`", None, Part("OrderItems", True)),
    ("`my db`.`a``b`", Part("my db", True), Part("a`b", True)),
    ('"OrderItems"', None, Part("OrderItems", True)),  # as under ANSI_QUOTES
    ("shop.`Order.Items`", Part("shop"), Part("Order.Items", True)),
])
def test_mysql_names(text, schema, table):
    parsed = parse_table_name(text, MYSQL)
    assert (parsed.schema, parsed.table) == (schema, table)


@pytest.mark.parametrize("text, quotes, message", [
    ("`OrderItems`", PG, 'does not quote names in this database: use double quotes, e.g. "OrderItems"'),
    ("my table", PG, "quote a name that holds spaces or quotes, e.g. \"my table\""),
    ("my table", MYSQL, "e.g. `my table`"),
    ("a..b", PG, "a name is missing before the dot at position 3"),
    (".b", PG, "a name is missing before the dot at position 1"),
    ("t.", PG, "a name is missing after 't.'"),
    ('"open', PG, "the quote \" opened at position 1 is never closed"),
    ('"a""', PG, "never closed"),
    ('""', PG, "the quoted name at position 1 is empty"),
    ("a.b.c", PG, "3 names; give `table` or `schema.table`"),
    ('"a"b', PG, "unexpected 'b' after the quoted name 'a'"),
    ('Order"Items', PG, 'e.g. "Order""Items"'),
])
def test_bad_names_say_what_is_wrong(text, quotes, message):
    with pytest.raises(IdentifierError) as caught:
        parse_table_name(text, quotes)
    assert message in str(caught.value)


def test_postgres_folds_ascii_letters_only():
    assert ascii_lower("OrderItems") == "orderitems"
    assert ascii_lower("ÉTÉ_Q") == "ÉtÉ_q"


def test_names_in_messages_are_quoted_only_where_needed():
    assert display(["public", "orders"], '"', folds=True) == "public.orders"
    assert display([None, "OrderItems"], '"', folds=True) == '"OrderItems"'
    assert display(["my schema", 'a"b'], '"', folds=True) == '"my schema"."a""b"'
    assert display(["shop", "OrderItems"], "`") == "shop.OrderItems"
    assert display(["shop", "Order.Items"], "`") == "shop.`Order.Items`"


def test_name_rules_fold_and_pick_as_the_database_does():
    pg = NameRules.for_dialect("postgresql")
    stored = ["orderitems", "OrderItems", "x"]
    assert pg.pick(stored, Part("OrderItems")) == "orderitems"
    assert pg.pick(stored, Part("OrderItems", quoted=True)) == "OrderItems"
    assert pg.pick(["OrderItems"], Part("OrderItems")) is None
    mysql = NameRules.for_dialect("mysql", lower_case_table_names=0)
    assert mysql.pick(["orderitems"], Part("OrderItems")) is None
    assert mysql.pick(["OrderItems"], Part("OrderItems")) == "OrderItems"
    insensitive = NameRules.for_dialect("mysql", lower_case_table_names=1)
    assert insensitive.pick(["orderitems"], Part("OrderItems", quoted=True)) == "orderitems"


def test_sql_settings_parse_dbtable_with_the_sinks_quotes():
    from eoskit.connectors.mysql.transactions import MySQLTransactions
    from eoskit.connectors.postgres.transactions import PostgresTransactions
    from eoskit.connectors.sql.settings import SqlSinkSettings

    options = {"url": "postgresql://u@h/db", "dbtable": '"my schema"."OrderItems"'}
    settings = SqlSinkSettings.parse(options, "eoskit-postgres", PostgresTransactions)
    assert settings.table == TableName(Part("my schema", True), Part("OrderItems", True),
                                       '"my schema"."OrderItems"')
    assert settings.dbtable == '"my schema"."OrderItems"'
    with pytest.raises(OptionError, match=r"eoskit-postgres: option 'dbtable' = '`t`': ` does not quote"):
        SqlSinkSettings.parse({**options, "dbtable": "`t`"}, "eoskit-postgres", PostgresTransactions)
    mysql = SqlSinkSettings.parse({"url": "mysql://u@h/db", "dbtable": "`shop`.`t`"},
                                  "eoskit-mysql", MySQLTransactions)
    assert mysql.table.schema == Part("shop", True)


def test_a_sql_sink_names_its_url_without_the_password_and_dbtable_as_given():
    """``describe`` (every reconnecting call's message) reads the parsed name's text."""
    from pyspark.sql.types import StructType

    from eoskit.connectors.mysql.transactions import MySQLTransactions
    from eoskit.connectors.postgres.transactions import PostgresTransactions
    from eoskit.connectors.sql.settings import SqlSinkSettings

    options = {"url": "postgresql://u:s3cret@h:5432/db", "dbtable": ' "my schema"."OrderItems" '}
    postgres = PostgresTransactions(
        SqlSinkSettings.parse(options, "eoskit-postgres", PostgresTransactions), StructType([]))
    assert postgres.describe() == \
        'PostgreSQL postgresql+psycopg://u:***@h:5432/db table "my schema"."OrderItems"'
    options = {"url": "jdbc:mysql://h/shop", "user": "u", "password": "s3cret",
               "dbtable": "`shop`.orders"}
    mysql = MySQLTransactions(SqlSinkSettings.parse(options, "eoskit-mysql", MySQLTransactions),
                              StructType([]))
    assert mysql.describe() == "MySQL mysql+pymysql://u:***@h/shop table `shop`.orders"


def test_columns_match_case_insensitively_exact_first():
    column_of, problems = match_columns(["ID", "amount", "Customer"], ["id", "amount", "customer", "extra"])
    assert problems == []
    assert column_of == {"ID": "id", "amount": "amount", "Customer": "customer"}
    column_of, problems = match_columns(["Amount"], ["amount", "Amount"])
    assert (column_of, problems) == ({"Amount": "Amount"}, [])


def test_a_task_names_the_columns_as_the_table_spells_them():
    """The sink maps a batch's columns through the lookup's ``column_of``;
    a column the lookup did not see keeps its name."""
    from pyspark.sql.types import StructType

    from eoskit.connectors.postgres.transactions import PostgresTransactions
    from eoskit.connectors.sql.settings import SqlSinkSettings
    from eoskit.connectors.sql.tables import TargetTable

    settings = SqlSinkSettings.parse({"url": "postgresql://u@h/db", "dbtable": "orders"},
                                     "eoskit-postgres", PostgresTransactions)
    sink = PostgresTransactions(settings, StructType([]))
    sink._target = TargetTable(None, "orders", {}, {"ID": "id", "Amount": "amount"})
    assert sink.table_columns(["Amount", "ID", "note"]) == ["amount", "id", "note"]


def test_a_column_matching_two_table_columns_is_ambiguous():
    _, problems = match_columns(["AMOUNT"], ["amount", "Amount"])
    assert problems == ["DataFrame column 'AMOUNT' matches table columns 'amount' and 'Amount', "
                        "which differ only in case: rename the DataFrame column to the one it fills"]


def test_a_column_the_table_lacks_names_both_lists():
    _, problems = match_columns(["id", "amout", "note"], ["id", "amount"])
    assert problems == ["DataFrame column(s) 'amout', 'note' have no column in the table "
                        "(DataFrame columns: id, amout, note; table columns: id, amount): "
                        "rename or drop them in the transform"]


def test_two_dataframe_columns_filling_one_table_column_are_refused():
    _, problems = match_columns(["id", "ID"], ["id"])
    assert problems == ["DataFrame columns 'id' and 'ID' would both fill table column 'id': "
                        "drop or rename one of them"]


def test_upsert_key_is_spelled_as_the_table_spells_it():
    assert match_key(("ID", "region"), ["id", "Region", "x"]) == (("id", "Region"), [])
    assert match_key(("order_id",), ["id"]) == ((), ["order_id"])
