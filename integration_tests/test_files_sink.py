"""The files sink from Spark, on a local disk and on S3 (moto's server):
formats, partitions, restarts, bad input; read back by readers that are
not eoskit (pyarrow, DuckDB, Spark's own readers)."""

from __future__ import annotations

import importlib.util
import json
import os

import duckdb
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest
from pyspark.sql import functions as F

from eoskit.connectors.files import committed_batches

SCHEMA = "id BIGINT, amount BIGINT, customer STRING"


def rows(start: int, count: int) -> list[dict]:
    return [{"id": i, "amount": i * 7 % 1000, "customer": f"c{i % 3}"} for i in range(start, start + count)]


def write(spark, kafka, topic, checkpoint, fmt="eoskit-parquet", path=None, **options):
    df = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", topic).option("startingOffsets", "earliest").load()
          .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r")).select("r.*"))
    writer = (df.writeStream.format(fmt).options(**options)
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    query = writer.start(path) if path else writer.start()
    try:
        query.awaitTermination(300)
    except Exception:  # noqa: BLE001 - a failed query is inspected through query.exception()
        pass
    return query


def duckdb_ids(pattern: str, reader: str = "read_parquet") -> list[int]:
    return sorted(r[0] for r in duckdb.sql(f"SELECT id FROM {reader}('{pattern}')").fetchall())


def test_parquet_partitioned_read_by_every_reader_and_a_restart_continues(
        spark, kafka, records_topic, produce_to, tmp_path):
    topic = records_topic(rows(0, 30))
    out, checkpoint = str(tmp_path / "out"), tmp_path / "ck"
    q = write(spark, kafka, topic, checkpoint, path=out, partitionBy="customer", maxRecordsPerFile="4")
    assert q.exception() is None
    produce_to(topic, {0: [(b"30", json.dumps(rows(30, 1)[0]).encode())]})
    q = write(spark, kafka, topic, checkpoint, path=out, partitionBy="customer", maxRecordsPerFile="4")
    assert q.exception() is None
    expected = list(range(31))
    table = ds.dataset(out, format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("id").to_pylist()) == expected
    assert sorted(set(table.column("customer").to_pylist())) == ["c0", "c1", "c2"]
    assert duckdb_ids(f"{out}/**/*.parquet") == expected
    back = spark.read.parquet(out)
    assert sorted(r.id for r in back.select("id").collect()) == expected
    assert back.agg(F.sum("amount")).first()[0] == sum(i * 7 % 1000 for i in expected)
    batches = committed_batches(out)
    assert sum(b.rows for b in batches) == 31 and len(batches) >= 2
    assert os.listdir(f"{out}/_eoskit/staging") == []
    # maxRecordsPerFile: no file holds more than 4 rows.
    counts = duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/**/*.parquet', filename=true) "
                        "GROUP BY filename").fetchall()
    assert max(c[0] for c in counts) <= 4


def test_json_lines_gzip_read_by_spark_and_duckdb(spark, kafka, records_topic, tmp_path):
    topic = records_topic(rows(0, 50))
    out = str(tmp_path / "out")
    q = write(spark, kafka, topic, tmp_path / "ck", "eoskit-json", path=out, compression="gzip")
    assert q.exception() is None
    names = [n for n in os.listdir(out) if not n.startswith("_")]
    assert names and all(n.endswith(".json.gz") for n in names)
    assert duckdb_ids(f"{out}/*.json.gz", "read_json_auto") == list(range(50))
    back = spark.read.schema(SCHEMA).json(out)
    assert sorted(r.id for r in back.select("id").collect()) == list(range(50))
    assert {r.customer for r in back.select("customer").collect()} == {"c0", "c1", "c2"}


def test_s3_output_read_back_through_pyarrows_own_s3_client(
        spark, kafka, records_topic, s3, s3_bucket, tmp_path):
    topic = records_topic(rows(0, 40))
    out = f"s3://{s3_bucket}/orders"
    storage = {"fs.s3.endpoint_url": s3, "fs.s3.key": "testing", "fs.s3.secret": "testing"}
    q = write(spark, kafka, topic, tmp_path / "ck", path=out, partitionBy="customer", **storage)
    assert q.exception() is None
    endpoint = s3.split("://", 1)
    s3fs_ = pafs.S3FileSystem(access_key="testing", secret_key="testing", endpoint_override=endpoint[1],
                              scheme=endpoint[0], region="us-east-1")
    table = ds.dataset(f"{s3_bucket}/orders", format="parquet", partitioning="hive",
                       filesystem=s3fs_).to_table()
    assert sorted(table.column("id").to_pylist()) == list(range(40))
    staged = s3fs_.get_file_info(pafs.FileSelector(f"{s3_bucket}/orders/_eoskit/staging",
                                                   recursive=True, allow_not_found=True))
    assert staged == []
    [batch] = committed_batches(out, {"endpoint_url": s3, "key": "testing", "secret": "testing"})
    assert batch.rows == 40 and len(batch.files) == 6  # 2 tasks x 3 customers


def test_a_partition_column_missing_from_the_dataframe_stops_the_query_before_writing(
        spark, kafka, records_topic, tmp_path):
    topic = records_topic(rows(0, 5))
    out = tmp_path / "out"
    q = write(spark, kafka, topic, tmp_path / "ck", path=str(out), partitionBy="country")
    assert q.exception() is not None
    assert "partition column 'country' (option 'partitionBy') is not a column of the DataFrame" in str(q.exception())
    assert not any(n for n in (os.listdir(out) if out.exists() else []) if not n.startswith("_"))


def test_a_path_whose_file_system_package_is_missing_names_the_package(spark, kafka, records_topic, tmp_path):
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    topic = records_topic(rows(0, 1))
    try:
        error = str(write(spark, kafka, topic, tmp_path / "ck", path="gs://bucket/out").exception())
    except Exception as exc:  # noqa: BLE001 - Spark may raise it from start() instead
        error = str(exc)
    assert "the gs:// file system needs the Python package 'gcsfs'" in error
