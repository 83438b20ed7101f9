"""PostgreSQL as the benchmarks use it: connect, empty a table, read a
table's figures back and check them against what was produced."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from eoskit.connectors.postgres.connection import connect_kwargs
from eoskit.runtime.devtools.demo.orders import OrderTotals

from benchlib.results import CREATED_AT, TABLE_DDL, TableStats


def pg_connect(sqlalchemy_url: str, **kwargs: Any) -> psycopg.Connection:
    """psycopg from the SQLAlchemy URL LocalServices gives (eoskit's own mapping)."""
    return psycopg.connect(**connect_kwargs(make_url(sqlalchemy_url)), **kwargs)


def reset_table(sqlalchemy_url: str, table: str) -> None:
    """Both runs start from an empty table of the same layout (no index, no key),
    so neither pays for anything the other does not.

    An earlier run that failed mid-batch leaves its transactions prepared
    (in doubt until a restart of its job settles them); they hold locks on
    the table, and the DROP would wait on them for good. The benchmarks'
    jobs are never restarted, so those holding a lock on this table (and
    no other job's) are rolled back first, and said."""
    with pg_connect(sqlalchemy_url, autocommit=True) as conn:
        left = [gid for (gid,) in conn.execute(
            # A prepared transaction's locks are those of its virtual
            # transaction, the one that holds its transaction id's lock.
            "SELECT p.gid FROM pg_prepared_xacts p WHERE p.database = current_database() "
            "AND p.gid LIKE 'eoskit:%%' AND EXISTS (SELECT 1 FROM pg_locks x JOIN pg_locks r "
            "ON r.virtualtransaction = x.virtualtransaction WHERE x.locktype = 'transactionid' "
            "AND x.transactionid = p.transaction AND r.relation = to_regclass(%s))",
            (table,))]
        for gid in left:
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        if left:
            print(f"==> rolled back {len(left)} transaction(s) an earlier failed run left prepared", flush=True)
        conn.execute("SET lock_timeout = '60s'")  # anything else holding the table: an error, not a hang
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
        conn.execute(sql.SQL("CREATE TABLE {} {}").format(sql.Identifier(table), sql.SQL(TABLE_DDL)))


def table_stats(sqlalchemy_url: str, table: str) -> TableStats:
    """An independent reading of what a run left in the table."""
    with pg_connect(sqlalchemy_url, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*), count(DISTINCT order_id), sum(amount), "
            f"min(created_at), max(created_at) FROM {table}"
        ).fetchone()
    assert row is not None
    return TableStats(*row)


def verify(name: str, stats: TableStats, expected: OrderTotals) -> list[str]:
    """What differs from the produced data; empty when every order is there once."""
    problems = []
    if stats.count != expected.count:
        problems.append(f"{name}: {stats.count} rows, expected {expected.count}")
    if stats.distinct_ids != expected.count:
        problems.append(f"{name}: {stats.distinct_ids} distinct order_ids, expected {expected.count}")
    if stats.amount != expected.amount:
        problems.append(f"{name}: sum(amount) = {stats.amount}, expected {expected.amount}")
    if stats.min_created != CREATED_AT or stats.max_created != CREATED_AT:
        problems.append(f"{name}: created_at spans {stats.min_created} .. {stats.max_created}, "
                        f"expected {CREATED_AT} only")
    return problems + [f"{name}: {problem}" for problem in stats.problems]
