"""Dead letters in the PostgreSQL sink, against the real server: refused rows
go to ``deadLetterTable`` in the task's own transaction, the good rows to the
target, each exactly once, through a crashed and retried task too; without
the option a refused row still fails the batch and loses nothing."""

from __future__ import annotations

import json
import uuid

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType
from sqlalchemy.engine import make_url

from eoskit.connectors.postgres.transactions import PostgresTransactions
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.core import crash
from eoskit.testing.conformance import ConformanceTarget, Workload
from eoskit.testing.conformance.harness import Run
from eoskit.twophase.contract import CommitMode, Marker, SinkContext, SinkError
from eoskit.runtime.devtools.services.kafka_topic import read_topic
from eoskit.twophase.txn_id import TxnId

TABLE = ("(id bigint PRIMARY KEY, name varchar(5), "
         "amount integer NOT NULL CONSTRAINT amount_positive CHECK (amount > 0))")
ARROW = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.int64()),
                   ("offset", pa.int64())])
SPARK = StructType([StructField("id", LongType()), StructField("name", StringType()),
                    StructField("amount", LongType()), StructField("offset", LongType())])

GOOD = [(1, "a", 1), (2, "b", 2)]
#: One row of each kind the server refuses, between good rows.
POISON = {
    3: ((3, "c", None), "amount", 'null value in column "amount"'),
    4: ((4, "toolong", 4), "name", "value too long for type character varying(5)"),
    5: ((5, "e", -5), "amount", 'violates check constraint "amount_positive"'),
    6: ((1, "dup", 1), "id", "duplicate key value violates unique constraint"),
    8: ((7, "g", 3_000_000_000), "amount", "out of range for type integer"),
}
ROWS = GOOD + [POISON[3][0], POISON[4][0], POISON[5][0], POISON[6][0], (6, "f", 6),
               POISON[8][0], (8, "h", 8)]


def pg(url: str) -> psycopg.Connection:
    u = make_url(url)
    return psycopg.connect(host=u.host, port=u.port, user=u.username, password=u.password,
                           dbname=u.database, autocommit=True)


def query(url: str, sql: str, params=()) -> list[tuple]:
    with pg(url) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def table(postgres):
    name = f"dl_{uuid.uuid4().hex[:10]}"
    yield name
    query(postgres, f"DROP TABLE IF EXISTS {name}")
    query(postgres, f"DROP TABLE IF EXISTS {name}_dlq")


def sink_for(url: str, table: str, commit: CommitMode = CommitMode.TWOPHASE,
             **options: str) -> PostgresTransactions:
    settings = SqlSinkSettings.parse({"url": url, "dbtable": table, "commitMode": commit.value,
                                      **options}, "eoskit-postgres", PostgresTransactions)
    sink = PostgresTransactions(settings, SPARK)
    sink.check(SPARK, SinkContext("dltest", "/nonexistent", commit))
    return sink


def arrow(rows: list[tuple]) -> list[pa.RecordBatch]:
    """The rows with offsets 100, 101, ... as two Arrow batches."""
    dicts = [dict(zip(ARROW.names, (*r, 100 + i))) for i, r in enumerate(rows)]
    return [pa.RecordBatch.from_pylist(dicts[a:b], schema=ARROW) for a, b in ((0, 3), (3, len(dicts)))]


def prepare(sink: PostgresTransactions, rows: list[tuple], batch: int = 7, partition: int = 1):
    txn_id = str(TxnId.new("dltest", batch, partition, 0))
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
                      f"FROM {table}_dlq ORDER BY batch, task_partition, row_in_task")


def test_refused_rows_go_to_the_dead_letter_table_with_the_batch(postgres, table):
    query(postgres, f"CREATE TABLE {table} {TABLE}")
    sink = sink_for(postgres, table, deadLetterTable=f"{table}_dlq")
    txn_id, writer = prepare(sink, ROWS)
    assert (writer.rows, writer.dead_letters) == (len(ROWS), len(POISON))
    # Prepared, not committed: neither the rows nor their dead letters are visible.
    assert query(postgres, f"SELECT count(*) FROM {table}") == [(0,)]
    assert dead_letters(postgres, table) == []
    assert sink.committer().commit(txn_id)
    assert query(postgres, f"SELECT id, name, amount FROM {table} ORDER BY id") == [
        (1, "a", 1), (2, "b", 2), (6, "f", 6), (8, "h", 8)]
    letters = dead_letters(postgres, table)
    assert [r[:4] for r in letters] == [("dltest", 7, 1, row) for row in sorted(POISON)]
    for (_, _, _, row, error, record, source) in letters:
        values, column, reason = POISON[row]
        assert error.startswith(f"PostgreSQL refused a row for table {table}, column {column!r}: ")
        assert reason in error and f"row {row} of batch 7, partition 1" in error, error
        assert json.loads(record) == dict(zip(ARROW.names, (*values, 99 + row)))
        # 'offset' is not a column of the table: carried to the dead letter only.
        assert json.loads(source) == {"offset": 99 + row}


