"""The Kafka source as a ``Pipeline`` component."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

from pyspark.sql import DataFrame, SparkSession

from eoskit.connectors.kafka.broadcast import KafkaBroadcast
from eoskit.connectors.kafka.pin import bounded_options, describe, pin
from eoskit.connectors.kafka.scratch_input import KafkaScratchInput
from eoskit.connectors.plugins import register_data_source
from eoskit.connectors.kafka.settings import KafkaSourceSettings
from eoskit.connectors.kafka.source import SHORT_NAME, KafkaDataSource
from eoskit.connectors.spark.chain import ACKS_SPARK, CHAIN_OPTION, AcksDataSource
from eoskit.core.options import OptionError


def kafka_servers(bootstrap: str) -> tuple[tuple[str, str, int], ...]:
    """``("kafka", host, port)`` of each ``host:port`` of a bootstrap list
    (``[::1]:9092`` too); an entry without a port is left out, as a client
    would fail on it before the job reads anything."""
    found = []
    for entry in (e.strip() for e in bootstrap.split(",")):
        host, _, port = entry.rpartition(":")
        if host and port.isdigit():
            found.append(("kafka", host.strip("[]"), int(port)))
    return tuple(found)


@dataclass
class KafkaSource:
    """``eoskit-kafka`` with its options; checked when the pipeline is built.

    ``options`` take Spark's names (``subscribe``, ``startingOffsets``,
    ``maxOffsetsPerTrigger``, ``kafka.*``...), exactly as with
    ``spark.readStream.format("eoskit-kafka").options(**options)``.
    """

    bootstrap_servers: str
    options: dict[str, str] = field(default_factory=dict)
    #: A broadcast input (``broadcast.KafkaBroadcast``): its state, pinned
    #: with each batch, for the transform to judge the events by.
    broadcast: KafkaBroadcast | None = None
    #: The value's schema (Spark's DDL, ``"id BIGINT, name STRING"``): the
    #: values are decoded in the source (``value.format=json``), and the
    #: query gets these columns instead of Kafka's.
    value_schema: str | None = None

    def __post_init__(self) -> None:
        self.options = {k: str(v) for k, v in self.options.items()}
        if self.value_schema is not None and not any(k.lower() == "value.format" for k in self.options):
            self.options["value.format"] = "json"
        KafkaSourceSettings.parse(self.all_options())

    def all_options(self) -> dict[str, str]:
        broadcast = self.broadcast.options() if self.broadcast is not None else {}
        return {"kafka.bootstrap.servers": self.bootstrap_servers, **self.options, **broadcast}

    def with_checkpoint(self, checkpoint: str) -> "KafkaSource":
        """This source knowing the query's checkpoint (``runtime.components.Checkpointed``):
        its broadcast state lives beside it. Binds the broadcast itself, so
        that a transform built after this carries the location to executors."""
        if self.broadcast is None:
            return self
        self.broadcast.bind(checkpoint)
        return replace(self, options={**self.options, "checkpointLocation": checkpoint})

    #: The Spark format (runtime.components.Formatted): the savepoint's
    #: fingerprint, and the connector every executor must import.
    spark_format: ClassVar[str] = SHORT_NAME

    def with_min_pause(self, seconds: float, checkpoint: str) -> "KafkaSource":
        """This source holding each batch back until ``seconds`` after the
        last commit in ``checkpoint`` (the runtime's ``min_pause``)."""
        return replace(self, options={**self.options,
                                      "minPauseBetweenBatches": f"{math.ceil(seconds * 1000)}ms",
                                      "checkpointLocation": checkpoint})

    def with_stop_gate(self, directory: str) -> "KafkaSource":
        """This source holding the next batch's planning while a stop waits
        for a batch boundary (``runtime.components.Gated``; core/stop_gate.py)."""
        return replace(self, options={**self.options, "eoskit.stopGate": directory})

    def pin(self) -> dict:
        """The input as it is now (``runtime.components.Replayable``)."""
        return pin(KafkaSourceSettings.parse(self.all_options()))

    def bounded(self, pin: dict) -> "KafkaSource":
        """This source reading exactly ``pin``: its start, up to its end."""
        return replace(self, options=bounded_options(self.options, pin))

    def describe_pin(self, pin: dict) -> str:
        return describe(pin)

    def servers(self) -> tuple[tuple[str, str, int], ...]:
        """The brokers it bootstraps from (``runtime.components.Served``)."""
        return kafka_servers(self.bootstrap_servers)

    def scratch_input(self, suffix: str) -> "KafkaScratchInput":
        """A scratch copy of this source's one input topic, named with
        ``suffix``, and this source reading it (``runtime.components.Fillable``)."""
        return KafkaScratchInput(self, suffix)

    def chains_values(self) -> str | None:
        """``runtime.components.Chainable``: what the transform receives."""
        return self.value_schema

    def chained_stream(self, spark: SparkSession, plan: str) -> DataFrame:
        """``runtime.components.Chainable``: this source's tasks running ``plan``."""
        if self.broadcast is not None:
            raise OptionError("a source with broadcast state cannot be chained: its rows need the "
                              "broadcast version column the plan does not carry")
        register_data_source(spark, KafkaDataSource)
        register_data_source(spark, AcksDataSource)
        reader = spark.readStream.format(SHORT_NAME).options(**self.all_options()).option(CHAIN_OPTION, plan)
        if self.value_schema is not None and not any(k.lower() == "value.timezone" for k in self.options):
            reader = reader.option("value.timeZone", spark.conf.get("spark.sql.session.timeZone"))
        return reader.schema(ACKS_SPARK).load()

    def read_stream(self, spark: SparkSession) -> DataFrame:
        register_data_source(spark, KafkaDataSource)
        reader = spark.readStream.format(SHORT_NAME).options(**self.all_options())
        if self.value_schema is not None:
            if not any(k.lower() == "value.timezone" for k in self.options):
                # from_json reads an offset-less timestamp in the session's time zone
                reader = reader.option("value.timeZone", spark.conf.get("spark.sql.session.timeZone"))
            version = ", broadcastVersion BIGINT" if self.broadcast is not None else ""
            reader = reader.schema(self.value_schema + version)
        return reader.load()

    def describe(self) -> str:
        return f"{SHORT_NAME} ({KafkaSourceSettings.parse(self.all_options()).subscription.describe()})"
