"""Reading one offset range into Arrow record batches, on an executor.

Consumers are kept per Python worker and reused by every task that worker
runs: connecting, authenticating and fetching metadata cost more than
reading a small micro-batch. A consumer is only ever assigned, never
subscribed, and never commits: the offsets are Spark's checkpoint state.
"""

from __future__ import annotations

import atexit
import json
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from eoskit.connectors.kafka.client import ClientLog, consumer_config
from eoskit.connectors.kafka.offsets import OffsetRange
from eoskit.connectors.kafka.schema import HEADER_ARROW_TYPE
from eoskit.core import timings
from eoskit.twophase.verdicts import Verdict

log = logging.getLogger(__name__)

#: Records per Arrow batch handed to Spark: big enough to amortise the
#: per-batch cost, small enough to keep a task's memory flat.
ARROW_BATCH_ROWS = 32_768  # a batch may pass it by less than one poll (_POLL_BATCH)
#: The keys' and values' bytes per Arrow batch, which bounds a batch of
#: large records: Spark reads each batch into the JVM's direct memory
#: (1 GiB for a 1 GiB driver), and 32,768 records of 10 KB would take 320 MB
#: a task there. Records this size or less pass ARROW_BATCH_ROWS first.
ARROW_BATCH_BYTES = 32 << 20
_POLL_BATCH = 10_000
#: ``consume`` returns once it has the records asked for, or after this
#: long. A task asks for no more than its range still holds, so a range
#: without gaps ends without waiting; one that ends in control records or
#: aborted records (which never reach the application) waits only
#: ``_POLL_GAP_S`` after the last record before its position is checked.
_POLL_WAIT_S = 0.5
_POLL_GAP_S = 0.02
# confluent-kafka's timestamp types, mapped to Spark's timestampType column.
_TIMESTAMP_TYPE = {0: -1, 1: 0, 2: 1}


class DataLossError(RuntimeError):
    """Offsets planned for a task are gone from the broker (failOnDataLoss=true)."""

    #: eoskit.twophase.verdicts: a restart replays the same offsets, still gone;
    #: the message says what to change (failOnDataLoss=false).
    verdict: ClassVar[Verdict] = Verdict.PERMANENT


class ReadTimeoutError(TimeoutError):
    """Records known to exist did not arrive within kafkaConsumer.pollTimeoutMs."""


_consumers: dict[str, Consumer] = {}
#: each cached consumer's log (librdkafka's lines at DEBUG, the last error kept)
_logs: dict[str, ClientLog] = {}


def _cached_consumer(kafka_settings: Mapping[str, str]) -> tuple[str, Consumer]:
    key = json.dumps(sorted(kafka_settings.items()))
    consumer = _consumers.get(key)
    if consumer is None:
        _logs[key] = ClientLog()
        consumer = Consumer(consumer_config(kafka_settings, _logs[key]))
        _consumers[key] = consumer
    return key, consumer


def _drop_consumer(key: str) -> None:
    _logs.pop(key, None)
    consumer = _consumers.pop(key, None)
    if consumer is not None:
        try:
            consumer.close()
        except Exception:  # noqa: BLE001 - closing a broken consumer must not mask the cause
            log.debug("closing a failed consumer raised", exc_info=True)


@atexit.register
def _close_all() -> None:
    for key in list(_consumers):
        _drop_consumer(key)


