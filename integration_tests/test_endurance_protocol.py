"""Every sink's commit protocol driven past batch 1,100 against the real services.

A job at a 1 s trigger makes 86,400 micro-batches a day; what acts every N
batches (decision pruning, marker pruning) must work at batch 1,100 as at
batch 10. These tests drive each sink and each commit mode exactly as Spark
does, without Spark's per-batch overhead: planning (``streamWriter``: check,
sweep, decision log), one ``write_task`` per partition with its identity,
then Spark's commit call (``TransactionalStreamWriter.commit``, also what
``foreach_batch`` calls). Spark's offset log is laid out beside them as Spark
keeps it (its last 100 batches), because pruning follows it. 1,305 batches
cross the 10-batch prune period 130 times.

What a test checks with a client of its own (psycopg, PyMySQL, pyarrow):
every row once, nothing prepared, and what the protocol keeps (decision
files, marker rows) the same at batch 1,305 as Spark's retention allows.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from eoskit.connectors.spark.datasource import TransactionalStreamWriter
from eoskit.twophase.task import write_task

BATCHES = 1305
PARTITIONS = 1  # one task a batch: what grows is per batch; other tests cover many tasks
RETAINED = 100  # Spark's default minBatchesToRetain
SCHEMA = StructType([StructField("id", LongType()), StructField("batch", LongType())])


def run_batches(data_source, options: dict[str, str], checkpoint: Path) -> TransactionalStreamWriter:
    """Plan once, then write and commit ``BATCHES`` batches as Spark would."""
    options = dict(options, checkpointLocation=str(checkpoint))
    writer = data_source(options).streamWriter(SCHEMA, False)
    offsets = checkpoint / "offsets"
    offsets.mkdir(parents=True, exist_ok=True)
    for batch in range(BATCHES):
        (offsets / str(batch)).write_text("v1")  # Spark logs the batch before its tasks run
        if batch >= RETAINED:
            (offsets / str(batch - RETAINED)).unlink()
        acks = []
        for partition in range(PARTITIONS):
            ident = batch * PARTITIONS + partition
            rows = pa.record_batch([pa.array([ident], pa.int64()), pa.array([batch], pa.int64())],
                                   names=["id", "batch"])
            acks.append(write_task(writer.sink, writer.decisions, writer.commit_mode,
                                   iter([rows]), identity=(batch, partition, 0)))
        writer.commit(acks, batch)
    return writer


def decision_files(checkpoint: Path) -> list[int]:
    found = checkpoint.glob("eoskit/sinks/*/decisions/*.json")
    return sorted(int(p.stem) for p in found)


EXPECTED_IDS = list(range(BATCHES * PARTITIONS))
# At batch 1,300 (the last prune) Spark's offset log held 1,201..1,300.
KEPT = list(range(BATCHES - 5 - RETAINED + 1, BATCHES))


def check_kept(mode: str, checkpoint: Path, marker_batches: list[int], evidence_rows: bool = False) -> None:
    """What a sink keeps is flat: the decisions (two-phase) and the marker
    rows of the batches Spark still retains, nothing older. ``evidence_rows``:
    the sink's two-phase transactions write an evidence row each into the
    marker table (MySQL's ProvesOutcomes), kept as long as their decisions."""
    if mode == "twophase":
        assert decision_files(checkpoint) == KEPT
    else:
        assert decision_files(checkpoint) == []
    if mode == "idempotent" or (mode == "twophase" and evidence_rows):
        assert sorted(set(marker_batches)) == KEPT
        assert len(marker_batches) == len(KEPT) * PARTITIONS
    else:
        assert marker_batches == []


@pytest.mark.parametrize("mode", ["twophase", "idempotent", "at_least_once"])
def test_postgres_commits_past_batch_1100_with_flat_metadata(postgres, tmp_path, mode):
    import psycopg
    from sqlalchemy.engine import make_url

    from eoskit.connectors.postgres.datasource import PostgresDataSource

    table, markers = f"endure_{uuid.uuid4().hex[:8]}", f"markers_{uuid.uuid4().hex[:8]}"
    checkpoint = tmp_path / "ck"
    run_batches(PostgresDataSource, {"url": postgres, "dbtable": table, "createTable": "true",
                                     "commitMode": mode, "markerTable": markers}, checkpoint)
    u = make_url(postgres)
    with psycopg.connect(host=u.host, port=u.port, user=u.username, password=u.password,
                         dbname=u.database, autocommit=True) as conn:
        assert [r[0] for r in conn.execute(f'SELECT id FROM "{table}" ORDER BY id')] == EXPECTED_IDS
        assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0] == 0
        has_markers = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (markers,)).fetchone()[0]
        marker_batches = ([r[0] for r in conn.execute(f'SELECT batch FROM "{markers}"')]
                          if has_markers else [])
    check_kept(mode, checkpoint, marker_batches)


