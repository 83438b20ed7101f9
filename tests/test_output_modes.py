"""Sink components and Spark's output modes: every eoskit sink takes
``update`` and ``complete`` (through foreachBatch), and a wrong mode or an
unknown format is refused when the pipeline is built, naming it."""

from __future__ import annotations

import pytest

from eoskit.connectors.format_sink import FormatSink
from eoskit.connectors.kafka import KafkaSink
from eoskit.core.options import OptionError
from eoskit.connectors.postgres import PostgresSink
from eoskit.connectors.spark.foreach_batch import BatchWriter

PG = "postgresql+psycopg://u@127.0.0.1:5432/db"


def test_every_sink_component_refuses_an_output_mode_spark_does_not_have():
    for make in (lambda m: PostgresSink(PG, "t", output_mode=m),
                 lambda m: KafkaSink("127.0.0.1:9092", {"topic": "t"}, output_mode=m),
                 lambda m: FormatSink("eoskit-postgres", {"url": PG, "dbtable": "t"}, output_mode=m)):
        with pytest.raises(OptionError, match="output_mode 'upsert' of eoskit-.*append, update, complete"):
            make("upsert")


def test_the_kafka_sink_has_a_foreach_batch_entry():
    sink = KafkaSink("127.0.0.1:9092", {"topic": "totals"}, output_mode="update")
    writer = sink.foreach_batch()
    assert isinstance(writer, BatchWriter) and writer.options["topic"] == "totals"


def test_a_sink_by_format_name_is_found_in_the_plugin_registry_with_its_checks():
    sink = FormatSink("eoskit-kafka", {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"})
    assert sink.data_source.name() == "eoskit-kafka" and sink.spark_format == "eoskit-kafka"
    with pytest.raises(OptionError, match="format 'eoskit-nosuch'.*installed: .*eoskit-postgres"):
        FormatSink("eoskit-nosuch", {})
    with pytest.raises(Exception, match="mode"):
        FormatSink("eoskit-postgres", {"url": PG, "dbtable": "t", "mode": "sideways"})
