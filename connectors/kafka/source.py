"""The ``eoskit-kafka`` data source: Spark's Kafka source, in Python, read_committed.

Where each piece runs:
- ``KafkaDataSource`` is built on the driver when ``load()`` is called; it
  checks every option there, so a bad one fails before the query starts.
- ``KafkaStreamReader`` lives in one long-lived Python process on the driver
  for the life of the query: it plans offsets (the source's checkpoint
  state, written by Spark to its offset log before any task runs).
- ``read()`` runs in executor Python workers, one task per offset range,
  on the reader Spark pickled on the driver: its settings and the Arrow
  schema of the batches (``schema.arrow_schema``, made when the reader is).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from functools import cached_property

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from eoskit.connectors.kafka.broadcast import (
    VERSION_COLUMN,
    BroadcastPin,
    BroadcastPlanner,
    BroadcastRef,
    with_version,
)
from eoskit.connectors.kafka.client import ClientLog, KafkaMetadata, consumer_config
from eoskit.connectors.kafka.offsets import (
    BROADCAST_KEY,
    DataLoss,
    MinOffsetsGate,
    MinPauseGate,
    OffsetRange,
    PartitionOffsets,
    Timestamps,
    TopicPartition,
    available,
    from_json_dict,
    plan_ranges,
    rate_limit,
    resolve_spec,
    resolve_timestamps,
    split_ranges,
    to_json_dict,
)
from eoskit.connectors.kafka.plugin import PLUGIN
from eoskit.connectors.kafka.reader import DataLossError, read_range
from eoskit.connectors.kafka.schema import arrow_schema, spark_schema
from eoskit.connectors.kafka.settings import KafkaSourceSettings
from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings
from eoskit.connectors.kafka.transactions import KafkaTransactions
from eoskit.connectors.kafka.value_json import JsonValues, make_json_values
from eoskit.core.options import OptionError
from eoskit.connectors.spark.chain import ACKS_SPARK, CHAIN_OPTION, ChainPlan, chained_write
from eoskit.core.stop_gate import StopGate
from eoskit.connectors.spark.datasource import TransactionalDataSource
from eoskit.twophase.decision_log import last_commit_time

log = logging.getLogger(__name__)

SHORT_NAME = PLUGIN.format  # declared in plugin.py


class KafkaInputPartition(InputPartition):
    """One task's work: an offset range of one topic-partition, and where
    its batch's broadcast state is (None: the source has no broadcast)."""

    def __init__(self, offset_range: OffsetRange, broadcast: BroadcastRef | None = None) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range
        self.broadcast = broadcast


class KafkaDataSource(TransactionalDataSource):
    """Spark's Kafka source and sink, by the same format name: options and
    columns as in Spark; the source's offsets live in Spark's offset log, the
    sink commits each task's Kafka transaction with a progress marker.

    Spark builds one from the options of a read or of a write; each side
    parses (and checks) its own options when Spark first asks for it.
    """

    sink_type = KafkaTransactions

    @cached_property
    def settings(self) -> KafkaSourceSettings:
        return KafkaSourceSettings.parse(self.options)

    @cached_property
    def sink_settings(self) -> KafkaSinkSettings:
        return KafkaSinkSettings.parse(self.options)

    def transactional_sink(self, schema: StructType) -> KafkaTransactions:
        return KafkaTransactions(self.sink_settings, schema)

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        # Spark asks for the schema when load() is called, unless the query
        # gave one (.schema(...)): the last moment to report an unreachable
        # broker before a query starts.
        if self.settings.value_format is not None:
            raise OptionError(
                f"option 'value.format' = {self.settings.value_format}: give the value's schema, as "
                "from_json takes it: spark.readStream.format('eoskit-kafka').schema('id BIGINT, "
                "name STRING')... (a Pipeline: KafkaSource(value_schema=...))")
        KafkaMetadata(self.settings.kafka, timeout_s=15).topics()
        return self.kafka_schema()

    def kafka_schema(self) -> StructType:
        return spark_schema(self.settings.include_headers, self.settings.broadcast_topic is not None)

    def values(self, schema: StructType) -> JsonValues | None:
        """The decoder of ``value.format``, for the query's ``schema``; None
        without it, where a schema other than Kafka's is refused, as Spark's
        kafka source refuses one."""
        if self.settings.value_format is None:
            if schema != self.kafka_schema():
                raise OptionError("the eoskit-kafka source has Kafka's fixed schema (key, value, topic, "
                                  "...) and takes no other, unless option 'value.format' = json decodes "
                                  "the values into the schema given")
            return None
        decoded = schema
        if self.settings.broadcast_topic is not None:  # broadcastVersion is added after decoding
            if not schema.fields or schema.fields[-1].name != VERSION_COLUMN:
                raise OptionError(f"with 'broadcastTopic', the schema must end with "
                                  f"'{VERSION_COLUMN} BIGINT' (each row's broadcast version)")
            decoded = StructType(schema.fields[:-1])
        return make_json_values(decoded, self.settings.metadata_columns,
                                spark_schema(self.settings.include_headers), self.settings.value_mode,
                                self.settings.value_time_zone)

    def streamReader(self, schema: StructType) -> "KafkaStreamReader":
        if self.settings.chain is None:
            return KafkaStreamReader(self.settings, self.values(schema))
        # Chained (connectors/spark/chain.py, step 1): the query's rows are the
        # tasks' acks; the values decode into the schema the plan reads.
        if schema != ACKS_SPARK:
            raise OptionError(f"option '{CHAIN_OPTION}': the chained query's schema is {ACKS_SPARK.simpleString()}")
        plan = ChainPlan.decode(self.settings.chain).resolved()
        return KafkaStreamReader(self.settings, self.values(plan.input_spark_schema or self.kafka_schema()), plan)

    def reader(self, schema: StructType) -> "KafkaBatchReader":
        return KafkaBatchReader(self.settings, self.values(schema))


