"""The MySQL / MariaDB sink against the real server: modes, checks, types, bad input."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid

import pymysql
import pytest
from pyspark.sql import functions as F
from sqlalchemy.engine import make_url

SCHEMA = "id BIGINT, amount BIGINT, customer STRING"


def connect(url: str, **kwargs) -> pymysql.connections.Connection:
    u = make_url(url)
    return pymysql.connect(host=u.host, port=u.port, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True,
                           init_command="SET time_zone = '+00:00'", **kwargs)


def query(url: str, sql: str, params=None) -> list[tuple]:
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []
    finally:
        conn.close()


def prepared(url: str) -> list[tuple]:
    return [row for row in query(url, "XA RECOVER") if row[3].startswith(b"eoskit:")]


def grant(url: str, privileges: str, table: str, user: str) -> None:
    """GRANT, or, for a test account with ALL but no GRANT OPTION (the local
    dev server's), the same grant written to mysql.tables_priv directly."""
    try:
        query(url, f"GRANT {privileges} ON `{table}` TO %s@'%%'", (user,))
        return
    except pymysql.MySQLError as exc:
        if exc.args[0] not in (1142, 1044, 1045, 1227):
            raise
    database = make_url(url).database
    query(url, "INSERT INTO mysql.tables_priv (Host, Db, User, Table_name, Grantor, Table_priv) "
               "VALUES ('%%', %s, %s, %s, CURRENT_USER(), %s)",
          (database, user, table, privileges.title().replace(" ", "")))
    query(url, "FLUSH PRIVILEGES")


@pytest.fixture
def table(mysql) -> str:
    name = f"sink_{uuid.uuid4().hex[:10]}"
    yield name
    query(mysql, f"DROP TABLE IF EXISTS `{name}`")


def write(spark, kafka, topic, checkpoint, schema=SCHEMA, transform=None, **options):
    df = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", topic).option("startingOffsets", "earliest").load()
          .select(F.from_json(F.col("value").cast("string"), schema).alias("r")).select("r.*"))
    if transform is not None:
        df = transform(df)
    query_ = (df.writeStream.format("eoskit-mysql").options(**options)
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query_.awaitTermination(300)
    except Exception:  # noqa: BLE001 - a failed query raises here; callers read exception()
        pass
    return query_


def failure(spark, kafka, topic, tmp_path, **options) -> str:
    q = write(spark, kafka, topic, tmp_path / f"c{uuid.uuid4().hex[:6]}", **options)
    assert q.exception() is not None, "the query should have failed"
    return str(q.exception())


def test_upsert_creates_table_and_last_row_of_a_key_wins(spark, kafka, mysql, records_topic, table, tmp_path):
    rows = [{"id": i % 5, "amount": i, "customer": f"c{i}"} for i in range(20)]
    topic = records_topic(rows, partitions=1)
    q = write(spark, kafka, topic, tmp_path / "c", url=mysql, dbtable=table,
              mode="upsert", key="id", createTable="true")
    assert q.exception() is None
    got = sorted(query(mysql, f"SELECT id, amount, customer FROM `{table}`"))
    assert got == [(k, 15 + k, f"c{15 + k}") for k in range(5)]
    assert prepared(mysql) == []


def test_append_then_restart_continues_without_duplicates(spark, kafka, mysql, records_topic, produce_to, table, tmp_path):
    topic = records_topic([{"id": i, "amount": i, "customer": "x"} for i in range(10)])
    opts = dict(url=mysql, dbtable=table, createTable="true")
    assert write(spark, kafka, topic, tmp_path / "c", **opts).exception() is None
    produce_to(topic, {0: [(b"k", json.dumps({"id": 100, "amount": 100, "customer": "y"}).encode())]})
    assert write(spark, kafka, topic, tmp_path / "c", **opts).exception() is None
    assert sorted(r[0] for r in query(mysql, f"SELECT id FROM `{table}`")) == list(range(10)) + [100]
    assert prepared(mysql) == []


def test_at_least_once_mode_commits_in_tasks(spark, kafka, mysql, records_topic, table, tmp_path):
    topic = records_topic([{"id": i, "amount": i, "customer": "x"} for i in range(6)])
    q = write(spark, kafka, topic, tmp_path / "c", url=mysql, dbtable=table,
              createTable="true", commitMode="at_least_once")
    assert q.exception() is None
    assert query(mysql, f"SELECT count(*) FROM `{table}`")[0][0] == 6
    assert not (tmp_path / "c" / "eoskit").exists()  # no decision log in this mode


def test_idempotent_mode_commits_rows_with_markers(spark, kafka, mysql, records_topic, produce_to, table, tmp_path):
    markers = f"mk_{uuid.uuid4().hex[:8]}"
    topic = records_topic([{"id": i, "amount": i, "customer": "x"} for i in range(8)])
    opts = dict(url=mysql, dbtable=table, createTable="true", commitMode="idempotent",
                markerTable=markers, sinkId=f"idem{uuid.uuid4().hex[:8]}")
    try:
        assert write(spark, kafka, topic, tmp_path / "c", **opts).exception() is None
        produce_to(topic, {1: [(b"k", json.dumps({"id": 101, "amount": 1, "customer": "y"}).encode())]})
        assert write(spark, kafka, topic, tmp_path / "c", **opts).exception() is None
        assert sorted(r[0] for r in query(mysql, f"SELECT id FROM `{table}`")) == list(range(8)) + [101]
        assert query(mysql, f"SELECT count(*) FROM `{markers}` WHERE sink_id = %s",
                     (opts["sinkId"],))[0][0] >= 2
        assert prepared(mysql) == []
    finally:
        query(mysql, f"DROP TABLE IF EXISTS `{markers}`")


def test_types_round_trip(spark, kafka, mysql, records_topic, table, tmp_path):
    schema = ("id BIGINT, price DECIMAL(12,2), ok BOOLEAN, day DATE, at TIMESTAMP, "
              "name STRING, score DOUBLE")
    rows = [
        {"id": 1, "price": "12345.67", "ok": True, "day": "2024-02-29",
         "at": "2026-11-21T12:00:00.123456Z", "name": "it's a \\ \"quote\" é😀\n", "score": 0.1},
        {"id": 2, "price": None, "ok": False, "day": None, "at": None, "name": "", "score": None},
        {"id": 3, "price": "-0.01", "ok": None, "day": "1999-12-31",
         "at": "2000-01-01T00:00:00+02:00", "name": None, "score": -1e300},
    ]
    topic = records_topic(rows, partitions=1)
    q = write(spark, kafka, topic, tmp_path / "c", schema=schema,
              transform=lambda df: df.withColumn("raw", F.when(F.col("id") == 1, F.unhex(F.lit("00FF27")))
                                                 .when(F.col("id") == 3, F.lit(b"").cast("binary"))),
              url=mysql, dbtable=table, createTable="true", mode="upsert", key="id")
    assert q.exception() is None, q.exception()
    got = query(mysql, f"SELECT id, price, ok, day, at, name, score, raw FROM `{table}` ORDER BY id")
    assert got == [
        (1, decimal.Decimal("12345.67"), 1, datetime.date(2024, 2, 29),
         datetime.datetime(2026, 11, 21, 12, 0, 0, 123456), "it's a \\ \"quote\" é😀\n", 0.1,
         b"\x00\xff'"),
        (2, None, 0, None, None, "", None, None),
        (3, decimal.Decimal("-0.01"), None, datetime.date(1999, 12, 31),
         datetime.datetime(1999, 12, 31, 22, 0), None, -1e300, b""),
    ]


def test_timestamps_are_utc_in_timestamp_columns(spark, kafka, mysql, records_topic, table, tmp_path):
    query(mysql, f"CREATE TABLE `{table}` (id BIGINT, at TIMESTAMP(6) NULL, local_at DATETIME(6))")
    topic = records_topic([{"id": 1, "at": "2026-06-01T10:00:00Z", "local_at": "2026-06-01T10:00:00Z"}], 1)
    q = write(spark, kafka, topic, tmp_path / "c", schema="id BIGINT, at TIMESTAMP, local_at TIMESTAMP",
              url=mysql, dbtable=table)
    assert q.exception() is None, q.exception()
    assert query(mysql, f"SELECT UNIX_TIMESTAMP(at), local_at FROM `{table}`") == [
        (decimal.Decimal("1780308000.000000"), datetime.datetime(2026, 6, 1, 10, 0))]


def test_missing_table_is_refused_naming_it_when_creating_is_off(spark, kafka, mysql, records_topic, table, tmp_path):
    topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
    message = failure(spark, kafka, topic, tmp_path, url=mysql, dbtable=table, createTable="false")
    assert f"table {table} does not exist" in message and "createTable=false" in message


def test_column_type_the_dataframe_cannot_fill_is_refused(spark, kafka, mysql, records_topic, table, tmp_path):
    query(mysql, f"CREATE TABLE `{table}` (id bigint, amount bigint, customer integer)")
    topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
    message = failure(spark, kafka, topic, tmp_path, url=mysql, dbtable=table)
    assert "column 'customer' is INTEGER" in message and "but string in the DataFrame" in message


def test_upsert_needs_key_columns_and_a_unique_constraint(spark, kafka, mysql, records_topic, table, tmp_path):
    query(mysql, f"CREATE TABLE `{table}` (id bigint, amount bigint, customer text)")
    topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
    message = failure(spark, kafka, topic, tmp_path, url=mysql, dbtable=table, mode="upsert", key="order_id")
    assert "key column(s) order_id are not in the DataFrame" in message
    message = failure(spark, kafka, topic, tmp_path, url=mysql, dbtable=table, mode="upsert", key="id")
    assert "needs a primary key or unique constraint on (id)" in message
    try:  # refused when the source is built, or by the query
        message = failure(spark, kafka, topic, tmp_path, url=mysql, dbtable=table, mode="upsert")
    except Exception as exc:  # noqa: BLE001
        message = str(exc)
    assert "mode 'upsert' needs the option 'key'" in message


def test_myisam_table_is_refused_with_the_fix(spark, kafka, mysql, records_topic, table, tmp_path):
    query(mysql, f"CREATE TABLE `{table}` (id bigint, amount bigint, customer text) ENGINE=MyISAM")
    topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
    message = failure(spark, kafka, topic, tmp_path, url=mysql, dbtable=table)
    assert f"table {table} uses the MyISAM storage engine" in message
    assert f"ALTER TABLE `{table}` ENGINE=InnoDB" in message
    assert query(mysql, f"SELECT count(*) FROM `{table}`")[0][0] == 0


def test_user_without_rights_gets_the_grant_to_run(spark, kafka, mysql, records_topic, table, tmp_path):
    query(mysql, f"CREATE TABLE `{table}` (id bigint PRIMARY KEY, amount bigint, customer text)")
    user = f"ro_{uuid.uuid4().hex[:8]}"
    query(mysql, "CREATE USER %s@'%%' IDENTIFIED BY %s", (user, f"pw-{user}"))
    try:
        grant(mysql, "SELECT", table, user)
        url = make_url(mysql).set(username=user, password=f"pw-{user}").render_as_string(hide_password=False)
        topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
        message = failure(spark, kafka, topic, tmp_path, url=url, dbtable=table)
        database = make_url(mysql).database
        assert (f"user {user!r} lacks INSERT on {table}: GRANT INSERT ON `{database}`.`{table}` "
                f"TO '{user}'@'%'") in message
        message = failure(spark, kafka, topic, tmp_path, url=url, dbtable=table, mode="upsert", key="id")
        assert f"lacks INSERT, UPDATE on {table}: GRANT INSERT, UPDATE ON" in message
        assert f"pw-{user}" not in message
    finally:
        query(mysql, "DROP USER %s@'%%'", (user,))


def test_wrong_password_error_shows_no_secret(spark, kafka, mysql, records_topic, table, tmp_path):
    url = make_url(mysql).set(password="s3cret-value").render_as_string(hide_password=False)
    topic = records_topic([{"id": 1, "amount": 1, "customer": "x"}])
    message = failure(spark, kafka, topic, tmp_path, url=url, dbtable=table)
    assert "cannot connect to MySQL at" in message and "Access denied" in message
    assert "s3cret-value" not in message


def test_constraint_violation_fails_the_batch_and_keeps_what_was_committed(
    spark, kafka, mysql, records_topic, produce_to, table, tmp_path
):
    query(mysql, f"CREATE TABLE `{table}` (id bigint, amount bigint, customer text, "
                 "CONSTRAINT amount_positive CHECK (amount > 0))")
    topic = records_topic([{"id": i, "amount": i + 1, "customer": "x"} for i in range(4)])
    opts = dict(url=mysql, dbtable=table)
    assert write(spark, kafka, topic, tmp_path / "c", **opts).exception() is None
    produce_to(topic, {0: [(b"bad", json.dumps({"id": 50, "amount": -5, "customer": "x"}).encode())]})
    q = write(spark, kafka, topic, tmp_path / "c", **opts)
    assert q.exception() is not None and "amount_positive" in str(q.exception())
    assert f"MySQL refused a row for table {table}, column 'amount': " in str(q.exception())
    assert sorted(r[0] for r in query(mysql, f"SELECT id FROM `{table}`")) == [0, 1, 2, 3]
    assert prepared(mysql) == []


def test_a_second_query_with_the_same_sink_id_is_refused(spark, kafka, mysql, records_topic, table, tmp_path):
    topic = records_topic([{"id": i, "amount": i, "customer": "x"} for i in range(4)])
    sink_id = f"dup{uuid.uuid4().hex[:8]}"
    opts = dict(url=mysql, dbtable=table, createTable="true", sinkId=sink_id)
    assert write(spark, kafka, topic, tmp_path / "first", **opts).exception() is None
    q = write(spark, kafka, topic, tmp_path / "second", **opts)
    assert q.exception() is not None
    message = str(q.exception())
    assert f"sink id {sink_id!r}" in message and "belongs to the query with checkpoint" in message
    assert str(tmp_path / "first") in message
    assert query(mysql, f"SELECT count(*) FROM `{table}`")[0][0] == 4


def test_batch_write_is_refused_clearly(spark, mysql, table):
    df = spark.createDataFrame([(1,)], "id BIGINT")
    with pytest.raises(Exception, match="writes streaming queries only"):
        df.write.format("eoskit-mysql").option("url", mysql).option("dbtable", table).mode("append").save()


# --- Names as Spark's JDBC source reads them, and rows the server refuses.
# Most of these drive the sink's own transaction API against the server,
# without Spark: what is tested is what the server says and how the sink
# words it. One query shows the names end to end.

def sink_for(url: str, dbtable: str, columns: dict[str, str], **options):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from eoskit.connectors.mysql.transactions import MySQLTransactions
    from eoskit.connectors.sql.settings import SqlSinkSettings

    types = {"long": LongType(), "string": StringType()}
    schema = StructType([StructField(name, types[kind]) for name, kind in columns.items()])
    settings = SqlSinkSettings.parse({"url": url, "dbtable": dbtable, **options},
                                     "eoskit-mysql", MySQLTransactions)
    return MySQLTransactions(settings, schema)


def resolve_error(url: str, dbtable: str, columns: dict[str, str], **options) -> str:
    from eoskit.twophase.contract import SinkError

    with pytest.raises(SinkError) as caught:
        sink_for(url, dbtable, columns, **options).target
    return str(caught.value)


def test_dbtable_in_backticks_or_double_quotes_reaches_the_table(mysql, table):
    mixed = table.replace("sink_", "Sink_")
    database = make_url(mysql).database
    query(mysql, f"CREATE TABLE `{mixed}` (id bigint)")
    try:
        for dbtable in (f"`{mixed}`", f'"{mixed}"', mixed, f"`{database}`.`{mixed}`", f"{database}.{mixed}"):
            target = sink_for(mysql, dbtable, {"id": "long"}).target
            assert target.name == mixed, dbtable
        if query(mysql, "SELECT @@lower_case_table_names") == [(0,)]:
            message = resolve_error(mysql, table, {"id": "long"})
            assert message.startswith(f"table {table} does not exist; {mixed} does, but this server "
                                      "compares table and database names case-sensitively"), message
            assert f"set dbtable to {mixed}" in message
        message = resolve_error(mysql, f"`no_such_{table}`.t", {"id": "long"})
        assert message == f"database no_such_{table} of dbtable `no_such_{table}`.t does not exist"
    finally:
        query(mysql, f"DROP TABLE IF EXISTS `{mixed}`")


def test_dataframe_columns_find_table_columns_whatever_their_case(mysql, table):
    query(mysql, f"CREATE TABLE `{table}` (id bigint PRIMARY KEY, Amount bigint, customer text)")
    target = sink_for(mysql, table, {"ID": "long", "amount": "long", "Customer": "string"},
                      mode="upsert", key="Id").target
    assert target.column_of == {"ID": "id", "amount": "Amount", "Customer": "customer"}
    assert target.key == ("id",)
    message = resolve_error(mysql, table, {"id": "long", "amout": "long"})
    assert (f"cannot write to {table}: DataFrame column(s) 'amout' have no column in the table "
            "(DataFrame columns: id, amout; table columns: id, Amount, customer)") in message


def test_backquoted_dbtable_and_case_differing_columns_end_to_end(spark, kafka, mysql, records_topic, tmp_path):
    name = f"OrderItems_{uuid.uuid4().hex[:6]}"
    query(mysql, f"CREATE TABLE `{name}` (id bigint PRIMARY KEY, Amount bigint, customer text)")
    try:
        rows = [{"id": i % 3, "amount": i, "customer": f"c{i}"} for i in range(6)]
        topic = records_topic(rows, partitions=1)
        q = write(spark, kafka, topic, tmp_path / "c", url=mysql, dbtable=f"`{name}`",
                  mode="upsert", key="ID", transform=lambda df: df.toDF("ID", "amount", "CUSTOMER"))
        assert q.exception() is None, q.exception()
        assert sorted(query(mysql, f"SELECT id, Amount, customer FROM `{name}`")) == [
            (0, 3, "c3"), (1, 4, "c4"), (2, 5, "c5")]
        assert prepared(mysql) == []
    finally:
        query(mysql, f"DROP TABLE IF EXISTS `{name}`")


REFUSED_TABLE = ("(id bigint PRIMARY KEY, name varchar(5), amount int NOT NULL, "
                 "CONSTRAINT amount_positive CHECK (amount > 0))")


def refused(sink, rows: list[tuple]) -> str:
    """Write ``rows`` as one task of batch 7, partition 1 (in two Arrow
    batches, so two INSERTs), and return the error that refused them."""
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


@pytest.mark.parametrize("bad, column, reason, where", [
    ((3, "c", None), "amount", "Column 'amount' cannot be null (error 1048)", "row 3 of"),
    ((3, "abcdefgh", 1), "name", "Data too long for column 'name' at row 2 (error 1406)", "row 3 of"),
    ((3, "c", 3_000_000_000), "amount", "Out of range value for column 'amount' at row 2", "row 3 of"),
    ((3, "c", -1), "amount", "amount_positive", "in"),
    ((1, "c", 1), "id", "Duplicate entry '1' for key", "in"),  # MySQL 8: 'table.PRIMARY'
], ids=["not-null", "too-long", "out-of-range", "check", "duplicate-key"])
def test_a_refused_row_names_table_column_and_row(mysql, table, bad, column, reason, where):
    query(mysql, f"CREATE TABLE `{table}` {REFUSED_TABLE}")
    sink = sink_for(mysql, table, {"id": "long", "name": "string", "amount": "long"})
    message = refused(sink, [(1, "a", 1), (2, "b", 2), bad])
    assert message.startswith(f"MySQL refused a row for table {table}, column {column!r}: "), message
    assert reason in message and f"{where} batch 7, partition 1" in message, message
    assert query(mysql, f"SELECT count(*) FROM `{table}`") == [(0,)]
    assert [r for r in prepared(mysql) if r[3].startswith(b"eoskit:refused:")] == []
