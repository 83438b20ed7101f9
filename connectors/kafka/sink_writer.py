"""What a Kafka sink task does on an executor: its producer, its marker, its rows.

Exactly-once (``MarkedWriter``), per task attempt of batch n, partition p:
1. Make a new producer of transactional id (sinkId, p) and
   ``init_transactions``: this fences every older producer of the id, in any
   process of any run, and aborts its open transaction. Only then is the
   marker read, so no zombie can commit it afterwards.
2. Read the marker, the committed offset of the task's group (with
   ``read_committed``, the consumer waits for pending offset commits). A
   marker of batch n: the rows are in, write nothing. A marker of a later
   batch: this checkpoint is older than the sink's output; refuse.
3. Begin a transaction, produce every row, then commit the marker
   (batch n, rows) with ``send_offsets_to_transaction`` and commit: records
   and marker become visible together, or not at all.
A transaction lasts one task, so no downtime of the job can outlive the
transaction timeout.

At-least-once (``CommittingWriter``): an idempotent producer, flushed at
commit; delivery errors fail the task.

A transactional producer lives for one task attempt. It cannot be cached:
Spark runs partition p of the next batch in whichever Python worker is free,
and a producer made there fences the one cached here, whose next task would
fail (after a long wait in ``abort_transaction``). ``init_transactions`` is
one round trip to the transaction coordinator, and connections are opened
while the marker is read. Marker consumers, admin clients and at-least-once
producers (no transactional id, nothing to fence) are cached per Python
worker and reused across batches (``sink_clients.py`` makes them). After a
fatal error (fenced, or the producer's epoch is gone), the attempt drops its
producer without calling
``abort_transaction``: the broker aborts its transaction when the retry's
producer fences it.

Dead letters (``deadLetterTopic``): a record the sink cannot write is
produced to the dead-letter topic instead, by the same producer in the same
transaction, so it commits with the task's records and marker, exactly once.
Such a record is found before it is produced: no topic, a partition the
topic lacks, or an estimated size over the smaller of the producer's
``message.max.bytes`` and the topic's ``max.message.bytes`` (read with
DescribeConfigs when a task first writes to a topic; the broker would only
refuse the record at delivery, and make the whole transaction fail). A
``MSG_SIZE_TOO_LARGE`` from ``produce`` itself is set aside too. Nothing
else is: a broker that does not answer, a timeout, a missing topic fail the
task, for Spark to retry.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from eoskit.connectors.dead_letters import dumps, source_columns, source_json
from eoskit.connectors.kafka import sink_markers
from eoskit.connectors.kafka.sink_clients import (
    Topics,
    bounded,
    close_producer,
    drop_producer,
    error_text,
    fatal,
    marker_consumer,
    producer,
    read_marker,
)
from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings
from eoskit.connectors.sink_options import DEAD_LETTER_TOPIC
from eoskit.twophase.contract import (
    CommittingWriter,
    MarkedWriter,
    Marker,
    ServiceUnavailableError,
    SinkError,
)

#: A record's worst-case framing in a v2 record batch, beside its key, value
#: and headers (librdkafka's RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD): what the
#: producer adds before comparing with ``message.max.bytes``.
RECORD_OVERHEAD = 36
#: Per header, its two length varints at most.
HEADER_OVERHEAD = 10


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index)


def produce_batch(made: Producer, topics: Topics, settings: KafkaSinkSettings,
                  batch: pa.RecordBatch, first_row: int, on_delivery: Any = None,
                  dead: "DeadLetters | None" = None) -> int:
    """Produce every row of ``batch``; the number of value bytes. The only
    per-record Python is the call into librdkafka, which batches in C.
    With ``dead``, a row the sink cannot write goes there instead of
    failing the task."""
    n = batch.num_rows
    values = batch.column(batch.schema.get_field_index("value")).to_pylist()
    key_column = _column(batch, "key")
    keys = key_column.to_pylist() if key_column is not None else [None] * n
    partition_column = _column(batch, "partition")
    if settings.topic is not None:
        topic_names = [settings.topic] * n
        distinct = [settings.topic]
    else:
        topic_column = _column(batch, "topic")
        if topic_column.null_count and dead is None:
            row = first_row + pc.index(pc.is_null(topic_column), True).as_py()
            raise SinkError(f"row {row} of this task has no topic: set the 'topic' option or "
                            "fill the 'topic' column")
        topic_names = topic_column.to_pylist()
        distinct = [t for t in pc.unique(topic_column).to_pylist() if t is not None]
    limits = {t: topics.check(t) for t in distinct}
    if partition_column is not None:
        if dead is None:
            _check_partitions(topic_names, partition_column, limits, first_row)
        partitions = pc.fill_null(partition_column, -1).to_pylist()
    else:
        partitions = [-1] * n
    headers_column = _column(batch, "headers") if settings.include_headers else None
    headers = ([None if h is None else [(e["key"], e["value"]) for e in h]
                for h in headers_column.to_pylist()] if headers_column is not None else [None] * n)
    poison = dead.poison(batch, topics, topic_names, partitions, limits, headers) if dead else {}
    produce, poll = made.produce, made.poll
    size = 0
    for index, (topic, value, key, partition, header) in enumerate(
            zip(topic_names, values, keys, partitions, headers)):
        if index in poison:
            assert dead is not None
            dead.send(made, batch, index, first_row + index + 1, poison[index], topic, partition)
            continue
        full_since: float | None = None
        while True:
            try:
                produce(topic, value, key, partition, on_delivery=on_delivery, headers=header)
                size += len(value) if value is not None else 0
                break
            except BufferError:
                # The local queue is full: let librdkafka send, for as long
                # as a call may take, not for ever.
                now = time.monotonic()
                full_since = now if full_since is None else full_since
                if now - full_since > settings.call_timeout:
                    raise ServiceUnavailableError(
                        f"the producer's queue stayed full for {settings.call_timeout:.0f} s "
                        f"(callTimeout): the brokers at kafka.bootstrap.servers="
                        f"{settings.bootstrap_servers!r} do not take records") from None
                poll(0.05)
            except KafkaException as exc:
                message = _produce_error(exc, topic, partition, first_row + index, value)
                if dead is None or not _too_large(exc):
                    raise SinkError(message) from None
                dead.send(made, batch, index, first_row + index + 1, message, topic, partition)
                break
    poll(0)
    return size


def _too_large(exc: KafkaException) -> bool:
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    return error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE


class DeadLetters:
    """One task's dead letters: found in each Arrow batch before it is
    produced, and produced to ``deadLetterTopic`` in the task's transaction.

    A dead letter's key is the record's key; its value is JSON::

        {"sink_id", "batch", "task_partition", "row_in_task", "error",
         "topic", "partition", "size", "value" | "value_base64", "truncated",
         "source"}

    ``value`` holds a string value as text, ``value_base64`` a binary one;
    a value that does not fit the dead-letter topic is cut to its first
    bytes (``truncated``: true, ``size``: its whole size). Headers
    ``eoskit.error`` and ``eoskit.position`` (``sinkId:batch:partition:row``)
    say the same for readers that do not parse the value.
    """

    def __init__(self, settings: KafkaSinkSettings, marker: Marker, topics: Topics,
                 columns: list[str]) -> None:
        assert settings.dead_letter_topic is not None
        self.settings = settings
        self.marker = marker
        self.topic = settings.dead_letter_topic
        self.sources = source_columns(settings.dead_letter_source_columns, columns, ())
        self.count = 0
        topics.check(self.topic)
        self.limit = topics.max_record_bytes(self.topic)

    def poison(self, batch: pa.RecordBatch, topics: Topics, topic_names: list[str | None],
               partitions: list[int], limits: dict[str, int],
               headers: list[list[tuple[str, Any]] | None]) -> dict[int, str]:
        """The rows of ``batch`` that cannot be written, with why."""
        found: dict[int, str] = {}
        sizes = _sizes(batch, headers)
        for index, (topic, partition, size) in enumerate(zip(topic_names, partitions, sizes)):
            if topic is None:
                found[index] = "the row has no topic: set the 'topic' option or fill the 'topic' column"
            elif partition >= 0 and partition >= limits[topic]:
                found[index] = (f"the row names partition {partition} of topic {topic!r}, which "
                                f"has partitions 0..{limits[topic] - 1}")
            elif partition < -1:
                found[index] = f"the row names partition {partition} of topic {topic!r}"
            elif size > topics.max_record_bytes(topic):
                found[index] = (
                    f"the record for topic {topic!r} is {size} bytes (key, value, headers and "
                    f"framing), over {topics.max_record_bytes(topic)}: the smaller of the "
                    "producer's message.max.bytes and the topic's max.message.bytes")
        return found

    def send(self, made: Producer, batch: pa.RecordBatch, index: int, row_in_task: int,
             error: str, topic: str | None, partition: int) -> None:
        """Produce row ``index``'s dead letter in the task's transaction."""
        key = _bytes(batch, "key", index)
        value_column = batch.column(batch.schema.get_field_index("value"))
        value = _bytes(batch, "value", index)
        text = pa.types.is_string(value_column.type) or pa.types.is_large_string(value_column.type)
        position = f"{self.marker.sink_id}:{self.marker.batch}:{self.marker.partition}:{row_in_task}"
        headers = [("eoskit.error", error.encode()[:1000]), ("eoskit.position", position.encode())]
        letter: dict[str, Any] = {
            "sink_id": self.marker.sink_id, "batch": self.marker.batch,
            "task_partition": self.marker.partition, "row_in_task": row_in_task, "error": error,
            "topic": topic, "partition": partition if partition >= 0 else None,
            "size": None if value is None else len(value),
            "source": json.loads(source_json(batch, index, self.sources) or "null"),
        }
        room = self.limit - RECORD_OVERHEAD - sum(len(k) + len(v) + HEADER_OVERHEAD for k, v in headers)
        if key is not None and len(key) > room // 2:
            letter["key_size"], key = len(key), None  # a key too large to keep is left out
        room -= len(key or b"") + len(dumps({**letter, "value": None, "truncated": False}).encode()) + 32
        record = dumps({**letter, **_value_json(value, text, room)}).encode()
        while True:
            try:
                made.produce(self.topic, record, key, headers=headers)
                break
            except BufferError:
                made.poll(0.05)
            except KafkaException as exc:
                raise SinkError(f"producing a dead letter to {DEAD_LETTER_TOPIC.name} "
                                f"{self.topic!r} failed: {error_text(exc)}") from None
        self.count += 1


def _bytes(batch: pa.RecordBatch, name: str, index: int) -> bytes | None:
    column = _column(batch, name)
    return None if column is None else column.slice(index, 1).cast(pa.binary()).to_pylist()[0]


def _value_json(value: bytes | None, text: bool, room: int) -> dict[str, Any]:
    """The value for a dead letter's JSON, in at most ``room`` bytes of it."""
    if value is None:
        return {"value": None, "truncated": False}
    cut = len(value)
    while True:
        part = value[:cut]
        if text:
            shown: dict[str, Any] = {"value": part.decode("utf-8", errors="ignore" if cut < len(value) else "replace")}
        else:
            shown = {"value_base64": base64.b64encode(part).decode("ascii")}
        if len(dumps(shown)) <= room or cut == 0:
            return {**shown, "truncated": cut < len(value)}
        # JSON escapes at most sixfold (\u00XX), base64 grows by 4/3: shrink and retry.
        cut = min(cut - 1, max(0, (room * cut) // max(1, len(dumps(shown))) - 16))


def _sizes(batch: pa.RecordBatch, headers: list[list[tuple[str, Any]] | None]) -> list[int]:
    """Each record's size as the producer counts it: key, value and header
    bytes plus the worst-case framing (RECORD_OVERHEAD)."""
    total = pa.array([RECORD_OVERHEAD] * batch.num_rows, pa.int64())
    for name in ("key", "value"):
        column = _column(batch, name)
        if column is not None:
            lengths = pc.fill_null(pc.cast(pc.binary_length(column), pa.int64()), 0)
            total = pc.add(total, lengths)
    sizes = total.to_pylist()
    for index, header in enumerate(headers):
        if header:
            sizes[index] += sum(len(k.encode()) + len(v or b"") + HEADER_OVERHEAD for k, v in header)
    return sizes


def _check_partitions(topic_names: list[str], column: pa.Array, limits: dict[str, int],
                      first_row: int) -> None:
    for index, (topic, partition) in enumerate(zip(topic_names, column.to_pylist())):
        if partition is not None and not 0 <= partition < limits[topic]:
            raise SinkError(f"row {first_row + index} of this task names partition {partition} of "
                            f"topic {topic!r}, which has partitions 0..{limits[topic] - 1}")


def _produce_error(exc: KafkaException, topic: str, partition: int, row: int, value: Any) -> str:
    error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    size = len(value) if value is not None else 0
    if error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return (f"row {row} of this task, for topic {topic!r}, is {size} bytes: larger than the "
                "producer's message.max.bytes. Raise kafka.message.max.bytes (and the topic's "
                "max.message.bytes), or filter such records in the transform")
    return f"producing row {row} to topic {topic!r} partition {partition} failed: {error_text(exc)}"


class KafkaMarkedWriter(MarkedWriter):
    """One task attempt's Kafka transaction, with its progress marker."""

    def __init__(self, settings: KafkaSinkSettings, marker: Marker, attempt: int) -> None:
        self.settings = settings
        self.marker = marker
        self.attempt = attempt
        self.rows = 0
        self.bytes = 0
        self.dead_letters = 0
        self._producer: Producer | None = None
        self._topics: Topics | None = None
        self._dead: DeadLetters | None = None
        self._open = False
        self._broken = False
        self._began = 0.0  # when the transaction began (monotonic)

    def claim(self) -> bool:
        txn_id = sink_markers.transactional_id(self.marker.sink_id, self.marker.partition)
        # Step 1: a new producer of the id fences every older one.
        self._producer = producer(self.settings, txn_id)
        # Step 2: the marker, read only now that no zombie can commit it.
        group = sink_markers.marker_group(self.marker.sink_id, self.marker.partition)
        committed = read_marker(self.settings, group)
        if committed is not None and committed.batch > self.marker.batch:
            raise SinkError(
                f"task {self.marker.partition} of sink id {self.marker.sink_id!r} already "
                f"committed batch {committed.batch}, and this query is writing batch "
                f"{self.marker.batch}: the checkpoint is older than the sink's output (restored "
                "from an old copy?). Writing would duplicate records; use a new 'sinkId'")
        if committed is not None and committed.batch == self.marker.batch:
            self.committed_rows = committed.rows
            return False
        # Step 3: the transaction that carries the rows and the marker.
        self._producer.begin_transaction()
        self._began = time.monotonic()
        self._open = True
        self._topics = Topics(self.settings, self._producer)
        return True

    def write(self, batch: pa.RecordBatch) -> None:
        assert self._producer is not None and self._topics is not None and self._open
        if self.settings.dead_letter_topic is not None and self._dead is None:
            self._dead = DeadLetters(self.settings, self.marker, self._topics, batch.schema.names)
        self.bytes += produce_batch(self._producer, self._topics, self.settings, batch, self.rows,
                                    dead=self._dead)
        self.rows += batch.num_rows
        self.dead_letters = self._dead.count if self._dead is not None else 0

    def commit(self) -> None:
        assert self._producer is not None and self._open
        group = sink_markers.marker_group(self.marker.sink_id, self.marker.partition)
        offset = sink_markers.encode(self.marker.batch, self.rows)
        made = self._producer
        what = f"the Kafka transaction of task {self.marker.partition}, batch {self.marker.batch}"
        timeout = self.settings.call_timeout
        try:
            bounded(lambda: made.send_offsets_to_transaction(
                [TopicPartition(self.settings.marker_topic, 0, offset)],
                marker_consumer(self.settings, group).consumer_group_metadata(), timeout),
                f"sending the progress marker of {what}", timeout)
            bounded(lambda: made.commit_transaction(timeout), f"committing {what}", timeout)
        except ServiceUnavailableError:
            self._broken = True  # a call still hangs in its thread: do not wait on another
            raise
        except KafkaException as exc:
            self._broken = fatal(exc)
            raise SinkError(f"committing {what} failed: {error_text(exc)}"
                            f"{self._timed_out_hint()}") from None
        self._open = False
        self._producer = None
        close_producer(made)

    def _timed_out_hint(self) -> str:
        """Why, when the transaction outlived its timeout: the broker aborted it."""
        limit_ms = int(self.settings.producer_config()["transaction.timeout.ms"])
        open_s = time.monotonic() - self._began
        if open_s * 1000 <= limit_ms:
            return ""
        return (f"; the transaction was open {open_s:.0f} s, longer than "
                f"kafka.transaction.timeout.ms ({limit_ms} ms), so the broker aborted it: raise "
                "kafka.transaction.timeout.ms (up to the broker's transaction.max.timeout.ms) "
                "or lower maxOffsetsPerTrigger so that one task's batch takes less time")

    def abort(self) -> None:
        """Abort the open transaction, if any, and close the producer. A
        fenced or hung producer is closed without asking the broker: the
        retry's producer fences it, which aborts its transaction."""
        made, self._producer = self._producer, None
        if made is None:
            return
        if self._open and not self._broken:
            try:
                bounded(lambda: made.abort_transaction(self.settings.call_timeout),
                         f"aborting the Kafka transaction of task {self.marker.partition}",
                         self.settings.call_timeout)
            except Exception:  # noqa: BLE001 - broken: the next attempt fences it
                pass
        self._open = False
        close_producer(made)



class KafkaDirectWriter(CommittingWriter):
    """At-least-once: an idempotent producer, flushed at commit."""

    def __init__(self, settings: KafkaSinkSettings, marker: Marker) -> None:
        self.settings = settings
        self.marker = marker
        self.rows = 0
        self.bytes = 0
        self.dead_letters = 0
        self._producer = producer(settings, None)
        self._topics = Topics(settings, self._producer)
        self._dead: DeadLetters | None = None
        self._errors: list[str] = []

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is not None and len(self._errors) < 5:
            self._errors.append(f"{message.topic()}-{message.partition()}: {error.str()}")

    def write(self, batch: pa.RecordBatch) -> None:
        if self.settings.dead_letter_topic is not None and self._dead is None:
            self._dead = DeadLetters(self.settings, self.marker, self._topics, batch.schema.names)
        self.bytes += produce_batch(self._producer, self._topics, self.settings, batch, self.rows,
                                    self._delivered, dead=self._dead)
        self.rows += batch.num_rows
        self.dead_letters = self._dead.count if self._dead is not None else 0

    def commit(self) -> None:
        left = self._producer.flush(self.settings.call_timeout)
        if left or self._errors:
            drop_producer(self._producer)
            raise SinkError(f"Kafka did not accept every record of this task: "
                            f"{'; '.join(self._errors) or f'{left} still unsent'}")

    def abort(self) -> None:
        if self._errors:
            drop_producer(self._producer)
