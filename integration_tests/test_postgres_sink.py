"""The PostgreSQL sink against the real server: modes, checks, bad input."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from pyspark.sql import functions as F
from sqlalchemy.engine import make_url

SCHEMA = "id BIGINT, amount BIGINT, customer STRING"


def pg(url: str) -> psycopg.Connection:
    u = make_url(url)
    return psycopg.connect(host=u.host, port=u.port, user=u.username, password=u.password,
                           dbname=u.database, autocommit=True)


def query(url: str, sql: str, params=()) -> list[tuple]:
    with pg(url) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def table() -> str:
    return f"sink_{uuid.uuid4().hex[:10]}"


def write(spark, kafka, topic, checkpoint, transform=None, **options):
    df = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", topic).option("startingOffsets", "earliest").load()
          .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r")).select("r.*"))
    if transform is not None:
        df = transform(df)
    query_ = (df.writeStream.format("eoskit-postgres").options(**options)
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query_.awaitTermination(300)
    except Exception:  # noqa: BLE001 - a failed query is inspected through query_.exception()
        pass
    return query_


def test_upsert_creates_table_and_last_row_of_a_key_wins(spark, kafka, postgres, records_topic, table, tmp_path):
    rows = [{"id": i % 5, "amount": i, "customer": f"c{i}"} for i in range(20)]
    topic = records_topic(rows, partitions=1)
    q = write(spark, kafka, topic, tmp_path / "c", url=postgres, dbtable=table,
              mode="upsert", key="id", createTable="true")
    assert q.exception() is None
    got = sorted(query(postgres, f"SELECT id, amount, customer FROM {table}"))
    assert got == [(k, 15 + k, f"c{15 + k}") for k in range(5)]
    assert query(postgres, "SELECT count(*) FROM pg_prepared_xacts")[0][0] == 0


def test_append_then_restart_continues_without_duplicates(spark, kafka, postgres, records_topic, produce_to, table, tmp_path):
    topic = records_topic([{"id": i, "amount": i, "customer": "x"} for i in range(10)])
    opts = dict(url=postgres, dbtable=table, createTable="true")
    write(spark, kafka, topic, tmp_path / "c", **opts)
    produce_to(topic, {0: [(b"k", json.dumps({"id": 100, "amount": 100, "customer": "y"}).encode())]})
    write(spark, kafka, topic, tmp_path / "c", **opts)
    assert sorted(r[0] for r in query(postgres, f"SELECT id FROM {table}")) == list(range(10)) + [100]


def test_at_least_once_mode_commits_in_tasks(spark, kafka, postgres, records_topic, table, tmp_path):
    topic = records_topic([{"id": i, "amount": i, "customer": "x"} for i in range(6)])
    q = write(spark, kafka, topic, tmp_path / "c", url=postgres, dbtable=table,
              createTable="true", commitMode="at_least_once")
    assert q.exception() is None
    assert query(postgres, f"SELECT count(*) FROM {table}")[0][0] == 6
    assert not (tmp_path / "c" / "eoskit").exists()  # no decision log in this mode


def failure(spark, kafka, topic, tmp_path, **options) -> str:
    q = write(spark, kafka, topic, tmp_path / f"c{uuid.uuid4().hex[:6]}", **options)
    assert q.exception() is not None, "the query should have failed"
    return str(q.exception())


def test_missing_table_is_refused_naming_it_when_creating_is_off(spark, kafka, postgres, records_topic, table, tmp_path):
    topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
    message = failure(spark, kafka, topic, tmp_path, url=postgres, dbtable=table, createTable="false")
    assert f"table {table} does not exist" in message and "createTable=false" in message


def test_column_type_the_dataframe_cannot_fill_is_refused(spark, kafka, postgres, records_topic, table, tmp_path):
    query(postgres, f"CREATE TABLE {table} (id bigint, amount bigint, customer integer)")
    topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
    message = failure(spark, kafka, topic, tmp_path, url=postgres, dbtable=table)
    assert "column 'customer' is INTEGER in the table but string in the DataFrame" in message


def test_upsert_needs_key_columns_and_a_unique_constraint(spark, kafka, postgres, records_topic, table, tmp_path):
    query(postgres, f"CREATE TABLE {table} (id bigint, amount bigint, customer text)")
    topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
    message = failure(spark, kafka, topic, tmp_path, url=postgres, dbtable=table, mode="upsert", key="order_id")
    assert "key column(s) order_id are not in the DataFrame" in message
    message = failure(spark, kafka, topic, tmp_path, url=postgres, dbtable=table, mode="upsert", key="id")
    assert "needs a primary key or unique constraint on (id)" in message
    message = failure(spark, kafka, topic, tmp_path, url=postgres, dbtable=table, mode="upsert")
    assert "mode 'upsert' needs the option 'key'" in message


def test_user_without_rights_gets_the_grant_to_run(spark, kafka, postgres, records_topic, table, tmp_path):
    query(postgres, f"CREATE TABLE {table} (id bigint, amount bigint, customer text)")
    role = f"ro_{uuid.uuid4().hex[:8]}"
    query(postgres, f"CREATE ROLE {role} LOGIN PASSWORD 'pw-{role}'")
    query(postgres, f"GRANT SELECT ON {table} TO {role}")
    url = make_url(postgres).set(username=role, password=f"pw-{role}").render_as_string(hide_password=False)
    topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
    message = failure(spark, kafka, topic, tmp_path, url=url, dbtable=table)
    assert f"lacks INSERT on {table}: GRANT INSERT ON \"{table}\" TO {role}" in message
    assert f"pw-{role}" not in message


def test_wrong_password_error_shows_no_secret(spark, kafka, postgres, records_topic, table, tmp_path):
    url = make_url(postgres).set(password="s3cret-value").render_as_string(hide_password=False)
    topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
    message = failure(spark, kafka, topic, tmp_path, url=url, dbtable=table)
    assert "cannot connect to PostgreSQL at" in message
    assert "s3cret-value" not in message


def test_constraint_violation_fails_the_batch_and_keeps_what_was_committed(
    spark, kafka, postgres, records_topic, produce_to, table, tmp_path
):
    query(postgres, f"CREATE TABLE {table} (id bigint, amount bigint CONSTRAINT amount_positive CHECK (amount > 0), customer text)")
    topic = records_topic([{"id": i, "amount": i + 1, "customer": "x"} for i in range(4)])
    opts = dict(url=postgres, dbtable=table)
    assert write(spark, kafka, topic, tmp_path / "c", **opts).exception() is None
    produce_to(topic, {0: [(b"bad", json.dumps({"id": 50, "amount": -5, "customer": "x"}).encode())]})
    q = write(spark, kafka, topic, tmp_path / "c", **opts)
    assert q.exception() is not None and "amount_positive" in str(q.exception())
    assert f"PostgreSQL refused a row for table {table}, column 'amount': " in str(q.exception())
    assert sorted(r[0] for r in query(postgres, f"SELECT id FROM {table}")) == [0, 1, 2, 3]
    assert query(postgres, "SELECT count(*) FROM pg_prepared_xacts")[0][0] == 0


def test_batch_write_is_refused_clearly(spark, postgres, table):
    df = spark.createDataFrame([(1,)], "id BIGINT")
    with pytest.raises(Exception, match="writes streaming queries only"):
        df.write.format("eoskit-postgres").option("url", postgres).option("dbtable", table).mode("append").save()


@pytest.fixture(scope="module")
def postgres_without_prepared_transactions():
    """A throwaway PostgreSQL with max_prepared_transactions = 0 (the stock default)."""
    import os
    import shutil
    import socket
    import subprocess
    import tempfile
    import time
    from pathlib import Path

    from eoskit.runtime.devtools.services.postgres import find_bindir

    root = Path(tempfile.mkdtemp(prefix="eoskit-pg0-"))
    root.chmod(0o755)
    user = "postgres" if os.geteuid() == 0 else None
    data = root / "data"
    if user:
        shutil.chown(root, user)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bindir = find_bindir()
    subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", "eoskit", "--auth=trust", "--no-sync"],
                   user=user, check=True, capture_output=True, cwd=root)
    server = subprocess.Popen(
        [str(bindir / "postgres"), "-D", str(data), "-c", f"port={port}", "-c", "listen_addresses=127.0.0.1",
         "-c", "unix_socket_directories=", "-c", "max_prepared_transactions=0", "-c", "fsync=off"],
        user=user, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root)
    url = f"postgresql+psycopg://eoskit@127.0.0.1:{port}/postgres"
    deadline = time.monotonic() + 30
    while True:
        try:
            query(url, "SELECT 1")
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    yield url
    server.terminate()
    server.wait(30)
    shutil.rmtree(root, ignore_errors=True)


def test_max_prepared_transactions_zero_is_refused_before_data_moves(
    spark, kafka, postgres_without_prepared_transactions, records_topic, table, tmp_path
):
    url = postgres_without_prepared_transactions
    topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
    message = failure(spark, kafka, topic, tmp_path, url=url, dbtable=table, createTable="true")
    assert "max_prepared_transactions = 0" in message and "commitMode=idempotent" in message
    assert query(url, f"SELECT count(*) FROM {table}")[0][0] == 0


# --- Names as Spark's JDBC source reads them, and rows the server refuses.
# Most of these drive the sink's own transaction API against the server,
# without Spark: what is tested is what the server says and how the sink
# words it. One query shows the names end to end.

def sink_for(url: str, dbtable: str, columns: dict[str, str], **options):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from eoskit.connectors.postgres.transactions import PostgresTransactions
    from eoskit.connectors.sql.settings import SqlSinkSettings

    types = {"long": LongType(), "string": StringType()}
    schema = StructType([StructField(name, types[kind]) for name, kind in columns.items()])
    settings = SqlSinkSettings.parse({"url": url, "dbtable": dbtable, **options},
                                     "eoskit-postgres", PostgresTransactions)
    return PostgresTransactions(settings, schema)


def resolve_error(url: str, dbtable: str, columns: dict[str, str], **options) -> str:
    from eoskit.twophase.contract import SinkError

    with pytest.raises(SinkError) as caught:
        sink_for(url, dbtable, columns, **options).target
    return str(caught.value)


def test_dbtable_quoted_as_in_sql_reaches_mixed_case_schema_and_table(postgres):
    suffix = uuid.uuid4().hex[:6]
    schema, table = f"My Shop {suffix}", f"Order.Items{suffix}"
    query(postgres, f'CREATE SCHEMA "{schema}"')
    try:
        query(postgres, f'CREATE TABLE "{schema}"."{table}" (id bigint)')
        target = sink_for(postgres, f'"{schema}"."{table}"', {"id": "long"}).target
        assert (target.schema, target.name) == (schema, table)
        message = resolve_error(postgres, f'"{schema.lower()}"."{table}"', {"id": "long"})
        assert f'schema "{schema.lower()}" of dbtable' in message and "does not exist" in message
        assert f'set dbtable to "{schema}"."{table}"' in message
    finally:
        query(postgres, f'DROP SCHEMA "{schema}" CASCADE')


def test_a_bare_dbtable_is_folded_to_lower_case_as_spark_jdbc_does(postgres, table):
    mixed = table.replace("sink_", "Sink_")
    query(postgres, f'CREATE TABLE "{mixed}" (id bigint)')
    try:
        assert sink_for(postgres, f'"{mixed}"', {"id": "long"}).target.name == mixed
        message = resolve_error(postgres, mixed, {"id": "long"})
        assert message.startswith(f"table {table} does not exist; \"{mixed}\" does, but PostgreSQL "
                                  "folds a bare name in dbtable to lower case")
        assert f'set dbtable to "{mixed}"' in message
        # createTable would make a second table beside it: refused, naming the one that exists.
        message = resolve_error(postgres, mixed, {"id": "long"}, createTable="true")
        assert f'set dbtable to "{mixed}"' in message and "quote the name" not in message
        # With no such neighbour, a bare name creates the folded table, as Spark's does.
        query(postgres, f'DROP TABLE "{mixed}"')
        assert sink_for(postgres, mixed, {"id": "long"}, createTable="true").target.name == table
        assert query(postgres, "SELECT count(*) FROM pg_tables WHERE tablename = %s", (table,)) == [(1,)]
    finally:
        query(postgres, f'DROP TABLE IF EXISTS "{mixed}"')
        query(postgres, f"DROP TABLE IF EXISTS {table}")


def test_dataframe_columns_find_table_columns_whatever_their_case(postgres, table):
    query(postgres, f'CREATE TABLE {table} (id bigint PRIMARY KEY, "Amount" bigint, customer text, '
                    'note text, "NOTE" text)')
    target = sink_for(postgres, table, {"ID": "long", "amount": "long", "Customer": "string"},
                      mode="upsert", key="Id").target
    assert target.column_of == {"ID": "id", "amount": "Amount", "Customer": "customer"}
    assert target.key == ("id",)
    message = resolve_error(postgres, table, {"id": "long", "Note": "string"})
    assert ("DataFrame column 'Note' matches table columns 'note' and 'NOTE', which differ only "
            "in case") in message
    message = resolve_error(postgres, table, {"id": "long", "amout": "long"})
    assert (f"cannot write to {table}: DataFrame column(s) 'amout' have no column in the table "
            "(DataFrame columns: id, amout; table columns: id, Amount, customer, note, NOTE)") in message


def test_quoted_dbtable_and_case_differing_columns_end_to_end(spark, kafka, postgres, records_topic, tmp_path):
    suffix = uuid.uuid4().hex[:6]
    schema = f"Shop {suffix}"
    query(postgres, f'CREATE SCHEMA "{schema}"')
    try:
        query(postgres, f'CREATE TABLE "{schema}"."OrderItems" (id bigint PRIMARY KEY, "Amount" bigint, '
                        "customer text)")
        rows = [{"id": i % 3, "amount": i, "customer": f"c{i}"} for i in range(6)]
        topic = records_topic(rows, partitions=1)
        q = write(spark, kafka, topic, tmp_path / "c", url=postgres,
                  dbtable=f'"{schema}"."OrderItems"', mode="upsert", key="ID",
                  transform=lambda df: df.toDF("ID", "amount", "CUSTOMER"))
        assert q.exception() is None, q.exception()
        assert sorted(query(postgres, f'SELECT id, "Amount", customer FROM "{schema}"."OrderItems"')) == [
            (0, 3, "c3"), (1, 4, "c4"), (2, 5, "c5")]
        assert query(postgres, "SELECT count(*) FROM pg_prepared_xacts")[0][0] == 0
    finally:
        query(postgres, f'DROP SCHEMA "{schema}" CASCADE')


REFUSED_TABLE = ("(id bigint PRIMARY KEY, name varchar(5), "
                 "amount integer NOT NULL CONSTRAINT amount_positive CHECK (amount > 0))")


def refused(sink, rows: list[tuple]) -> str:
    """Write ``rows`` as one task of batch 7, partition 1 (in two Arrow
    batches), and return the error that refused them."""
    import pyarrow as pa

    from eoskit.twophase.contract import SinkError
    from eoskit.twophase.txn_id import TxnId

    arrow = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.int64())])
    batches = [pa.RecordBatch.from_pylist([dict(zip(arrow.names, r)) for r in part], schema=arrow)
               for part in (rows[:1], rows[1:])]
    txn_id = str(TxnId.new("refused", 7, 1, 0))
    txn = sink.begin_prepared(txn_id)
    try:
        for batch in batches:
            txn.write(batch)
        txn.prepare()
    except SinkError as exc:
        return str(exc)
    finally:
        txn.abort()
    sink.committer().roll_back(txn_id)
    pytest.fail("the rows were not refused")


@pytest.mark.parametrize("bad, column, reason", [
    ((3, "c", None), "amount", 'null value in column "amount"'),
    ((3, "abcdefgh", 1), "name", "value too long for type character varying(5)"),
    ((3, "c", 3_000_000_000), "amount", 'value "3000000000" is out of range for type integer'),
    ((3, "c", -1), "amount", 'violates check constraint "amount_positive"'),
    ((1, "c", 1), "id", "duplicate key value violates unique constraint"),
], ids=["not-null", "too-long", "out-of-range", "check", "duplicate-key"])
def test_a_refused_row_names_table_column_and_row(postgres, table, bad, column, reason):
    query(postgres, f"CREATE TABLE {table} {REFUSED_TABLE}")
    message = refused(sink_for(postgres, table, {"id": "long", "name": "string", "amount": "long"}),
                      [(1, "a", 1), (2, "b", 2), bad])
    assert message.startswith(f"PostgreSQL refused a row for table {table}, column {column!r}: "), message
    assert reason in message and "row 3 of batch 7, partition 1" in message, message
    assert query(postgres, f"SELECT count(*) FROM {table}") == [(0,)]
    assert query(postgres, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE %s",
                 ("eoskit:refused:%",)) == [(0,)]


def test_a_row_refused_in_upserts_staging_table_is_named_for_the_target(postgres, table):
    query(postgres, f"CREATE TABLE {table} {REFUSED_TABLE}")
    sink = sink_for(postgres, table, {"id": "long", "name": "string", "amount": "long"},
                    mode="upsert", key="id")
    message = refused(sink, [(1, "a", 1), (2, "b", None)])
    assert message.startswith(f"PostgreSQL refused a row for table {table}, column 'amount': "
                              f'null value in column "amount" of relation "{table}"'), message
    assert "row 2 of batch 7, partition 1" in message and "eoskit_stage" not in message
    message = refused(sink, [(1, "a", 1), (2, "b", -1)])  # checked by the merge, not the COPY
    assert message.startswith(f"PostgreSQL refused a row for table {table}, column 'amount': "), message
    assert "amount_positive" in message and "in batch 7, partition 1" in message
    assert query(postgres, f"SELECT count(*) FROM {table}") == [(0,)]


def test_session_encoding_is_utf8_even_when_the_environment_says_otherwise(postgres, monkeypatch):
    """libpq reads PGCLIENTENCODING from the environment; the sink's sessions
    speak UTF-8 regardless, so non-ASCII text arrives as sent."""
    from eoskit.connectors.postgres.connection import cached_connection, drop_connection
    from eoskit.connectors.sql.sink import parse_url

    monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    url = parse_url(postgres, ("postgresql",)).set(drivername="postgresql+psycopg")
    drop_connection(url)
    try:
        conn = cached_connection(url)
        assert conn.execute("SHOW client_encoding").fetchone()[0] == "UTF8"
        assert conn.execute("SELECT %s::text", ("Ærø 東京 😀",)).fetchone()[0] == "Ærø 東京 😀"
    finally:
        drop_connection(url)


def test_url_with_another_client_encoding_is_refused(spark, kafka, postgres, records_topic,
                                                     table, tmp_path):
    topic = records_topic([{"id": 1, "amount": 1, "customer": "ü"}])
    url = postgres + ("&" if "?" in postgres else "?") + "client_encoding=LATIN1"
    query_ = write(spark, kafka, topic, tmp_path / "ckpt", url=url, dbtable=table)
    error = str(query_.exception())
    assert "client_encoding" in error and "UTF8" in error, error[-2000:]
    assert not query(postgres, "SELECT 1 FROM pg_tables WHERE tablename = %s", (table,))
