"""The files sink's names: staging entries, final names, partition directories."""

from __future__ import annotations

import pytest

from eoskit.connectors.files import layout
from eoskit.twophase.txn_id import TxnId


def test_final_names_are_deterministic_sortable_and_parse_back():
    name = layout.final_name("ck0123", 42, 3, 7, "snappy.parquet")
    assert name == "part-0000000042-00003-0007-ck0123.snappy.parquet"
    assert layout.final_name("ck0123", 42, 3, 7, "snappy.parquet") == name
    assert layout.parse_final_name(f"c=1/{name}") == layout.FinalName("ck0123", 42, 3, 7, "snappy.parquet")
    later = layout.final_name("ck0123", 100, 0, 0, "snappy.parquet")
    assert sorted([later, name]) == [name, later]
    assert layout.parse_final_name("part-00000-1b2c.c000.snappy.parquet") is None  # Spark's own


def test_staging_names_round_trip_a_transaction_id():
    txn = str(TxnId.new("my_sink-1", 12, 3, 1))
    for path, kind in ((layout.prepared_manifest(txn), "prepared"),
                       (layout.committed_manifest(txn), "committed"),
                       (layout.staging_dir(txn), "files")):
        assert path.startswith("_eoskit/staging/") and ":" not in path
        assert layout.parse_staging_entry(path) == layout.StagingEntry(txn, kind)
    assert layout.staged_file(txn, 3).endswith("/00003.staged")
    # The temporary file of an atomic write is nobody's manifest.
    assert layout.parse_staging_entry(layout.prepared_manifest(txn) + ".9f8e.tmp") is None
    assert layout.parse_staging_entry("_eoskit/staging/README") is None


def test_nothing_eoskit_keeps_looks_like_a_data_file():
    txn = str(TxnId.new("s", 1, 0, 0))
    for path in (layout.staged_file(txn, 0), layout.prepared_manifest(txn),
                 layout.committed_manifest(txn), layout.batch_manifest("s", 1), layout.sink_claim("s")):
        assert path.startswith("_eoskit/")
        assert not path.endswith((".parquet", ".json", ".gz", ".zst", ".bz2"))


@pytest.mark.parametrize("bad", ["eoskit:a.b:1:0:0x1", "a/b", ""])
def test_ids_that_cannot_name_a_directory_are_refused(bad):
    with pytest.raises(layout.LayoutError):
        layout.txn_name(bad)


def test_partition_values_are_escaped_as_spark_does_and_read_back():
    values = ["plain", "a/b", "x=y", "50%", "tab\there", "ünïcode", "colon:yes"]
    for value in values:
        segment = layout.partition_segment("c", value)
        assert "/" not in segment and segment.count("=") == 1
        assert layout.parse_partition_path(segment) == {"c": value}
    assert layout.partition_segment("c", "a/b") == "c=a%2Fb"
    assert layout.partition_path(["a", "b"], ["1", None]) == "a=1/b=__HIVE_DEFAULT_PARTITION__"
    assert layout.partition_segment("c", "") == "c=__HIVE_DEFAULT_PARTITION__"


def test_a_value_too_long_for_a_directory_name_is_refused_naming_the_column():
    with pytest.raises(layout.LayoutError, match="partition column 'city'.*255"):
        layout.partition_segment("city", "x" * 300)
