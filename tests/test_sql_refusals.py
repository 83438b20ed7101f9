"""What the SQL sinks read from a server's refusal of a row: the texts here
are the servers' own (PostgreSQL 15, MariaDB 10.11, MySQL 8), and the
integration tests check them against the real servers."""

from __future__ import annotations

import pytest

from eoskit.connectors.mysql.transactions import refused_row_facts
from eoskit.connectors.postgres.transactions import copy_position
from eoskit.connectors.sql.refusals import MAX_DETAIL, Refusal

COLUMNS = ["id", "name", "Cap, x: y"]


@pytest.mark.parametrize("context, expected", [
    ('COPY orders, line 3, column name: "abcdefgh"', (3, "name")),
    ("COPY orders, line 12", (12, None)),
    ('COPY orders, line 1: "1,ab,,1"', (1, None)),
    ('COPY orders, line 2, column Cap, x: y: "x"', (2, "Cap, x: y")),
    ("COPY orders, line 4, column Cap, x: y", (4, "Cap, x: y")),
    ('COPY eoskit_stage_0123, line 5, column id: "z"', (5, "id")),
    ("SQL statement \"INSERT ...\"\nCOPY orders, line 6", (6, None)),
    ("PL/pgSQL function f() line 3 at RAISE", (None, None)),
    (None, (None, None)),
])
def test_copy_position_reads_line_and_column(context, expected):
    assert copy_position(context, ["orders", "eoskit_stage_0123"], COLUMNS) == expected


@pytest.mark.parametrize("text, expected", [
    ("Column 'amount' cannot be null", ("amount", None, None)),
    ("Data too long for column 'name' at row 2", ("name", None, 2)),
    ("Out of range value for column 'amount' at row 17", ("amount", None, 17)),
    ("Incorrect integer value: 'x' for column `shop`.`orders`.`Cap, x: y` at row 2", ("Cap, x: y", None, 2)),
    ("Incorrect integer value: 'x' for column 'amount' at row 1", ("amount", None, 1)),
    ("CONSTRAINT `amount_positive` failed for `shop`.`orders`", (None, "amount_positive", None)),
    ("Check constraint 'amount_positive' is violated.", (None, "amount_positive", None)),
    ("Duplicate entry '1' for key 'PRIMARY'", (None, "PRIMARY", None)),
    ("Duplicate entry 'a' for key 'orders.uq_name'", (None, "uq_name", None)),
    ("Cannot add or update a child row: a foreign key constraint fails (`shop`.`orders`, CONSTRAINT "
     "`orders_ibfk_1` FOREIGN KEY (`cid`) REFERENCES `c` (`id`))", (None, "orders_ibfk_1", None)),
    ("Lock wait timeout exceeded; try restarting transaction", (None, None, None)),
])
def test_mysql_messages_name_column_constraint_and_row(text, expected):
    assert refused_row_facts(text, "orders") == expected


def test_refusal_message_names_table_column_and_row():
    message = Refusal("PostgreSQL", "orders", "value too long for type character varying(5)",
                      ("name",), row=3, txn_id="eoskit:ck0:7:1:0xab12cd").message()
    assert message == ("PostgreSQL refused a row for table orders, column 'name': value too long "
                       "for type character varying(5); row 3 of batch 7, partition 1")


def test_refusal_message_without_a_row_says_where_it_can():
    message = Refusal("MySQL", "orders", "Duplicate entry '1' for key 'PRIMARY' (error 1062)",
                      ("id", "region"), constraint="PRIMARY", txn_id="eoskit:ck0:7:1:0xab12cd",
                      detail="x" * 1000).message()
    assert message.startswith("MySQL refused a row for table orders, columns 'id', 'region': "
                              "Duplicate entry '1' for key 'PRIMARY' (error 1062); in batch 7, "
                              "partition 1; xxx")
    assert message.endswith("; " + "x" * MAX_DETAIL + "...")
    copy = Refusal("PostgreSQL", "t", "bad", server_position="COPY line 9").message()
    assert copy == "PostgreSQL refused a row for table t: bad; COPY line 9 of this task's rows"
