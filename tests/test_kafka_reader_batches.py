"""The source's Arrow batches (connectors/kafka/reader.py): bounded by
records and by bytes, so a range of large records reaches Spark's JVM in
batches of about ARROW_BATCH_BYTES, not one poll's worth."""

from __future__ import annotations

import pyarrow as pa

from eoskit.connectors.kafka import reader
from eoskit.connectors.kafka.schema import arrow_schema


class Record:
    """What _Columns reads of a consumed record (confluent-kafka's Message)."""

    def __init__(self, offset: int, value: bytes | None, key: bytes | None = None) -> None:
        self._offset, self._value, self._key = offset, value, key

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def headers(self) -> None:
        return None


def batches_of(records: list[Record]) -> list[pa.RecordBatch]:
    columns = reader._Columns(False)
    columns.extend(records)
    return list(columns.batches("t", 0, arrow_schema(False)))


def ipc_size(batch: pa.RecordBatch) -> int:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().size


def test_large_records_come_in_slices_of_about_the_byte_bound_in_order(monkeypatch):
    monkeypatch.setattr(reader, "ARROW_BATCH_BYTES", 100_000)
    records = [Record(i, bytes([i % 256]) * 10_000, b"k%d" % i) for i in range(95)]  # ~950 KB
    columns = reader._Columns(False)
    columns.extend(records[:9])
    assert not columns.full()
    columns.extend(records[9:])
    assert columns.full()
    out = batches_of(records)
    assert len(out) == 11 and {b.num_rows for b in out[:-1]} == {9}  # 95 rows, 9 to 100 KB
    assert pa.Table.from_batches(out).column("offset").to_pylist() == list(range(95))
    assert pa.Table.from_batches(out).column("value").to_pylist() == [r.value() for r in records]
    # What travels to the JVM is each slice's own bytes, not the whole poll's.
    assert max(ipc_size(b) for b in out) < 2 * 100_000 < ipc_size(pa.Table.from_batches(out).combine_chunks()
                                                                  .to_batches()[0])


def test_small_records_keep_one_batch_per_row_bound():
    records = [Record(i, b'{"id": %d}' % i) for i in range(1_000)]
    (batch,) = batches_of(records)
    assert batch.num_rows == 1_000
    columns = reader._Columns(False)
    columns.extend(records)
    assert not columns.full() and columns.bytes == sum(len(r.value()) for r in records)


def test_null_keys_and_values_count_no_bytes():
    columns = reader._Columns(False)
    columns.extend([Record(0, None), Record(1, b"abc", None)])
    assert columns.bytes == 3
    (batch,) = list(columns.batches("t", 0, arrow_schema(False)))
    assert batch.column("value").to_pylist() == [None, b"abc"]