class _Columns:
    """Column lists for one Arrow batch."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[dict[str, Any]] | None] = []
        #: The keys' and values' bytes so far.
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def full(self) -> bool:
        return len(self.offsets) >= ARROW_BATCH_ROWS or self.bytes >= ARROW_BATCH_BYTES

    def add(self, message: Any) -> None:
        self.extend([message])

    def extend(self, messages: list[Any]) -> None:
        """Each of ``messages`` (records, not errors), a column at a time."""
        keys = [m.key() for m in messages]
        values = [m.value() for m in messages]
        self.bytes += sum(map(len, filter(None, keys))) + sum(map(len, filter(None, values)))
        self.keys += keys
        self.values += values
        self.offsets += [m.offset() for m in messages]
        stamps = [m.timestamp() for m in messages]
        self.timestamps += [ms * 1000 if kind != 0 else None for kind, ms in stamps]
        self.timestamp_types += [_TIMESTAMP_TYPE.get(kind, -1) for kind, _ in stamps]
        if self.include_headers:
            self.headers += [None if h is None else [{"key": k, "value": v} for k, v in h]
                             for h in (m.headers() for m in messages)]

    def to_batch(self, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
        n = len(self.offsets)
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
            pa.array(self.timestamp_types, pa.int32()),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, HEADER_ARROW_TYPE))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def batches(self, topic: str, partition: int, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The records as Arrow batches of at most about ARROW_BATCH_BYTES
        each: one poll of large records passes the bound by up to a poll, so
        the batch is cut into slices (no copy; Arrow's IPC writer sends a
        slice's own bytes)."""
        batch = self.to_batch(topic, partition, schema)
        rows = batch.num_rows
        if self.bytes <= ARROW_BATCH_BYTES or rows <= 1:
            yield batch
            return
        step = max(1, rows * ARROW_BATCH_BYTES // self.bytes)
        for start in range(0, rows, step):
            yield batch.slice(start, step)


def read_range(
    offset_range: OffsetRange,
    kafka_settings: Mapping[str, str],
    schema: pa.Schema,
    poll_timeout_ms: int,
    fail_on_data_loss: bool,
) -> Iterator[pa.RecordBatch]:
    """Every record of ``offset_range``, in offset order, as Arrow batches
    of ``schema`` (``schema.arrow_schema``, made on the driver and pickled
    with the reader; a ``headers`` column if the source reads headers).

    The range ends at a position, not a count: the loop stops when the
    consumer's position reaches ``end``, which also steps over transaction
    markers and aborted records that leave gaps below it.
    """
    if not timings.enabled():
        return _read_range(offset_range, kafka_settings, schema, poll_timeout_ms,
                           fail_on_data_loss, None)
    return _timed(offset_range, kafka_settings, schema, poll_timeout_ms, fail_on_data_loss)


def _timed(offset_range: OffsetRange, kafka_settings: Mapping[str, str], schema: pa.Schema,
           poll_timeout_ms: int, fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    """``read_range`` with its own time recorded: ``source.fetch`` (the
    consumer's ``consume`` calls) and ``source.convert`` (the rest of the
    generator's time: the records to Arrow columns). Time spent by Spark
    between two batches is left out."""
    fetch = [0.0]

    def done(inside: float) -> None:
        timings.record("source.fetch", fetch[0] * 1000)
        timings.record("source.convert", (inside - fetch[0]) * 1000)

    return timings.time_inside(_read_range(offset_range, kafka_settings, schema,
                                           poll_timeout_ms, fail_on_data_loss, fetch), done)


def _read_range(
    offset_range: OffsetRange,
    kafka_settings: Mapping[str, str],
    schema: pa.Schema,
    poll_timeout_ms: int,
    fail_on_data_loss: bool,
    fetch_seconds: list[float] | None,
) -> Iterator[pa.RecordBatch]:
    topic, partition, end = offset_range.topic, offset_range.partition, offset_range.end
    include_headers = "headers" in schema.names
    key, consumer = _cached_consumer(kafka_settings)
    tp = TopicPartition(topic, partition, offset_range.start)
    consumer.assign([tp])
    finished = False
    try:
        columns = _Columns(include_headers)
        deadline = time.monotonic() + poll_timeout_ms / 1000
        position = offset_range.start
        wait = _POLL_WAIT_S
        while position < end:
            wanted = min(_POLL_BATCH, end - position)
            if fetch_seconds is None:
                messages = consumer.consume(wanted, timeout=wait)
            else:
                started = time.perf_counter()
                messages = consumer.consume(wanted, timeout=wait)
                fetch_seconds[0] += time.perf_counter() - started
            wait = _POLL_GAP_S if messages else _POLL_WAIT_S
            if messages and messages[-1].offset() < end and not any(m.error() for m in messages):
                # The usual poll: records only, all in the range (a partition's
                # offsets ascend), taken column by column in bulk.
                columns.extend(messages)
                position = messages[-1].offset() + 1
                deadline = time.monotonic() + poll_timeout_ms / 1000
                if columns.full():
                    yield from columns.batches(topic, partition, schema)
                    columns = _Columns(include_headers)
                messages = []
            for message in messages:
                error = message.error()
                if error is not None:
                    position = _handle_error(error, consumer, offset_range, position,
                                             fail_on_data_loss)
                    continue
                offset = message.offset()
                if offset >= end:
                    position = end
                    break
                columns.add(message)
                position = offset + 1
                deadline = time.monotonic() + poll_timeout_ms / 1000
                if columns.full():
                    yield from columns.batches(topic, partition, schema)
                    columns = _Columns(include_headers)
            if position < end:
                # The consumer's own position steps over control records and
                # aborted transactions that never reach the application.
                current = consumer.position([TopicPartition(topic, partition)])[0].offset
                if current >= 0 and current > position:
                    position = current
                    deadline = time.monotonic() + poll_timeout_ms / 1000
            if position < end and time.monotonic() > deadline:
                raise ReadTimeoutError(
                    f"reading {topic}-{partition} [{offset_range.start}, {end}) from "
                    f"kafka.bootstrap.servers={kafka_settings.get('bootstrap.servers')!r}: "
                    f"no record after offset {position} within kafkaConsumer.pollTimeoutMs="
                    f"{poll_timeout_ms}; is the broker up and the offset still there?"
                    + _logs[key].reason()
                )
        if len(columns):
            yield from columns.batches(topic, partition, schema)
        finished = True
    finally:
        if finished:
            consumer.unassign()
        else:
            # A consumer left mid-fetch may hold prefetched records of this
            # range; a fresh one keeps the next task's read exact.
            _drop_consumer(key)


def _handle_error(
    error: KafkaError,
    consumer: Consumer,
    offset_range: OffsetRange,
    position: int,
    fail_on_data_loss: bool,
) -> int:
    """Data loss skips ahead or fails by option; any other error fails the task."""
    topic, partition = offset_range.topic, offset_range.partition
    if error.code() == KafkaError._PARTITION_EOF:
        return position
    if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        if low <= position:
            # Not data loss: the position exists, the broker refused it anyway.
            raise KafkaException(error)
        message = (
            f"offsets {position} to {low - 1} of {topic}-{partition} are no longer on "
            f"the broker (retention or deletion)"
        )
        if fail_on_data_loss:
            raise DataLossError(f"{message}; set failOnDataLoss=false to skip lost data")
        log.warning("%s; skipped because failOnDataLoss=false", message)
        consumer.assign([TopicPartition(topic, partition, low)])
        return low
    raise KafkaException(error)