def test_a_rolled_back_batch_takes_its_dead_letters_with_it(postgres, table):
    query(postgres, f"CREATE TABLE {table} {TABLE}")
    sink = sink_for(postgres, table, deadLetterTable=f"{table}_dlq")
    txn_id, _ = prepare(sink, ROWS)
    assert sink.committer().roll_back(txn_id)
    assert query(postgres, f"SELECT count(*) FROM {table}") == [(0,)]
    assert dead_letters(postgres, table) == []
    # A replay writes them once.
    txn_id, _ = prepare(sink, ROWS)
    assert sink.committer().commit(txn_id)
    assert len(dead_letters(postgres, table)) == len(POISON)


def test_upsert_sets_aside_rows_refused_by_the_merge(postgres, table):
    """A CHECK is checked by the merge from the staging table: the refused
    winner of a key is dead-lettered and the key's previous row of the
    batch is written instead, as if the refused row had never arrived."""
    query(postgres, f"CREATE TABLE {table} {TABLE}")
    sink = sink_for(postgres, table, CommitMode.IDEMPOTENT, mode="upsert", key="id",
                    deadLetterTable=f"{table}_dlq")
    rows = [(1, "a", 1), (2, "b", 2), (2, "b2", -2), (3, "c", 3), (3, "c2", None), (1, "a2", 5)]
    writer = sink.begin_marked(Marker(f"dl{uuid.uuid4().hex[:8]}", 3, 0), 0)
    assert writer.claim()
    for part in arrow(rows):
        writer.write(part)
    writer.commit()
    assert query(postgres, f"SELECT id, name, amount FROM {table} ORDER BY id") == [
        (1, "a2", 5), (2, "b", 2), (3, "c", 3)]
    letters = dead_letters(postgres, table)
    assert [(r[3], json.loads(r[5])["name"]) for r in letters] == [(3, "b2"), (5, "c2")]
    assert "amount_positive" in letters[0][4] and "row 3 of batch 3, partition 0" in letters[0][4]
    assert 'null value in column "amount"' in letters[1][4] and "eoskit_stage" not in letters[1][4]
    assert query(postgres, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'eoskit_stage_%%'") == [(0,)]


def test_without_the_option_a_refused_row_fails_the_batch_and_loses_nothing(postgres, table):
    query(postgres, f"CREATE TABLE {table} {TABLE}")
    query(postgres, f'ALTER TABLE {table} ADD COLUMN "offset" bigint')
    query(postgres, f"INSERT INTO {table} VALUES (100, 'old', 1)")
    sink = sink_for(postgres, table)
    with pytest.raises(SinkError, match="amount_positive|null value|too long|duplicate|out of range"):
        prepare(sink, ROWS)
    assert query(postgres, f"SELECT id FROM {table}") == [(100,)]
    assert query(postgres, "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'eoskit:dltest:%%'") == [(0,)]
    assert query(postgres, "SELECT to_regclass(%s)", (f"{table}_dlq",)) == [(None,)]


def test_a_dead_letter_table_the_task_could_not_fill_is_refused_at_start(postgres, table):
    query(postgres, f"CREATE TABLE {table} {TABLE}")
    query(postgres, f"CREATE TABLE {table}_dlq (sink_id text, batch bigint)")
    with pytest.raises(SinkError, match=f"the dead-letter table {table}_dlq .option 'deadLetterTable'. "
                                        "exists without column.s. task_partition, row_in_task"):
        sink_for(postgres, table, deadLetterTable=f"{table}_dlq")


def test_a_streaming_query_carries_the_kafka_source_position(spark, kafka, postgres, records_topic,
                                                              table, tmp_path):
    query(postgres, f"CREATE TABLE {table} (id bigint PRIMARY KEY, amount integer CHECK (amount > 0))")
    rows = [{"id": i, "amount": -i if i % 7 == 3 else i + 1} for i in range(40)]
    topic = records_topic(rows, partitions=2)
    df = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", topic).option("startingOffsets", "earliest").load()
          .select(F.from_json(F.col("value").cast("string"), "id BIGINT, amount BIGINT").alias("r"),
                  "topic", "partition", "offset").select("r.*", "topic", "partition", "offset"))
    q = (df.writeStream.format("eoskit-postgres").option("url", postgres).option("dbtable", table)
         .option("deadLetterTable", f"{table}_dlq")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert sorted(r[0] for r in query(postgres, f"SELECT id FROM {table}")) == [
        i for i in range(40) if i % 7 != 3]
    where = {int(r.key): (r.partition, r.offset) for r in read_topic(kafka, topic).records()}
    letters = dead_letters(postgres, table)
    assert sorted(json.loads(r[5])["id"] for r in letters) == [i for i in range(40) if i % 7 == 3]
    for letter in letters:
        record, source = json.loads(letter[5]), json.loads(letter[6])
        assert source == {"topic": topic, "partition": where[record["id"]][0],
                          "offset": where[record["id"]][1]}
        assert letter[2] == source["partition"]  # one task per Kafka partition here


# --- A Python worker killed after its prepare (two-phase) or its commit
# (idempotent): after Spark's retry, the good rows and the dead letters are
# each in exactly once.

class PoisonedPostgresTarget(ConformanceTarget):
    """The conformance job's rows into a table whose CHECK refuses one id in
    ten (amount = 7 * id mod 1000 ends in 7 exactly when id ends in 1)."""

    format = "eoskit-postgres"

    def __init__(self, url: str, commit_mode: str) -> None:
        self.url = url
        self.commit_mode = commit_mode

    def options(self, table: str) -> dict[str, str]:
        return {"url": self.url, "dbtable": table, "deadLetterTable": f"{table}_dlq",
                "commitMode": self.commit_mode}

    def create_table(self, table: str) -> None:
        query(self.url, f"CREATE TABLE {table} (id bigint NOT NULL, amount bigint "
                        "CHECK (mod(amount, 10) <> 7), customer text)")

    def drop_table(self, table: str) -> None:
        query(self.url, f"DROP TABLE IF EXISTS {table}")
        query(self.url, f"DROP TABLE IF EXISTS {table}_dlq")

    def rows(self, table: str) -> list[tuple[int, int]]:
        return query(self.url, f"SELECT id, amount FROM {table}")

    def prepared(self, prefix: str) -> list[str]:
        return [r[0] for r in query(self.url, "SELECT gid FROM pg_prepared_xacts "
                                              "WHERE left(gid, length(%s)) = %s", (prefix, prefix))]

    def rollback(self, txn_id: str) -> None:
        query(self.url, f"ROLLBACK PREPARED '{txn_id}'")


@pytest.mark.crash
@pytest.mark.parametrize("commit_mode, point", [
    ("twophase", crash.TASK_AFTER_PREPARE),
    pytest.param("idempotent", crash.TASK_AFTER_COMMIT, marks=pytest.mark.full)])
def test_a_killed_task_is_retried_exactly_once(kafka, postgres, commit_mode, point, tmp_path):
    workload = Workload.produce(kafka, records=2000, partitions=4, batches=2)
    target = PoisonedPostgresTarget(postgres, commit_mode)
    run = Run(target, workload, tmp_path)
    target.create_table(run.table)
    try:
        once = tmp_path / "crashed-once"
        code, log = run.run_job(**{crash.ENV: f"{point}@1", crash.ONCE_ENV: str(once)})
        assert once.exists(), "the crash point did not fire"
        assert code == 0, f"the retried task did not recover the batch (exit {code}):\n{log[-3000:]}"
        ids = sorted(r[0] for r in target.rows(run.table))
        assert ids == [i for i in range(2000) if i % 10 != 1]
        letters = dead_letters(postgres, run.table)
        assert sorted(json.loads(r[5])["id"] for r in letters) == [i for i in range(2000) if i % 10 == 1]
        assert {r[1] for r in letters} == {0, 1} and all("check constraint" in r[4] for r in letters)
        assert "dead-lettered to PostgreSQL table" in log
        run.assert_nothing_prepared()
    finally:
        for txn in target.prepared(f"eoskit:{run.sink_id}:"):
            target.rollback(txn)
        target.drop_table(run.table)
