"""The files sinks as conformance targets, read back by readers that share no
code with the sink: pyarrow.dataset (with pyarrow's own S3 client on S3) and
DuckDB, which must agree, plus Spark's plain reader on a local disk.
Prepared transactions and leftover staged files are listed with ``os`` /
boto3, not through eoskit. A "table" is a sub-directory (a prefix on S3) of
the root. Needs the test extra (duckdb, boto3)."""

from __future__ import annotations

import shutil
from pathlib import Path

import boto3
import duckdb
import fsspec
import pyarrow.dataset as ds
import pyarrow.fs as pafs
from botocore.config import Config

from eoskit.testing.conformance.target import PreparingTarget

STAGING = "_eoskit/staging/"


def txn_of(name: str) -> str:
    """A staging manifest's name back to its transaction id (``.`` spells ``:``)."""
    return name.rsplit("/", 1)[-1][: -len(".prepared")].replace(".", ":")


class LocalFilesTarget(PreparingTarget):
    format = "eoskit-parquet"

    def __init__(self, root: Path, spark) -> None:
        self.root, self.spark = root, spark

    def options(self, table: str) -> dict[str, str]:
        return {"path": str(self.root / table), "commitMode": "twophase"}

    def create_table(self, table: str) -> None:
        (self.root / table).mkdir(parents=True)

    def drop_table(self, table: str) -> None:
        shutil.rmtree(self.root / table, ignore_errors=True)

    def rows(self, table: str) -> list[tuple[int, int]]:
        path = self.root / table
        arrow = ds.dataset(path, format="parquet", partitioning="hive").to_table(columns=["id", "amount"])
        by_arrow = sorted(zip(arrow.column("id").to_pylist(), arrow.column("amount").to_pylist()))
        by_duckdb = sorted(duckdb.sql(f"SELECT id, amount FROM read_parquet('{path}/**/*.parquet')").fetchall())
        assert by_duckdb == by_arrow, "DuckDB and pyarrow disagree on the directory"
        by_spark = sorted((r.id, r.amount) for r in self.spark.read.parquet(str(path)).select("id", "amount").collect())
        assert by_spark == by_arrow, "Spark's plain reader and pyarrow disagree on the directory"
        return by_arrow

    def _staging(self) -> list[Path]:
        return list(self.root.glob(f"*/{STAGING}*"))

    def prepared(self, prefix: str) -> list[str]:
        ids = (txn_of(p.name) for p in self._staging() if p.name.endswith(".prepared"))
        return sorted(t for t in ids if t.startswith(prefix))

    def leftovers(self, table: str) -> list[str]:
        staging = self.root / table / STAGING
        return sorted(str(p) for p in staging.rglob("*")) if staging.exists() else []

    def kept(self, table: str, sink_id: str) -> dict[str, int]:
        """The sink's own files: staging, claims and the batch manifests
        (merged into one compact file every COMPACT_EVERY batches)."""
        root = self.root / table / "_eoskit"
        files = [p for p in root.rglob("*") if p.is_file()]
        return {"_eoskit files": len(files)}

    def rollback(self, txn_id: str) -> None:
        name = txn_id.replace(":", ".")
        for path in self.root.glob(f"*/{STAGING}{name}*"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    def resolve_command_for(self, table: str) -> list[str]:
        return ["--path", str(self.root / table)]


class LocalJsonTarget(LocalFilesTarget):
    """The same directory checks for ``eoskit-json`` (gzip JSON lines)."""

    format = "eoskit-json"

    def options(self, table: str) -> dict[str, str]:
        return {**super().options(table), "compression": "gzip"}

    def rows(self, table: str) -> list[tuple[int, int]]:
        path = self.root / table
        files = [str(p) for p in path.glob("*.json.gz")]
        arrow = ds.dataset(files, format="json").to_table(columns=["id", "amount"]) if files else None
        by_arrow = sorted(zip(arrow.column("id").to_pylist(), arrow.column("amount").to_pylist())) if files else []
        by_duckdb = sorted(duckdb.sql(
            f"SELECT id, amount FROM read_json_auto('{path}/**/*.json.gz')").fetchall()) if files else []
        assert by_duckdb == by_arrow, "DuckDB and pyarrow disagree on the directory"
        spark_rows = self.spark.read.schema("id BIGINT, amount BIGINT, customer STRING").json(str(path))
        assert sorted((r.id, r.amount) for r in spark_rows.select("id", "amount").collect()) == by_arrow
        return by_arrow


class S3FilesTarget(PreparingTarget):
    format = "eoskit-parquet"

    def __init__(self, endpoint: str, bucket: str) -> None:
        self.endpoint, self.bucket = endpoint, bucket
        self.client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                                   aws_secret_access_key="testing", region_name="us-east-1",
                                   config=Config(retries={"max_attempts": 3}))
        scheme, host = endpoint.split("://", 1)
        self.arrow_fs = pafs.S3FileSystem(access_key="testing", secret_key="testing",
                                          endpoint_override=host, scheme=scheme, region="us-east-1")

    def storage_options(self) -> dict[str, str]:
        return {"fs.s3.endpoint_url": self.endpoint, "fs.s3.key": "testing", "fs.s3.secret": "testing"}

    def options(self, table: str) -> dict[str, str]:
        return {"path": f"s3://{self.bucket}/{table}", "commitMode": "twophase", **self.storage_options()}

    def create_table(self, table: str) -> None:
        """Nothing: a prefix exists once something is written under it."""

    def _keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def drop_table(self, table: str) -> None:
        for key in self._keys(f"{table}/"):
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def rows(self, table: str) -> list[tuple[int, int]]:
        arrow = ds.dataset(f"{self.bucket}/{table}", format="parquet", partitioning="hive",
                           filesystem=self.arrow_fs).to_table(columns=["id", "amount"])
        by_arrow = sorted(zip(arrow.column("id").to_pylist(), arrow.column("amount").to_pylist()))
        connection = duckdb.connect()
        connection.register_filesystem(fsspec.filesystem(
            "s3", key="testing", secret="testing", client_kwargs={"endpoint_url": self.endpoint},
            skip_instance_cache=True))
        by_duckdb = sorted(connection.sql(
            f"SELECT id, amount FROM read_parquet('s3://{self.bucket}/{table}/**/*.parquet')").fetchall())
        assert by_duckdb == by_arrow, "DuckDB and pyarrow disagree on the prefix"
        return by_arrow

    def prepared(self, prefix: str) -> list[str]:
        ids = (txn_of(k) for k in self._keys() if f"/{STAGING}" in k and k.endswith(".prepared"))
        return sorted(t for t in ids if t.startswith(prefix))

    def leftovers(self, table: str) -> list[str]:
        return self._keys(f"{table}/{STAGING}")

    def rollback(self, txn_id: str) -> None:
        name = txn_id.replace(":", ".")
        for key in self._keys():
            if f"/{STAGING}{name}" in key:
                self.client.delete_object(Bucket=self.bucket, Key=key)

    def resolve_command_for(self, table: str) -> list[str]:
        return ["--path", f"s3://{self.bucket}/{table}",
                *(f"--option={k}={v}" for k, v in self.storage_options().items())]
