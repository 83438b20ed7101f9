"""Kafka as an eoskit sink: driver-side checks and the two capabilities.

``MarkedCommitting`` (commit mode ``idempotent``, what ``exactly_once``
means for Kafka): each task commits its own Kafka transaction together with
its progress marker (``sink_writer.py`` has the steps). ``DirectCommitting``
(``at_least_once``): an idempotent producer without transactions.

Checked on the driver at query start, before any data moves: the columns
Spark's Kafka sink takes, the broker, the topics, and the sink's history:
- markers of this sink id in Kafka with no record of them beside the
  checkpoint (a deleted checkpoint, a copied job) would make every batch
  look like a replay: refused;
- transactional ids of task partitions an earlier run had and this run may
  not have are initialised once, which aborts a transaction they left open
  (read_committed readers would otherwise wait on it for good).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from eoskit.connectors.dead_letters import source_columns
from eoskit.connectors.kafka import sink_markers
from eoskit.connectors.kafka.client import BrokerUnreachableError, KafkaMetadata
from eoskit.connectors.kafka.schema import HEADER_SPARK_TYPE
from eoskit.connectors.kafka.sink_settings import KafkaSinkSettings
from eoskit.connectors.kafka.sink_clients import (
    close_producer,
    missing_topic_message,
    producer,
    read_marker,
    topic_max_message_bytes,
)
from eoskit.connectors.kafka.sink_writer import KafkaDirectWriter, KafkaMarkedWriter
from eoskit.connectors.sink_options import DEAD_LETTER_TOPIC
from eoskit.twophase.contract import (
    CommitMode,
    DirectCommitting,
    Marker,
    MarkedCommitting,
    ServiceUnavailableError,
    SinkContext,
    SinkError,
)
from eoskit.twophase.decision_log import DecisionLog, latest_planned_batch, spark_batches
from eoskit.twophase.messages import TaskAck

#: The sink's metadata record of how many task partitions it has ever had.
TASKS_META = "kafka-tasks"

_TEXT_OR_BINARY = (StringType(), BinaryType())


def check_columns(schema: StructType, settings: KafkaSinkSettings) -> None:
    """Spark's Kafka sink columns: value (string or binary) required; key
    (string or binary), topic (string), partition (int), headers optional."""
    fields = {f.name: f.dataType for f in schema.fields}
    columns = ", ".join(schema.fieldNames()) or "none"
    if "value" not in fields:
        raise SinkError(f"the DataFrame has no 'value' column (its columns: {columns}); the "
                        "Kafka sink writes value (string or binary) and optionally key, topic, "
                        "partition and headers")
    expected = {"value": _TEXT_OR_BINARY, "key": _TEXT_OR_BINARY, "topic": (StringType(),),
                "partition": (IntegerType(),), "headers": (HEADER_SPARK_TYPE,)}
    for name, types in expected.items():
        if name in fields and fields[name].simpleString() not in {t.simpleString() for t in types}:
            wanted = " or ".join(t.simpleString() for t in types)
            raise SinkError(f"column {name!r} is {fields[name].simpleString()}; the Kafka sink "
                            f"needs {wanted}: cast it in the transform")
    if settings.topic is None and "topic" not in fields:
        raise SinkError("the Kafka sink needs a topic: set the 'topic' option or give the "
                        f"DataFrame a 'topic' column (its columns: {columns})")
    if "headers" in fields and not settings.include_headers:
        raise SinkError("the DataFrame has a 'headers' column but 'includeHeaders' is not "
                        "true: set includeHeaders=true to write them, or drop the column")


class KafkaTransactions(MarkedCommitting, DirectCommitting):
    """The Kafka sink of one query; picklable (settings only)."""

    kind = "kafka"

    def __init__(self, settings: KafkaSinkSettings, schema: StructType) -> None:
        self.settings = settings
        self.schema = schema

    def describe(self) -> str:
        where = f"topic {self.settings.topic}" if self.settings.topic else "the rows' topics"
        return f"Kafka at {self.settings.bootstrap_servers} ({where})"

    def dead_letter_destination(self) -> str | None:
        topic = self.settings.dead_letter_topic
        return None if topic is None else f"Kafka topic {topic}"

    # -- driver ------------------------------------------------------------

    def check(self, schema: StructType, context: SinkContext) -> None:
        check_columns(schema, self.settings)
        try:
            topics = KafkaMetadata(self.settings.kafka, timeout_s=15).topics()
        except BrokerUnreachableError as exc:
            raise ServiceUnavailableError(str(exc)) from None
        if self.settings.topic is not None and self.settings.topic not in topics:
            raise SinkError(missing_topic_message(self.settings.topic))
        self._check_dead_letters(schema, topics)
        if context.commit_mode is not CommitMode.IDEMPOTENT:
            return
        if self.settings.marker_topic is None:
            raise SinkError("the rows carry their topic, so the sink needs the option "
                            "'markerTopic': any existing topic, under whose partition 0 the "
                            "sink's progress markers are committed")
        if self.settings.marker_topic not in topics:
            raise SinkError(f"option 'markerTopic': {missing_topic_message(self.settings.marker_topic)}")
        decisions = DecisionLog(context.checkpoint_location, context.sink_id)
        if not decisions.exists():
            self._refuse_foreign_markers(context.sink_id, decisions)
        else:
            self._refuse_a_replay_without_markers(context.sink_id, decisions, context.checkpoint_location)
        self._abort_leftovers(context.sink_id, decisions)

    def _check_dead_letters(self, schema: StructType, topics: dict[str, list[int]]) -> None:
        """The dead-letter topic exists, the source columns too, and the
        topics' max.message.bytes can be read (DescribeConfigs)."""
        dead = self.settings.dead_letter_topic
        if dead is None:
            return
        if dead not in topics:
            raise SinkError(f"option '{DEAD_LETTER_TOPIC.name}': {missing_topic_message(dead)}")
        source_columns(self.settings.dead_letter_source_columns, schema.fieldNames(), ())
        limits = topic_max_message_bytes(self.settings, [t for t in (self.settings.topic, dead) if t])
        self.settings = self.settings.with_batches_under([v for v in limits.values() if v])

    def _refuse_foreign_markers(self, sink_id: str, decisions: DecisionLog) -> None:
        committed = read_marker(self.settings, sink_markers.marker_group(sink_id, 0))
        if committed is not None:
            raise SinkError(
                f"sink id {sink_id!r} already committed batch {committed.batch} to Kafka, but "
                f"this query's checkpoint has no record of that sink (nothing under "
                f"{decisions.root}): a deleted checkpoint, or another job with the same "
                "sinkId. Every batch would look like a replay and be skipped. Set a new "
                f"'sinkId' (or delete the consumer groups eoskit-{sink_id}-* if this sink's "
                "output is to be written again)")

    def _refuse_a_replay_without_markers(self, sink_id: str, decisions: DecisionLog,
                                         checkpoint: str) -> None:
        """A batch Spark planned but did not log as committed is replayed at
        this start; whether its tasks committed is what their markers say.
        The broker drops a group's offsets ``offsets.retention.minutes``
        (7 days by default) after its last commit when no consumer is in it,
        and ours never has one: a job stopped longer than that finds none.
        Replaying then could write the batch twice, so the start is refused
        (with no replay pending, nothing depends on the old markers: the
        next batch writes new ones)."""
        planned = latest_planned_batch(checkpoint)
        committed = spark_batches(checkpoint, "commits")
        if planned is None or (committed and committed[-1] >= planned):
            return
        known = (decisions.read_meta(TASKS_META) or {}).get("partitions", 0)
        if not known:
            return  # no task of this sink ever committed: no marker to lose
        if any(read_marker(self.settings, sink_markers.marker_group(sink_id, p)) is not None
               for p in range(known)):
            return
        groups = f"eoskit-{sink_id}-0..{known - 1}"
        raise SinkError(
            f"sink id {sink_id!r}: batch {planned} is to be replayed, but the broker holds none of "
            f"the sink's progress markers (consumer groups {groups} on topic "
            f"{self.settings.marker_topic!r}), which say whether its tasks committed: the broker "
            "dropped them after offsets.retention.minutes (the job was stopped longer than that; "
            "7 days by default), or they were deleted. Replaying could write batch "
            f"{planned} twice, skipping it could lose it. Read the output topic "
            f"(read_committed) for batch {planned}'s records: if they are not there, start with a "
            "new 'sinkId' (the replay then writes them once); if they are, restore a savepoint "
            f"taken after batch {planned} instead. Set offsets.retention.minutes above the "
            "longest stop to keep the markers")

    def _abort_leftovers(self, sink_id: str, decisions: DecisionLog) -> None:
        """Initialise the transactional id of every task partition an earlier
        run had: that aborts whatever transaction it left open."""
        known = (decisions.read_meta(TASKS_META) or {}).get("partitions", 0)
        for partition in range(known):
            close_producer(producer(self.settings,
                                    sink_markers.transactional_id(sink_id, partition)))

    def tasks_committed(self, decisions: DecisionLog, batch: int, acks: Sequence[TaskAck]) -> None:
        partitions = max((a.partition for a in acks), default=-1) + 1
        known = (decisions.read_meta(TASKS_META) or {}).get("partitions", 0)
        if partitions > known:
            decisions.write_meta(TASKS_META, {"partitions": partitions, "batch": batch})

    # -- executors ---------------------------------------------------------

    def begin_marked(self, marker: Marker, attempt: int) -> KafkaMarkedWriter:
        return KafkaMarkedWriter(self.settings, marker, attempt)

    def begin_direct(self, marker: Marker, attempt: int) -> KafkaDirectWriter:
        return KafkaDirectWriter(self.settings, marker)


__all__ = ["KafkaTransactions", "check_columns"]
