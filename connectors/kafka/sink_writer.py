"""What a Kafka sink task does on an executor: its producer, its marker, its rows.

Exactly-once (``MarkedWriter``), per task attempt of batch n, partition p:
1. Get the producer of transactional id (sinkId, p) and ``init_transactions``
   (a new producer for a retried attempt): this fences every older producer
   of the id, in any process of any run, and aborts its open transaction.
   Only then is the marker read, so no zombie can commit it afterwards.
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

Producers and marker consumers are cached per Python worker process and
reused across batches; one that failed is closed and rebuilt.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from eoskit.connectors.kafka import sink_markers
from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings
from eoskit.twophase.contract import (
    CommittingWriter,
    MarkedWriter,
    Marker,
    ServiceUnavailable,
    SinkError,
)

#: librdkafka's own log lines (every refused connection) stay out of Spark's
#: output; failures surface as errors that name the broker.
_QUIET = logging.getLogger("eoskit.connectors.kafka.sink.client")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

TIMEOUT_S = 60.0

_producers: dict[str, Producer] = {}
_consumers: dict[str, Consumer] = {}


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc)


def producer(settings: KafkaSinkSettings, transactional_id: str | None, fresh: bool) -> Producer:
    """This process's producer for ``transactional_id`` (idempotent only when
    None), initialised; ``fresh`` replaces a cached one (a retried attempt
    must fence whatever its earlier attempt left)."""
    config: dict[str, Any] = {**settings.producer_config(), "enable.idempotence": True,
                              "logger": _QUIET}
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    key = _key({k: v for k, v in config.items() if k != "logger"})
    if fresh:
        drop_producer(key)
    cached = _producers.get(key)
    if cached is not None:
        return cached
    made = Producer(config)
    if transactional_id is not None:
        try:
            made.init_transactions(TIMEOUT_S)
        except KafkaException as exc:
            raise ServiceUnavailable(
                f"cannot start the Kafka transactions of {transactional_id} at "
                f"kafka.bootstrap.servers={settings.bootstrap_servers!r}: {_error_text(exc)}"
            ) from None
    _producers[key] = made
    return made


def drop_producer(key_or_producer: str | Producer) -> None:
    if isinstance(key_or_producer, str):
        made = _producers.pop(key_or_producer, None)
    else:
        made = key_or_producer
        for key, cached in list(_producers.items()):
            if cached is made:
                del _producers[key]
    if made is not None:
        try:
            made.purge()
            made.flush(0)
        except Exception:  # noqa: BLE001 - closing a broken producer
            pass


def marker_consumer(settings: KafkaSinkSettings, group: str) -> Consumer:
    """A consumer of the task's marker group: it reads the marker and gives
    the group metadata for ``send_offsets_to_transaction``. Never subscribes."""
    config = {k: v for k, v in settings.kafka.items() if not k.startswith(("linger.", "batch.",
              "compression.", "acks", "partitioner", "transaction", "message.timeout",
              "queue.buffering", "retries", "delivery."))}
    config.update({"group.id": group, "enable.auto.commit": False,
                   "isolation.level": "read_committed", "logger": _QUIET})
    key = _key({k: v for k, v in config.items() if k != "logger"})
    cached = _consumers.get(key)
    if cached is None:
        cached = _consumers[key] = Consumer(config)
    return cached


def read_marker(settings: KafkaSinkSettings, group: str) -> sink_markers.CommittedMarker | None:
    consumer = marker_consumer(settings, group)
    try:
        [committed] = consumer.committed([TopicPartition(settings.marker_topic, 0)], TIMEOUT_S)
    except KafkaException as exc:
        raise ServiceUnavailable(f"cannot read the progress marker of group {group!r} on "
                        f"{settings.marker_topic}-0 at kafka.bootstrap.servers="
                        f"{settings.bootstrap_servers!r}: {_error_text(exc)}") from None
    if committed.error is not None:
        raise SinkError(f"cannot read the progress marker of group {group!r}: "
                        f"{committed.error.str()}")
    return sink_markers.decode(committed.offset)


class _Topics:
    """Topics and partition counts a task writes to, checked once per topic
    before its first record: a missing topic or partition is named at once
    instead of waiting out the producer's delivery timeout."""

    def __init__(self, settings: KafkaSinkSettings, made: Producer) -> None:
        self.settings = settings
        self.producer = made
        self.partitions: dict[str, int] = {}

    def check(self, topic: str) -> int:
        known = self.partitions.get(topic)
        if known is not None:
            return known
        try:
            metadata = self.producer.list_topics(topic, timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise ServiceUnavailable(f"cannot reach Kafka at kafka.bootstrap.servers="
                            f"{self.settings.bootstrap_servers!r}: {_error_text(exc)}") from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise SinkError(missing_topic_message(topic))
        self.partitions[topic] = len(found.partitions)
        return self.partitions[topic]


def missing_topic_message(topic: str) -> str:
    return (f"topic {topic!r} does not exist: create it first (the eoskit-kafka sink does not "
            "rely on automatic topic creation, which gives a topic the broker's default "
            "partitions and settings)")


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index)


