"""The files sink's protocol on S3 (moto's server), without Spark: staged
objects, a commit cut between an object store's copy and its delete, and
``eoskit txn`` naming the bucket. Checked with boto3 and pyarrow's own S3
client, not through eoskit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from pyspark.sql.types import LongType, StringType, StructField, StructType

from eoskit.connectors.files import committed_batches, layout
from eoskit.connectors.files.settings import FilesSettings
from eoskit.connectors.files.transactions import FilesTransactions
from eoskit.twophase.contract import CommitMode, SinkContext
from eoskit.twophase.coordinator import Coordinator
from eoskit.twophase.decision_log import DecisionLog
from eoskit.twophase.task import write_task

SCHEMA = StructType([StructField("id", LongType()), StructField("customer", StringType())])


class S3Harness:
    def __init__(self, endpoint: str, bucket: str, checkpoint: Path) -> None:
        self.options = {"fs.s3.endpoint_url": endpoint, "fs.s3.key": "testing", "fs.s3.secret": "testing"}
        self.path = f"s3://{bucket}/out"
        settings = FilesSettings.parse({"path": self.path, "partitionBy": "customer", **self.options},
                                       "eoskit-parquet", "parquet", FilesTransactions)
        self.sink = FilesTransactions(settings, SCHEMA)
        self.decisions = DecisionLog(str(checkpoint), "s3sink")
        self.sink.check(SCHEMA, SinkContext("s3sink", str(checkpoint), CommitMode.TWOPHASE))
        self.decisions.create()
        self.bucket = bucket
        self.s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                               aws_secret_access_key="testing", region_name="us-east-1")
        scheme, host = endpoint.split("://", 1)
        self.arrow_fs = pafs.S3FileSystem(access_key="testing", secret_key="testing",
                                          endpoint_override=host, scheme=scheme, region="us-east-1")

    def task(self, batch: int, partition: int, ids: range):
        rows = pa.record_batch({"id": pa.array(list(ids), pa.int64()),
                                "customer": pa.array([f"c{i % 2}" for i in ids])})
        return write_task(self.sink, self.decisions, CommitMode.TWOPHASE, iter([rows]),
                          identity=(batch, partition, 0))

    def keys(self, prefix: str = "out/") -> list[str]:
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def ids(self) -> list[int]:
        table = ds.dataset(f"{self.bucket}/out", format="parquet", partitioning="hive",
                           filesystem=self.arrow_fs).to_table()
        return sorted(table.column("id").to_pylist()) if table.num_columns else []


def test_a_commit_cut_between_copy_and_delete_finishes_without_duplicates(s3, s3_bucket, tmp_path):
    h = S3Harness(s3, s3_bucket, tmp_path / "ck")
    acks = [h.task(0, p, range(p * 20, p * 20 + 20)) for p in range(2)]
    staged = [k for k in h.keys() if k.endswith(".staged")]
    assert len(staged) == 4 and h.ids() == []  # staged objects are invisible to readers
    h.decisions.decide(0, [a.txn_id for a in acks], 40)
    # The driver died after copying one object to its final key, before deleting the staged one.
    manifest = json.loads(h.s3.get_object(Bucket=s3_bucket, Key=f"out/{layout.prepared_manifest(acks[0].txn_id)}")
                          ["Body"].read())
    first = manifest["files"][0]
    h.s3.copy_object(Bucket=s3_bucket, Key=f"out/{first['path']}",
                     CopySource={"Bucket": s3_bucket, "Key": f"out/{first['staged']}"})
    assert len(h.ids()) == 10  # mid-commit, a reader sees whole files only
    Coordinator(h.sink.committer(), h.decisions).commit(acks, 0)
    assert h.ids() == list(range(40))
    assert not [k for k in h.keys() if "/_eoskit/staging/" in k]
    [batch] = committed_batches(h.path, {"endpoint_url": s3, "key": "testing", "secret": "testing"})
    assert batch.rows == 40 and len(batch.files) == 4


def test_eoskit_txn_settles_a_bucket_by_its_path(s3, s3_bucket, tmp_path):
    h = S3Harness(s3, s3_bucket, tmp_path / "ck")
    decided = h.task(0, 0, range(10))
    h.decisions.decide(0, [decided.txn_id], 10)
    undecided = h.task(1, 0, range(10, 20))
    command = [str(Path(sys.executable).with_name("eoskit")), "txn", "list", "--path", h.path,
               "--checkpoint-dir", str(tmp_path / "ck"), "--sink-id", "s3sink",
               *(f"--option={k}={v}" for k, v in h.options.items())]
    listed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert f"{decided.txn_id}  batch 0  -> commit" in listed.stdout
    assert f"{undecided.txn_id}  batch 1  -> roll back" in listed.stdout
    assert "testing" not in listed.stdout  # credentials never printed
    command[2] = "resolve"
    resolved = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert resolved.returncode == 0, resolved.stderr
    assert "committed 1, rolled back 1" in resolved.stdout
    assert h.ids() == list(range(10))
    assert not [k for k in h.keys() if "/_eoskit/staging/" in k]
