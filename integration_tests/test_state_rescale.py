"""``eoskit state rescale`` on real checkpoints: a stateful job stops, its
state is repartitioned by Spark's offline state repartition, more input
arrives, and the next run continues exactly once -- the totals in
PostgreSQL are the totals of the input. And the refusals: a last batch that
did not commit is refused, a repartition Spark fails half-way is rolled
back; both leave the checkpoint as it was, byte for byte."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import uuid
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import functions as F
from sqlalchemy.engine import make_url

from eoskit.connectors.kafka import KafkaSource
from eoskit.connectors.postgres import PostgresSink
from eoskit.runtime import Pipeline
from eoskit.runtime.state.checkpoints import Checkpoint
from eoskit.runtime.cli.main import main
from eoskit.runtime.job.control import ControlDir
from eoskit.runtime.job.jobfile import load_module
from eoskit.runtime.state.inspection import summarize
from eoskit.runtime.state.rescale import JOURNAL, RescaleFailed, rescale

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "keyed_state.py"
ORDER = "id long, customer string, amount long"


def orders(start: int, stop: int) -> list[dict]:
    return [{"id": i, "customer": f"c{i % 7}", "amount": i} for i in range(start, stop)]


def expected(rows: list[dict]) -> list[tuple[str, int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for row in rows:
        total, count = out.get(row["customer"], (0, 0))
        out[row["customer"]] = (total + row["amount"], count + 1)
    return sorted((c, t, n) for c, (t, n) in out.items())


def pg_rows(url: str, sql: str) -> list[tuple]:
    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, password=u.password,
                         dbname=u.database, autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


def totals_in(postgres: str, table: str) -> list[tuple]:
    return pg_rows(postgres, f'SELECT customer, total, orders FROM "{table}" ORDER BY 1')


def partitions(spark, ck: str) -> set[int]:
    return {row.partitions for row in summarize(spark, ck).rows}


def digest(location: str) -> dict[str, str]:
    root = Path(location)
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not str(p.relative_to(root)).startswith("eoskit/")}


def kafka_totals(df):
    parsed = df.select(F.from_json(F.col("value").cast("string"), ORDER).alias("o")).select("o.*")
    return parsed.groupBy("customer").agg(F.sum("amount").alias("total"), F.count("*").alias("orders"))


def test_running_totals_rescaled_up_then_down_continue_exactly_once_into_postgres(
        spark, kafka, postgres, records_topic, produce_to, tmp_path, capsys):
    table, ck = f"rescaled_{uuid.uuid4().hex[:8]}", str(tmp_path / "ck")
    sent = orders(0, 40)
    topic = records_topic(sent, partitions=2)
    pipeline = Pipeline(
        "rescaled_totals", KafkaSource(kafka, {"subscribe": topic, "startingOffsets": "earliest"}),
        PostgresSink(postgres, table, {"mode": "upsert", "key": "customer", "createTable": "true"},
                     output_mode="update"),
        transform=kafka_totals, state_backend="rocksdb")

    def more(rows: list[dict]) -> None:
        sent.extend(rows)
        produce_to(topic, {p: [(str(r["id"]).encode(), json.dumps(r).encode()) for r in rows if r["id"] % 2 == p]
                           for p in (0, 1)})

    def run() -> None:
        pipeline.run(ck, until_caught_up=True, spark=spark, out=io.StringIO())
        assert totals_in(postgres, table) == expected(sent)

    run()
    assert partitions(spark, ck) == {2}
    before = Checkpoint(ck).latest_committed()

    assert main(["state", "rescale", "--checkpoint-dir", ck, "--partitions", "4"]) == 0
    assert f"from 2 to 4 partitions" in capsys.readouterr().out
    assert Checkpoint(ck).latest_committed() == before + 1  # the repartition batch, no input
    assert partitions(spark, ck) == {4}
    more(orders(40, 80))
    run()
    assert partitions(spark, ck) == {4}

    down = rescale(spark, ck, 1).repartition_batch
    more(orders(80, 100))
    run()
    assert partitions(spark, ck) == {1}
    (sink,) = Checkpoint(ck).sinks()
    assert before + 1 not in sink.decided_batches and down not in sink.decided_batches  # no output of their own
    assert pg_rows(postgres, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'eoskit:%'") == []
    assert not (Path(ck) / JOURNAL).exists() and ControlDir(ck).live_run() is None


def test_transform_with_state_is_rescaled_and_its_value_state_carries_on(
        spark, postgres, json_files, tmp_path):
    examples = load_module(EXAMPLES, "eoskit_examples_keyed_state")
    table, ck = f"tws_rescaled_{uuid.uuid4().hex[:8]}", str(tmp_path / "ck")
    source, sent = json_files(ORDER), orders(0, 30)
    source.add(*sent[:15])
    source.add(*sent[15:])
    pipeline = Pipeline(
        "tws_totals", source,
        PostgresSink(postgres, table, {"mode": "upsert", "key": "customer", "createTable": "true"},
                     output_mode="update"),
        transform=lambda df: examples.running_totals(df.select("customer", "amount")), state_backend="rocksdb")
    pipeline.run(ck, until_caught_up=True, spark=spark, out=io.StringIO())
    assert totals_in(postgres, table) == expected(sent)
    rescale(spark, ck, 3)
    assert partitions(spark, ck) == {3}
    extra = orders(30, 50)
    source.add(*extra)
    pipeline.run(ck, until_caught_up=True, spark=spark, out=io.StringIO())
    assert totals_in(postgres, table) == expected(sent + extra)  # every key's state found in its new partition


def test_an_uncommitted_last_batch_is_refused_and_a_failed_repartition_rolled_back(
        spark, json_files, gathered, tmp_path, capsys):
    ck = str(tmp_path / "ck")
    source = json_files(ORDER)
    source.add(*orders(0, 10))
    source.add(*orders(10, 20))
    Pipeline("counted", source, gathered(), transform=lambda df: df.groupBy("customer").count(),
             state_backend="rocksdb").run(ck, until_caught_up=True, spark=spark, out=io.StringIO())
    commits = Path(ck) / "commits"
    assert Checkpoint(ck).latest_committed() == 1

    # The job died in batch 1, after its offsets and before its commit.
    kept = tmp_path / "kept"
    kept.mkdir()
    for name in ("1", ".1.crc"):
        shutil.move(commits / name, kept / name)
    before = digest(ck)
    assert main(["state", "rescale", "--checkpoint-dir", ck, "--partitions", "4"]) == 2
    assert "its last batch 1 did not commit (offsets/1 has no commits/1)" in capsys.readouterr().err
    assert digest(ck) == before
    for name in ("1", ".1.crc"):
        shutil.move(kept / name, commits / name)

    # State Spark cannot read: it fails after writing the repartition batch's offsets.
    (latest,) = [p for p in (Path(ck) / "state/0/0").iterdir() if p.name.split(".")[0].split("_")[0] == "2"
                 and not p.name.startswith(".")]
    latest.write_bytes(b"not a state file")
    before = digest(ck)
    with pytest.raises(RescaleFailed) as err:
        rescale(spark, ck, 4)
    assert "the checkpoint is unchanged (rolled back" in str(err.value)
    assert int(str(err.value).split("(rolled back ")[1].split()[0]) >= 2  # offsets/2 and its .crc at least
    assert digest(ck) == before
    assert not (Path(ck) / JOURNAL).exists() and ControlDir(ck).live_run() is None
