"""Dead letters without a server: the bisection that finds refused rows,
rows as JSON, source columns, the options, the ack's count."""

from __future__ import annotations

import json
import pickle
from datetime import datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from eoskit.connectors.dead_letters import (
    SQL_SOURCE_DEFAULT,
    cut_json,
    dead_letter,
    isolate,
    record_json,
    source_columns,
)
from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings
from eoskit.core.options import OptionError
from eoskit.connectors.postgres.transactions import PostgresTransactions
from eoskit.connectors.sql.settings import SqlSinkSettings
from eoskit.twophase.contract import SinkError
from eoskit.twophase.messages import CommittedByTask, PreparedTransaction, dead_letters


class Refused(Exception):
    pass


def writer(bad: set[int], log: list[tuple[int, int]], written: list[int]):
    """An atomic writer of rows [start, start + length) that refuses any
    range holding a row of ``bad``."""
    def attempt(start: int, length: int) -> None:
        log.append((start, length))
        rows = range(start, start + length)
        if bad.intersection(rows):
            raise Refused(f"row {min(bad.intersection(rows))}")
        written.extend(rows)
    return attempt


def test_a_batch_without_refusals_is_one_attempt():
    log, written = [], []
    assert isolate(1000, writer(set(), log, written), lambda e: isinstance(e, Refused)) == []
    assert log == [(0, 1000)] and written == list(range(1000))


@pytest.mark.parametrize("bad", [{0}, {999}, {3, 4, 500}, set(range(0, 1000, 97))])
def test_bisection_writes_every_good_row_once_and_returns_the_refused(bad):
    log, written = [], []
    found = isolate(1000, writer(bad, log, written), lambda e: isinstance(e, Refused))
    assert [i for i, _ in found] == sorted(bad)
    assert all(str(e) == f"row {i}" for i, e in found)
    assert sorted(written) == [i for i in range(1000) if i not in bad]
    assert len(written) == len(set(written))
    # Bisection: a few attempts per refused row, never one per row.
    assert len(log) <= 1 + 2 * len(bad) * 10


def test_any_other_error_is_not_bisected():
    def attempt(start: int, length: int) -> None:
        raise ConnectionError("server gone")
    with pytest.raises(ConnectionError):
        isolate(10, attempt, lambda e: isinstance(e, Refused))


def test_a_row_is_json_with_binary_in_base64_and_exact_decimals():
    batch = pa.RecordBatch.from_pylist([{
        "id": 1, "blob": b"\x00\xff", "price": Decimal("12.30"), "ratio": float("nan"),
        "at": datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc), "tags": ["a", "b"], "note": None,
    }], schema=pa.schema([("id", pa.int64()), ("blob", pa.binary()), ("price", pa.decimal128(5, 2)),
                          ("ratio", pa.float64()), ("at", pa.timestamp("us", "UTC")),
                          ("tags", pa.list_(pa.string())), ("note", pa.string())]))
    assert json.loads(record_json(batch, 0)) == {
        "id": 1, "blob": "AP8=", "price": "12.30", "ratio": "NaN",
        "at": "2024-05-01T12:00:00+00:00", "tags": ["a", "b"], "note": None}


def test_text_that_is_not_utf8_still_makes_a_dead_letter():
    raw = pa.array([b"ok\xff"], pa.binary()).view(pa.string())
    batch = pa.RecordBatch.from_arrays([raw], names=["name"])
    assert json.loads(record_json(batch, 0)) == {"name": "ok\ufffd"}


def test_a_dead_letter_carries_its_position_and_source():
    batch = pa.RecordBatch.from_pylist([{"id": 5, "topic": "orders", "partition": 2, "offset": 41},
                                        {"id": 6, "topic": "orders", "partition": 2, "offset": 42}])
    letter = dead_letter("s1", 7, 3, batch, 1, 12, "refused", ("topic", "partition", "offset"))
    assert (letter.sink_id, letter.batch, letter.task_partition, letter.row_in_task) == ("s1", 7, 3, 12)
    assert json.loads(letter.source) == {"topic": "orders", "partition": 2, "offset": 42}
    assert json.loads(letter.record)["id"] == 6
    assert dead_letter("s1", 7, 3, batch, 1, 12, "refused", ()).source is None


def test_source_columns_default_explicit_and_missing():
    columns = ["id", "partition", "offset"]
    assert source_columns(None, columns, SQL_SOURCE_DEFAULT) == ("partition", "offset")
    assert source_columns(None, columns, ()) == ()
    assert source_columns(("OFFSET",), columns, SQL_SOURCE_DEFAULT) == ("offset",)
    assert source_columns((), columns, SQL_SOURCE_DEFAULT) == ()
    with pytest.raises(SinkError, match="'deadLetterSourceColumns' names 'src_offset'"):
        source_columns(("src_offset",), columns, ())


def test_cut_json_keeps_valid_json_within_the_limit():
    text = json.dumps({"value": 'x"\\' * 1000})
    cut = cut_json(text, 500)
    assert len(cut) <= 500 and json.loads(cut)["truncated"] is True
    assert json.loads(cut)["length"] == len(text) and text.startswith(json.loads(cut)["head"])
    assert cut_json(text, len(text)) == text


def sql_settings(**options: str) -> SqlSinkSettings:
    return SqlSinkSettings.parse({"url": "postgresql://u@h/db", "dbtable": "t", **options},
                                 "eoskit-postgres", PostgresTransactions)


def test_sql_options():
    settings = sql_settings(deadLetterTable='shop."Refused"', deadLetterSourceColumns="offset, partition")
    assert (settings.dead_letter_table.schema.name, settings.dead_letter_table.table.name) == ("shop", "Refused")
    assert settings.dead_letter_table.table.quoted
    assert settings.dead_letter_source_columns == ("offset", "partition")
    assert sql_settings().dead_letter_table is None
    with pytest.raises(OptionError, match="'deadLetterSourceColumns' needs the option 'deadLetterTable'"):
        sql_settings(deadLetterSourceColumns="offset")
    with pytest.raises(OptionError, match="option 'deadLetterTable'"):
        sql_settings(deadLetterTable="a.b.c")


def test_kafka_options():
    base = {"kafka.bootstrap.servers": "b:9092", "topic": "out"}
    settings = KafkaSinkSettings.parse({**base, "deadLetterTopic": "out-dlq",
                                        "deadLetterSourceColumns": "src_offset"})
    assert settings.dead_letter_topic == "out-dlq"
    assert settings.dead_letter_source_columns == ("src_offset",)
    assert settings.max_message_bytes == 1_000_000
    assert KafkaSinkSettings.parse({**base, "kafka.message.max.bytes": "2000"}).max_message_bytes == 2000
    with pytest.raises(OptionError, match="'deadLetterTopic' names the output topic"):
        KafkaSinkSettings.parse({**base, "deadLetterTopic": "out"})
    with pytest.raises(OptionError, match="needs the option 'deadLetterTopic'"):
        KafkaSinkSettings.parse({**base, "deadLetterSourceColumns": "x"})


def test_acks_count_dead_letters_and_old_positional_acks_still_build():
    prepared = PreparedTransaction(7, 1, 0, 10, 100, "eoskit:s:7:1:0xab", dead_letters=3)
    assert prepared.txn_id == "eoskit:s:7:1:0xab" and prepared.dead_letters == 3
    assert pickle.loads(pickle.dumps(prepared)) == prepared
    assert CommittedByTask(7, 2, 0, 5, 50).dead_letters == 0
    assert dead_letters([prepared, CommittedByTask(7, 2, 0, 5, 50, dead_letters=2), None]) == 5