def _read(settings: KafkaSourceSettings, schema: pa.Schema, partition: InputPartition,
          values: JsonValues | None = None) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, KafkaInputPartition):
        # A batch read with nothing to read: PySpark still runs one task, with
        # a placeholder partition, when partitions() returns none.
        return iter(())
    batches = read_range(
        partition.offset_range,
        settings.kafka,
        schema,
        settings.poll_timeout_ms,
        settings.fail_on_data_loss,
    )
    if values is not None:  # value.format: the records' values decoded here, in the worker
        batches = (values.decode(batch) for batch in batches)
    if partition.broadcast is not None:  # broadcast.py, step 4
        return with_version(batches, partition.broadcast.version)
    return batches


def _resolve(
    spec: str | PartitionOffsets | Timestamps,
    partitions: list[TopicPartition],
    metadata: KafkaMetadata,
    earliest: PartitionOffsets,
    latest: PartitionOffsets,
    option: str,
    default_for_unlisted: str,
    settings: KafkaSourceSettings,
    is_start: bool,
) -> PartitionOffsets:
    """A start or end position as offsets: timestamps are looked up on the broker."""
    if isinstance(spec, Timestamps):
        requested = spec.request(partitions)
        found = metadata.for_timestamps(requested)
        return resolve_timestamps(
            spec, requested, found, latest, is_start, settings.starting_no_match
        )
    return resolve_spec(spec, partitions, earliest, latest, option, default_for_unlisted)


def resolve_start(settings: KafkaSourceSettings, metadata: KafkaMetadata,
                  partitions: list[TopicPartition]) -> PartitionOffsets:
    """Where a new streaming query starts reading ``partitions``."""
    return _resolve(settings.starting_offsets or "latest", partitions, metadata,
                    metadata.earliest(partitions), metadata.latest(partitions),
                    "startingOffsets", "latest", settings, is_start=True)