def produce_batch(made: Producer, topics: _Topics, settings: KafkaSinkSettings,
                  batch: pa.RecordBatch, first_row: int, on_delivery: Any = None) -> int:
    """Produce every row of ``batch``; the number of value bytes. The only
    per-record Python is the call into librdkafka, which batches in C."""
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
        if topic_column.null_count:
            row = first_row + pc.index(pc.is_null(topic_column), True).as_py()
            raise SinkError(f"row {row} of this task has no topic: set the 'topic' option or "
                            "fill the 'topic' column")
        topic_names = topic_column.to_pylist()
        distinct = pc.unique(topic_column).to_pylist()
    limits = {t: topics.check(t) for t in distinct}
    if partition_column is not None:
        _check_partitions(topic_names, partition_column, limits, first_row)
        partitions = pc.fill_null(partition_column, -1).to_pylist()
    else:
        partitions = [-1] * n
    headers_column = _column(batch, "headers") if settings.include_headers else None
    headers = ([None if h is None else [(e["key"], e["value"]) for e in h]
                for h in headers_column.to_pylist()] if headers_column is not None else [None] * n)
    produce, poll = made.produce, made.poll
    size = 0
    for index, (topic, value, key, partition, header) in enumerate(
            zip(topic_names, values, keys, partitions, headers)):
        while True:
            try:
                produce(topic, value, key, partition, on_delivery=on_delivery, headers=header)
                break
            except BufferError:
                poll(0.05)  # the local queue is full: let librdkafka send
            except KafkaException as exc:
                raise SinkError(_produce_error(exc, topic, partition, first_row + index,
                                               value)) from None
        size += len(value) if value is not None else 0
    poll(0)
    return size


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
    return f"producing row {row} to topic {topic!r} partition {partition} failed: {_error_text(exc)}"


class KafkaMarkedWriter(MarkedWriter):
    """One task attempt's Kafka transaction, with its progress marker."""

    def __init__(self, settings: KafkaSinkSettings, marker: Marker, attempt: int) -> None:
        self.settings = settings
        self.marker = marker
        self.attempt = attempt
        self.rows = 0
        self.bytes = 0
        self._producer: Producer | None = None
        self._topics: _Topics | None = None
        self._open = False

    def claim(self) -> bool:
        txn_id = sink_markers.transactional_id(self.marker.sink_id, self.marker.partition)
        # Step 1: fence older producers of this id (a retry always starts fresh).
        self._producer = producer(self.settings, txn_id, fresh=self.attempt > 0)
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
        self._open = True
        self._topics = _Topics(self.settings, self._producer)
        return True

    def write(self, batch: pa.RecordBatch) -> None:
        assert self._producer is not None and self._topics is not None and self._open
        self.bytes += produce_batch(self._producer, self._topics, self.settings, batch, self.rows)
        self.rows += batch.num_rows

    def commit(self) -> None:
        assert self._producer is not None and self._open
        group = sink_markers.marker_group(self.marker.sink_id, self.marker.partition)
        offset = sink_markers.encode(self.marker.batch, self.rows)
        try:
            self._producer.send_offsets_to_transaction(
                [TopicPartition(self.settings.marker_topic, 0, offset)],
                marker_consumer(self.settings, group).consumer_group_metadata(), TIMEOUT_S)
            self._producer.commit_transaction(TIMEOUT_S)
        except KafkaException as exc:
            raise SinkError(
                f"committing the Kafka transaction of task {self.marker.partition}, batch "
                f"{self.marker.batch} failed: {_error_text(exc)}") from None
        self._open = False

    def abort(self) -> None:
        made, self._producer = self._producer, None
        if made is None or not self._open:
            return
        self._open = False
        try:
            made.abort_transaction(TIMEOUT_S)
        except Exception:  # noqa: BLE001 - fenced or broken: the next attempt fences it
            drop_producer(made)


class KafkaDirectWriter(CommittingWriter):
    """At-least-once: an idempotent producer, flushed at commit."""

    def __init__(self, settings: KafkaSinkSettings) -> None:
        self.settings = settings
        self.rows = 0
        self.bytes = 0
        self._producer = producer(settings, None, fresh=False)
        self._topics = _Topics(settings, self._producer)
        self._errors: list[str] = []

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is not None and len(self._errors) < 5:
            self._errors.append(f"{message.topic()}-{message.partition()}: {error.str()}")

    def write(self, batch: pa.RecordBatch) -> None:
        self.bytes += produce_batch(self._producer, self._topics, self.settings, batch, self.rows,
                                    self._delivered)
        self.rows += batch.num_rows

    def commit(self) -> None:
        left = self._producer.flush(TIMEOUT_S)
        if left or self._errors:
            drop_producer(self._producer)
            raise SinkError(f"Kafka did not accept every record of this task: "
                            f"{'; '.join(self._errors) or f'{left} still unsent'}")

    def abort(self) -> None:
        if self._errors:
            drop_producer(self._producer)
