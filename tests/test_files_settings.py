"""The files sink's options: declared once, checked once, errors that name the option."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from eoskit.connectors.files import FilesSink
from eoskit.connectors.files.datasource import JsonDataSource, ParquetDataSource
from eoskit.connectors.files.settings import OPTIONS, FilesSettings
from eoskit.connectors.files.transactions import FilesTransactions
from eoskit.core.options import OptionError
from eoskit.twophase.contract import CommitMode, SinkError


def parse(fmt: str = "parquet", **options: str) -> FilesSettings:
    return FilesSettings.parse(options, f"eoskit-{fmt}", fmt, FilesTransactions)


def test_defaults_follow_sparks_own_file_sinks(tmp_path):
    parquet = parse(path=str(tmp_path))
    assert (parquet.compression, parquet.extension, parquet.codec) == ("snappy", "snappy.parquet", "snappy")
    assert parquet.commit_mode is CommitMode.TWOPHASE
    assert parquet.max_records_per_file == 0 and parquet.partition_by == ()
    json_ = parse("json", path=str(tmp_path))
    assert (json_.compression, json_.extension, json_.codec) == ("none", "json", None)
    assert parse("json", path=str(tmp_path), compression="GZIP").extension == "json.gz"
    assert parse(path=str(tmp_path), compression="uncompressed").codec == "none"


def test_paths_are_normalised_on_the_driver(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse(path="out/").path == str(tmp_path / "out")
    assert parse(path=f"file:{tmp_path}/x").path == f"{tmp_path}/x"  # Hadoop's file:/path
    assert parse(path="s3a://bucket/data/").path == "s3://bucket/data"


@pytest.mark.parametrize("fmt, codec, words", [
    ("parquet", "lzo", "pyarrow cannot write LZO"),
    ("json", "snappy", "Hadoop's snappy framing"),
    ("parquet", "zip", "brotli, gzip, lz4"),
])
def test_a_compression_the_format_cannot_write_is_refused(tmp_path, fmt, codec, words):
    with pytest.raises(OptionError, match=f"option 'compression' = '{codec}'.*{words}"):
        parse(fmt, path=str(tmp_path), compression=codec)


def test_missing_path_and_unknown_options_are_named(tmp_path):
    with pytest.raises(OptionError, match="needs the option 'path'"):
        parse()
    with pytest.raises(OptionError, match="Did you mean 'maxRecordsPerFile'"):
        parse(path=str(tmp_path), maxRecordPerFile="5")
    with pytest.raises(OptionError, match="option 'maxRecordsPerFile' = '-1'"):
        parse(path=str(tmp_path), maxRecordsPerFile="-1")
    with pytest.raises(OptionError, match="names a column twice"):
        parse(path=str(tmp_path), partitionBy="a, b,a")
    with pytest.raises(SinkError, match="'commitMode' = 'idempotent': files supports exactly_once, twophase, at_least_once"):
        parse(path=str(tmp_path), commitMode="idempotent")  # no marked commit for files


def test_a_file_system_whose_package_is_missing_names_the_package():
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    with pytest.raises(OptionError, match=r"gs:// file system needs the Python package 'gcsfs'.*pip install gcsfs"):
        parse(path="gs://bucket/out")
    with pytest.raises(OptionError, match="fsspec knows no file system 'nosuchfs'"):
        parse(path="nosuchfs://x/y")


def test_storage_options_are_passed_to_fsspec_typed(tmp_path):
    settings = parse(path="s3://bucket/out", **{
        "fs.s3.endpoint_url": "http://127.0.0.1:9000", "fs.s3.anon": "false",
        "fs.s3.secret": "12345", "fs.s3.default_block_size": "5242880",
        "fs.s3.client_kwargs": '{"region_name": "eu-west-1"}'})
    assert settings.storage_options == {
        "endpoint_url": "http://127.0.0.1:9000", "anon": False, "secret": "12345",
        "default_block_size": 5242880, "client_kwargs": {"region_name": "eu-west-1"},
        # networkTimeout (30 s by default) bounds every S3 request
        "config_kwargs": {"connect_timeout": 30, "read_timeout": 30,
                          "retries": {"max_attempts": 3, "mode": "standard"}}}
    assert "12345" not in repr(settings)
    with pytest.raises(OptionError, match="'fs.gcs.token' is for the gcs:// file system, but 'path' is on s3://"):
        parse(path="s3://bucket/out", **{"fs.gcs.token": "x"})


def test_s3_requests_are_bounded_by_network_timeout_unless_config_kwargs_says_otherwise():
    bounded = parse(path="s3://bucket/out", networkTimeout="7").storage_options["config_kwargs"]
    assert (bounded["connect_timeout"], bounded["read_timeout"]) == (7, 7)
    given = parse(path="s3://bucket/out", networkTimeout="7",
                  **{"fs.s3.config_kwargs": '{"read_timeout": 120}'}).storage_options["config_kwargs"]
    assert given["read_timeout"] == 120 and given["connect_timeout"] == 7
    assert "config_kwargs" not in parse(path=str(Path("/tmp/out"))).storage_options
    with pytest.raises(OptionError, match="'networkTimeout'"):
        parse(path="s3://bucket/out", networkTimeout="0")


def test_data_sources_refuse_a_per_process_file_system():
    with pytest.raises(OptionError, match="memory:// file system lives in one process"):
        ParquetDataSource({"path": "memory://out", "checkpointLocation": "/tmp/c"})
    assert JsonDataSource({"path": "/tmp/x"}).settings.format == "json"


def test_pipeline_sink_checks_its_options_when_built(tmp_path):
    sink = FilesSink(str(tmp_path), "json", partition_by=["day", "country"], options={"compression": "gzip"})
    assert sink.all_options() == {"path": str(tmp_path), "partitionBy": "day,country", "compression": "gzip"}
    assert sink.describe() == f"eoskit-json ({tmp_path})"
    with pytest.raises(OptionError, match="choose parquet or json"):
        FilesSink(str(tmp_path), "csv")
    with pytest.raises(OptionError, match="compression"):
        FilesSink(str(tmp_path), options={"compression": "lzo"})


def test_docs_table_matches_the_declarations():
    docs = (Path(__file__).parents[1] / "docs" / "files-sink.md").read_text()
    block = docs.split("<!-- options:begin -->\n")[1].split("<!-- options:end -->")[0]
    assert block.strip() == "\n".join(OPTIONS.docs()), (
        "docs/files-sink.md is out of date: regenerate it with scripts/options_docs.py")