def _report(losses: list[DataLoss], settings: KafkaSourceSettings) -> None:
    if not losses:
        return
    text = "; ".join(loss.message for loss in losses)
    if settings.fail_on_data_loss:
        raise DataLossError(
            f"{text}. Set failOnDataLoss=false to skip lost offsets and go on."
        )
    for loss in losses:
        log.warning("%s (skipped: failOnDataLoss=false)", loss.message)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches from the broker's last stable offsets."""

    def __init__(self, settings: KafkaSourceSettings, values: JsonValues | None = None,
                 chain: ChainPlan | None = None) -> None:
        settings.check_stream()
        self.settings = settings
        #: value.format's decoder, pickled with the reader to each task
        self.values = values
        #: The chained transform and sink (resolved on the driver), pickled to each task; None: not chained
        self.chain = chain
        #: The batches' Arrow schema, made here on the driver: it travels
        #: pickled with the reader to each task's ``read``.
        self.arrow_schema = arrow_schema(settings.include_headers)
        self._metadata: KafkaMetadata | None = None
        self._available_now_target: PartitionOffsets | None = None
        self._group_consumer = None
        self._gate = (
            MinOffsetsGate(settings.min_offsets_per_trigger, settings.max_trigger_delay_s)
            if settings.min_offsets_per_trigger else None
        )
        checkpoint = settings.checkpoint_location
        self._pause = (
            MinPauseGate(settings.min_pause_s, lambda: last_commit_time(checkpoint))
            if settings.min_pause_s and checkpoint else None
        )
        self._broadcast = (BroadcastPlanner(settings, lambda: self.metadata)
                           if settings.broadcast_topic else None)
        self._stop_gate = StopGate(settings.stop_gate) if settings.stop_gate else None

    @property
    def metadata(self) -> KafkaMetadata:
        if self._metadata is None:
            self._metadata = KafkaMetadata(self.settings.kafka)
        return self._metadata

    def _partitions(self) -> list[tuple[str, int]]:
        return self.settings.subscription.select(self.metadata.topics())

    def initialOffset(self) -> dict:
        # Only a new query gets here: a restarted one continues from its offset log.
        broker_topics = self.metadata.topics()
        self.settings.subscription.require_present(broker_topics, self.settings.bootstrap_servers)
        partitions = self.settings.subscription.select(broker_topics)
        return to_json_dict(resolve_start(self.settings, self.metadata, partitions))

    def getDefaultReadLimit(self) -> ReadLimit:
        # PySpark has no composite read limit: with both options the maximum
        # travels as the limit and the minimum is applied from the settings.
        if self.settings.max_offsets_per_trigger:
            return ReadMaxRows(self.settings.max_offsets_per_trigger)
        if self.settings.min_offsets_per_trigger:
            return ReadMinRows(self.settings.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # Pin "all data present now": later records, and partitions created
        # later, belong to the next run.
        partitions = self._partitions()
        self._available_now_target = self.metadata.latest(partitions)

    def _target(self) -> PartitionOffsets | None:
        """Where reading stops for now: stopAtOffsets, the availableNow pin,
        or the lower of the two; None: nowhere."""
        pinned, stop = self._available_now_target, self.settings.stop_at
        if pinned is None or stop is None:
            return pinned if stop is None else stop
        return {tp: min(offset, pinned[tp]) for tp, offset in stop.items() if tp in pinned}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if self._stop_gate is not None and self._stop_gate.hold():
            return start  # a stop held this planning (core/stop_gate.py, step 2): nothing is logged
        start_offsets = from_json_dict(start, "checkpointed offsets")
        if self._pausing():
            return start  # no new data: Spark plans no batch
        partitions = self._partitions()
        target = self._target()
        if target is not None:
            partitions = [tp for tp in partitions if tp in target]
        latest = self.metadata.latest(partitions)
        if target is not None:
            latest = {tp: min(offset, target[tp]) for tp, offset in latest.items()}
        new = [tp for tp in partitions if tp not in start_offsets]
        earliest_new = self.metadata.earliest(new)
        base = {**earliest_new, **{tp: o for tp, o in start_offsets.items() if tp in latest}}
        if self._skip_trigger(limit, available(base, latest)):
            return start
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = rate_limit(base, latest, max_rows)
        if self.settings.fail_on_data_loss:
            # Fail before Spark writes this batch to its offset log.
            earliest = self.metadata.earliest(sorted(set(start_offsets) & set(end)))
            _, losses = plan_ranges(start_offsets, end, {**earliest, **earliest_new})
            _report(losses, self.settings)
        if self._broadcast is None:
            return to_json_dict(end)
        start_pin = BroadcastPin.of(start, self._broadcast.name)
        if end == start_offsets:
            return start  # no batch: the rules are pinned with the next one
        pin = self._broadcast.pin(start_pin)  # broadcast.py, step 1
        return to_json_dict(end, {BROADCAST_KEY: pin.to_json()})

    def _pausing(self) -> bool:
        """minPauseBetweenBatches: the last batch was committed too recently.

        Checked before anything else, so that a held-back trigger neither
        asks the broker nor counts for minOffsetsPerTrigger's delay. Never
        under availableNow: a trigger without data ends that run.
        """
        if self._pause is None or self._available_now_target is not None:
            return False
        return self._pause.left() > 0

    def _skip_trigger(self, limit: ReadLimit, offsets_available: int) -> bool:
        """minOffsetsPerTrigger: too few offsets, and maxTriggerDelay not yet over.

        Never under availableNow: that trigger reads what is there and ends,
        and waiting for more could keep it from ending at all.
        """
        if self._gate is None or self._available_now_target is not None:
            return False
        if isinstance(limit, ReadAllAvailable):
            return False
        return not self._gate.admit(offsets_available)

    def reportLatestOffset(self) -> dict | None:
        partitions = self._partitions()
        latest = self.metadata.latest(partitions)
        stop = self.settings.stop_at
        if stop is not None:  # the lag of a bounded stream is what is left of its bound
            latest = {tp: min(offset, stop[tp]) for tp, offset in latest.items() if tp in stop}
        return to_json_dict(latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        start_offsets = from_json_dict(start, "checkpointed start offsets")
        end_offsets = from_json_dict(end, "checkpointed end offsets")
        if start_offsets == end_offsets:
            return []
        ref = None
        if self._broadcast is not None:
            pin = BroadcastPin.of(end, self._broadcast.name)
            self._broadcast.publish(pin)  # broadcast.py, step 3: before any task
            ref = self._broadcast.ref(pin)
        earliest = self.metadata.earliest(sorted(end_offsets))
        ranges, losses = plan_ranges(start_offsets, end_offsets, earliest)
        _report(losses, self.settings)
        return [KafkaInputPartition(r, ref) for r in _split(ranges, self.settings)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batches = _read(self.settings, self.arrow_schema, partition, self.values)
        return batches if self.chain is None else chained_write(self.chain, batches)

    def commit(self, end: dict) -> None:
        if self._broadcast is not None:
            self._broadcast.committed()  # broadcast.py, step 7
        group = self.settings.commit_group
        if not group:
            return
        try:
            self._commit_to_group(group, from_json_dict(end, "committed offsets"))
        except Exception as exc:  # noqa: BLE001 - lag reporting must never fail the query
            log.warning("committing offsets to consumer group %r failed: %s", group, exc)

    def _commit_to_group(self, group: str, offsets: PartitionOffsets) -> None:
        from confluent_kafka import Consumer, TopicPartition

        if self._group_consumer is None:
            config = consumer_config(self.settings.kafka, ClientLog())
            config["group.id"] = group
            self._group_consumer = Consumer(config)
        try:
            self._group_consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
                asynchronous=False,
            )
        finally:
            # Serves the client's queued log lines (it is never assigned: no records).
            self._group_consumer.poll(0)

    def stop(self) -> None:
        if self._group_consumer is not None:
            self._group_consumer.close()
            self._group_consumer = None
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None


class KafkaBatchReader(DataSourceReader):
    """``spark.read``: one bounded read from startingOffsets to endingOffsets."""

    def __init__(self, settings: KafkaSourceSettings, values: JsonValues | None = None) -> None:
        settings.check_batch()
        self.settings = settings
        self.values = values
        #: As ``KafkaStreamReader.arrow_schema``.
        self.arrow_schema = arrow_schema(settings.include_headers)

    def partitions(self) -> list[InputPartition]:
        settings = self.settings
        metadata = KafkaMetadata(settings.kafka)  # freed when planning returns
        broker_topics = metadata.topics()
        settings.subscription.require_present(broker_topics, settings.bootstrap_servers)
        tps = settings.subscription.select(broker_topics)
        earliest = metadata.earliest(tps)
        latest = metadata.latest(tps)
        start = _resolve(
            settings.starting_offsets or "earliest", tps, metadata, earliest, latest,
            "startingOffsets", "earliest", settings, is_start=True,
        )
        end = _resolve(
            settings.ending_offsets or "latest", tps, metadata, earliest, latest,
            "endingOffsets", "latest", settings, is_start=False,
        )
        backwards = [tp for tp in tps if start[tp] > end[tp]]
        if backwards:
            raise OptionError(
                "the start of a batch read is after its end for "
                + ", ".join(f"{t}-{p} ({start[(t, p)]} > {end[(t, p)]})" for t, p in backwards)
                + ": check startingOffsets/endingOffsets (or their timestamp forms)"
            )
        ranges, losses = plan_ranges(start, end, earliest)
        _report(losses, settings)
        # An empty list is an empty DataFrame: _read() takes PySpark's placeholder.
        return [KafkaInputPartition(r) for r in _split(ranges, settings)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.settings, self.arrow_schema, partition, self.values)


def _split(ranges: list[OffsetRange], settings: KafkaSourceSettings) -> list[OffsetRange]:
    return split_ranges(ranges, settings.min_partitions, settings.max_records_per_partition)