#: Two-phase here costs MariaDB an XA session per task (about 30 s for the
#: run): the full tier's; PostgreSQL's two-phase run crosses the same batches
#: in the submission tier.
@pytest.mark.parametrize("mode", [pytest.param("twophase", marks=pytest.mark.full), "idempotent",
                                  "at_least_once"])
def test_mysql_commits_past_batch_1100_with_flat_metadata(mysql, tmp_path, mode):
    import pymysql
    from sqlalchemy.engine import make_url

    from eoskit.connectors.mysql.datasource import MySQLDataSource

    table, markers = f"endure_{uuid.uuid4().hex[:8]}", f"markers_{uuid.uuid4().hex[:8]}"
    checkpoint = tmp_path / "ck"
    run_batches(MySQLDataSource, {"url": mysql, "dbtable": table, "createTable": "true",
                                  "commitMode": mode, "markerTable": markers}, checkpoint)
    u = make_url(mysql)
    conn = pymysql.connect(host=u.host, port=u.port, user=u.username, password=u.password or "",
                           database=u.database, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id FROM `{table}` ORDER BY id")
            assert [r[0] for r in cur.fetchall()] == EXPECTED_IDS
            cur.execute("XA RECOVER")
            assert [r for r in cur.fetchall() if b"eoskit" in bytes(r[3])] == []
            cur.execute("SELECT count(*) FROM information_schema.tables "
                        "WHERE table_schema = DATABASE() AND table_name = %s", (markers,))
            if cur.fetchone()[0]:
                cur.execute(f"SELECT batch FROM `{markers}`")
                marker_batches = [r[0] for r in cur.fetchall()]
            else:
                marker_batches = []
    finally:
        conn.close()
    check_kept(mode, checkpoint, marker_batches, evidence_rows=True)


@pytest.mark.parametrize("mode", ["twophase", "at_least_once"])
def test_files_commit_past_batch_1100_with_flat_metadata(tmp_path, mode):
    from eoskit.connectors.files.datasource import ParquetDataSource

    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    run_batches(ParquetDataSource, {"path": str(out), "commitMode": mode}, checkpoint)
    table = ds.dataset(str(out), format="parquet").to_table()  # pyarrow skips _-prefixed paths
    assert sorted(table.column("id").to_pylist()) == EXPECTED_IDS
    check_kept(mode, checkpoint, [])
    staged = [p for p in out.rglob("*") if p.is_file() and "_eoskit" in p.parts
              and "staging" in str(p)]
    assert staged == []
    if mode == "twophase":  # the batch manifests, compacted every COMPACT_EVERY batches
        from eoskit.connectors.files import committed_batches, layout

        manifests = [p.name for p in (out / "_eoskit" / "batches").rglob("*") if p.is_file()]
        compacts = [n for n in manifests if n.startswith(layout.COMPACT_PREFIX)]
        assert len(compacts) == BATCHES // layout.COMPACT_EVERY, compacts
        assert len(manifests) - len(compacts) == BATCHES % layout.COMPACT_EVERY, sorted(manifests)[-3:]
        assert [m.batch for m in committed_batches(str(out))] == list(range(BATCHES))


def test_decision_pruning_on_s3_sees_what_spark_writes_meanwhile(s3, s3_storage_options, s3_bucket,
                                                                  monkeypatch):
    """On an object store, Spark's JVM writes and deletes the offset log's
    objects, not this process's file system object, whose listings s3fs
    caches for good: pruning must list afresh each time, or it prunes by
    the first listing forever and the decisions grow by one per batch."""
    import boto3
    import fsspec

    from eoskit.twophase.decision_log import DecisionLog, prune_due

    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3, "key": s3_storage_options["key"],
                                                   "secret": s3_storage_options["secret"]})
    spark_side = boto3.client("s3", endpoint_url=s3, aws_access_key_id=s3_storage_options["key"],
                              aws_secret_access_key=s3_storage_options["secret"], region_name="us-east-1")
    log = DecisionLog(f"s3a://{s3_bucket}/ck", "s1")
    log.create()
    for batch in range(35):
        spark_side.put_object(Bucket=s3_bucket, Key=f"ck/offsets/{batch}", Body=b"v1")
        if batch >= 10:  # Spark keeps its last 10 batches here
            spark_side.delete_object(Bucket=s3_bucket, Key=f"ck/offsets/{batch - 10}")
        log.mark_done(log.decide(batch, [f"t{batch}"], 1))
        if prune_due(batch):
            log.prune(batch)
    assert log.batches() == list(range(21, 35))  # pruned at batch 30, below its oldest offset 21
