"""Dead letters in the MySQL / MariaDB sink, against the real server:
refused rows go to ``deadLetterTable`` inside the task's XA transaction (a
refused INSERT is bisected statement by statement: InnoDB rolls back a
statement alone), the good rows to the target, each exactly once, through
a crashed and retried task too; without the option a refused row still
fails the batch and loses nothing."""

from __future__ import annotations

import json
import math
import uuid

import pyarrow as pa
import pymysql
import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType
from sqlalchemy.engine import make_url

from eoskit.connectors.mysql.transactions import MySQLTransactions
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.core import crash
from eoskit.testing.conformance import ConformanceTarget, Workload
from eoskit.testing.conformance.harness import Run
from eoskit.twophase.contract import CommitMode, Marker, SinkContext, SinkError
from eoskit.twophase.txn_id import TxnId

TABLE = ("(id bigint PRIMARY KEY, name varchar(5), amount int NOT NULL, score double, "
         "CONSTRAINT amount_positive CHECK (amount > 0)) ENGINE=InnoDB")
ARROW = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.int64()),
                   ("score", pa.float64()), ("offset", pa.int64())])
SPARK = StructType([StructField("id", LongType()), StructField("name", StringType()),
                    StructField("amount", LongType()), StructField("score", DoubleType()),
                    StructField("offset", LongType())])

#: row in task -> (row, column named in the error, the server's reason)
POISON = {
    3: ((3, "c", None, 1.0), "amount", "cannot be null"),
    4: ((4, "toolong", 4, 1.0), "name", "Data too long for column 'name'"),
    5: ((5, "e", -5, 1.0), "amount", "amount_positive"),
    6: ((1, "dup", 1, 1.0), "id", "Duplicate entry '1' for key"),
    8: ((7, "g", 3_000_000_000, 1.0), "amount", "Out of range value for column 'amount'"),
    9: ((9, "i", 9, math.nan), "score", "NaN or Infinity, which MySQL cannot store"),
}
ROWS = [(1, "a", 1, 0.5), (2, "b", 2, None), POISON[3][0], POISON[4][0], POISON[5][0],
        POISON[6][0], (6, "f", 6, 1.5), POISON[8][0], POISON[9][0], (8, "h", 8, 2.5)]


def query(url: str, sql: str, params=None) -> list[tuple]:
    u = make_url(url)
    conn = pymysql.connect(host=u.host, port=u.port, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
    finally:
        conn.close()


@pytest.fixture
def table(mysql):
    name = f"dl_{uuid.uuid4().hex[:10]}"
    yield name
    query(mysql, f"DROP TABLE IF EXISTS `{name}`")
    query(mysql, f"DROP TABLE IF EXISTS `{name}_dlq`")


def sink_for(url: str, table: str, commit: CommitMode = CommitMode.TWOPHASE,
             **options: str) -> MySQLTransactions:
    settings = SqlSinkSettings.parse({"url": url, "dbtable": table, "commitMode": commit.value,
                                      **options}, "eoskit-mysql", MySQLTransactions)
    sink = MySQLTransactions(settings, SPARK)
    sink.check(SPARK, SinkContext("dltest", "/nonexistent", commit))
    return sink


def arrow(rows: list[tuple]) -> list[pa.RecordBatch]:
    """The rows with offsets 100, 101, ... as two Arrow batches."""
    dicts = [dict(zip(ARROW.names, (*r, 100 + i))) for i, r in enumerate(rows)]
    return [pa.RecordBatch.from_pylist(dicts[a:b], schema=ARROW) for a, b in ((0, 3), (3, len(dicts)))]


def prepare(sink: MySQLTransactions, rows: list[tuple]):
    txn_id = str(TxnId.new("dltest", 7, 1, 0))
    writer = sink.begin_prepared(txn_id)
    try:
        for part in arrow(rows):
            writer.write(part)
        writer.prepare()
    except BaseException:
        writer.abort()
        raise
    return txn_id, writer


def dead_letters(url: str, table: str) -> list[tuple]:
    return query(url, f"SELECT sink_id, batch, task_partition, row_in_task, error, record, source "
                      f"FROM `{table}_dlq` ORDER BY batch, task_partition, row_in_task")


def prepared(url: str) -> list[str]:
    return [row[3].decode()[: int(row[1])] if isinstance(row[3], bytes) else str(row[3])[: int(row[1])]
            for row in query(url, "XA RECOVER")]


def test_refused_rows_go_to_the_dead_letter_table_inside_the_xa_transaction(mysql, table):
    query(mysql, f"CREATE TABLE `{table}` {TABLE}")
    sink = sink_for(mysql, table, deadLetterTable=f"{table}_dlq")
    txn_id, writer = prepare(sink, ROWS)
    assert (writer.rows, writer.dead_letters) == (len(ROWS), len(POISON))
    assert query(mysql, f"SELECT count(*) FROM `{table}`") == [(0,)]
    assert dead_letters(mysql, table) == []  # prepared, not visible
    assert sink.committer().commit(txn_id)
    assert query(mysql, f"SELECT id, name, amount FROM `{table}` ORDER BY id") == [
        (1, "a", 1), (2, "b", 2), (6, "f", 6), (8, "h", 8)]
    letters = dead_letters(mysql, table)
    assert [r[:4] for r in letters] == [("dltest", 7, 1, row) for row in sorted(POISON)]
    for (_, _, _, row, error, record, source) in letters:
        values, column, reason = POISON[row]
        assert error.startswith(f"MySQL refused a row for table {table}, column {column!r}: "), error
        assert reason in error and f"row {row} of batch 7, partition 1" in error, error
        expected = dict(zip(ARROW.names, (*values, 99 + row)))
        if row == 9:
            expected["score"] = "NaN"
        assert json.loads(record) == expected
        assert json.loads(source) == {"offset": 99 + row}  # carried, not a table column
    assert txn_id not in prepared(mysql)


def test_a_rolled_back_xa_transaction_takes_its_dead_letters_with_it(mysql, table):
    query(mysql, f"CREATE TABLE `{table}` {TABLE}")
    sink = sink_for(mysql, table, deadLetterTable=f"{table}_dlq")
    txn_id, _ = prepare(sink, ROWS)
    assert sink.committer().roll_back(txn_id)
    assert query(mysql, f"SELECT count(*) FROM `{table}`") == [(0,)]
    assert dead_letters(mysql, table) == []


def test_upsert_and_idempotent_mode(mysql, table):
    query(mysql, f"CREATE TABLE `{table}` {TABLE}")
    sink = sink_for(mysql, table, CommitMode.IDEMPOTENT, mode="upsert", key="id",
                    deadLetterTable=f"{table}_dlq")
    writer = sink.begin_marked(Marker(f"dl{uuid.uuid4().hex[:8]}", 3, 0), 0)
    assert writer.claim()
    for part in arrow([(1, "a", 1, 1.0), (2, "b", 2, 1.0), (2, "b2", -2, 1.0), (1, "a2", 5, 1.0)]):
        writer.write(part)
    writer.commit()
    assert query(mysql, f"SELECT id, name, amount FROM `{table}` ORDER BY id") == [(1, "a2", 5), (2, "b", 2)]
    assert [(r[3], json.loads(r[5])["name"]) for r in dead_letters(mysql, table)] == [(3, "b2")]


def test_a_row_over_max_allowed_packet_is_set_aside_before_it_is_sent(mysql, table):
    """The server drops the connection (and the XA transaction) on a packet
    over max_allowed_packet, so the sink must not send it. The server's
    limit is lowered for this sink only (it is global on the server)."""
    query(mysql, f"CREATE TABLE `{table}` (id bigint PRIMARY KEY, name longtext, amount int, "
                 "score double) ENGINE=InnoDB")
    sink = sink_for(mysql, table, deadLetterTable=f"{table}_dlq")
    sink._packet = 200_000
    txn_id, writer = prepare(sink, [(1, "a", 1, 1.0), (2, "x" * 300_000, 2, 1.0), (3, "c", 3, 1.0)])
    assert sink.committer().commit(txn_id)
    assert [r[0] for r in query(mysql, f"SELECT id FROM `{table}` ORDER BY id")] == [1, 3]
    [letter] = dead_letters(mysql, table)
    assert "over the server's max_allowed_packet (200000 bytes)" in letter[4] and letter[3] == 2
    record = json.loads(letter[5])  # cut to fit the statement, and still JSON
    assert record["truncated"] is True and record["head"].startswith('{"id":2,"name":"xxx')


def test_without_the_option_a_refused_row_fails_the_batch_and_loses_nothing(mysql, table):
    query(mysql, f"CREATE TABLE `{table}` {TABLE}")
    query(mysql, f"ALTER TABLE `{table}` ADD COLUMN `offset` bigint")
    query(mysql, f"INSERT INTO `{table}` (id, name, amount) VALUES (100, 'old', 1)")
    sink = sink_for(mysql, table)
    with pytest.raises(SinkError, match="MySQL refused a row|cannot be null|NaN"):
        prepare(sink, ROWS)
    assert query(mysql, f"SELECT id FROM `{table}`") == [(100,)]
    assert [t for t in prepared(mysql) if t.startswith("eoskit:dltest:")] == []
    assert query(mysql, "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_NAME = %s",
                 (f"{table}_dlq",)) == [(0,)]


# --- A Python worker killed after its XA PREPARE: Spark's retry writes both
# the good rows and the dead letters exactly once.

class PoisonedMySQLTarget(ConformanceTarget):
    """The conformance job's rows into a table whose CHECK refuses one id in
    ten (amount = 7 * id mod 1000 ends in 7 exactly when id ends in 1)."""

    format = "eoskit-mysql"

    def __init__(self, url: str) -> None:
        self.url = url

    def options(self, table: str) -> dict[str, str]:
        return {"url": self.url, "dbtable": table, "deadLetterTable": f"{table}_dlq"}

    def create_table(self, table: str) -> None:
        query(self.url, f"CREATE TABLE `{table}` (id bigint NOT NULL, amount bigint, customer text, "
                        "CONSTRAINT not_seven CHECK (amount MOD 10 <> 7)) ENGINE=InnoDB")

    def drop_table(self, table: str) -> None:
        query(self.url, f"DROP TABLE IF EXISTS `{table}`")
        query(self.url, f"DROP TABLE IF EXISTS `{table}_dlq`")

    def rows(self, table: str) -> list[tuple[int, int]]:
        return query(self.url, f"SELECT id, amount FROM `{table}`")

    def prepared(self, prefix: str) -> list[str]:
        return [t for t in prepared(self.url) if t.startswith(prefix)]

    def rollback(self, txn_id: str) -> None:
        query(self.url, f"XA ROLLBACK '{txn_id}'")


@pytest.mark.crash
def test_a_task_killed_after_xa_prepare_is_retried_exactly_once(kafka, mysql, tmp_path):
    workload = Workload.produce(kafka, records=2000, partitions=4, batches=2)
    target = PoisonedMySQLTarget(mysql)
    run = Run(target, workload, tmp_path)
    target.create_table(run.table)
    try:
        once = tmp_path / "crashed-once"
        code, log = run.run_job(**{crash.ENV: f"{crash.TASK_AFTER_PREPARE}@1", crash.ONCE_ENV: str(once)})
        assert once.exists(), "the crash point did not fire"
        assert code == 0, f"the retried task did not recover the batch (exit {code}):\n{log[-3000:]}"
        assert sorted(r[0] for r in target.rows(run.table)) == [i for i in range(2000) if i % 10 != 1]
        letters = dead_letters(mysql, run.table)
        assert sorted(json.loads(r[5])["id"] for r in letters) == [i for i in range(2000) if i % 10 == 1]
        assert {r[1] for r in letters} == {0, 1} and all("not_seven" in r[4] for r in letters)
        run.assert_nothing_prepared()
    finally:
        for txn in target.prepared(f"eoskit:{run.sink_id}:"):
            target.rollback(txn)
        target.drop_table(run.table)
