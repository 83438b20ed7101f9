"""The Kafka sink as a conformance target, read back by a plain
``read_committed`` consumer (``eoskit.runtime.dev.kafka_topic``), not by
eoskit's source: what the Kafka crash, broker-fault and dead-letter tests
check their output topics with. Subclasses change where the topic lives
(``create_table``) or what the job writes (``select``, ``options``)."""

from __future__ import annotations

import json

from confluent_kafka.admin import AdminClient

from eoskit.runtime.demo.orders import recreate_topic
from eoskit.runtime.dev.kafka_topic import read_topic
from eoskit.testing.conformance.target import ConformanceTarget


class KafkaTopicTarget(ConformanceTarget):
    """The ``eoskit-kafka`` sink writing each row as a record keyed by its id,
    its value the row as JSON, into a topic of ``partitions`` partitions."""

    format = "eoskit-kafka"
    select = ("CAST(id AS STRING) AS key",
              "to_json(named_struct('id', id, 'amount', amount, 'customer', customer)) AS value")
    partitions = 3

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def options(self, table: str) -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.bootstrap, "topic": table}

    def create_table(self, table: str) -> None:
        recreate_topic(self.bootstrap, table, self.partitions)

    def drop_table(self, table: str) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # held: collected, it cancels its calls
        for future in admin.delete_topics([table]).values():
            future.result(30)

    def rows(self, table: str) -> list[tuple[int, int]]:
        rows = []
        for record in read_topic(self.bootstrap, table).records():
            value = json.loads(record.value)
            assert record.key == str(value["id"]).encode(), record
            rows.append((value["id"], value["amount"]))
        return rows

    def prepared(self, prefix: str) -> list[str]:
        """Kafka has no prepared transactions (a task commits its own)."""
        return []

    def in_doubt(self, prefix: str, table: str) -> list[str]:
        """Transactions left open in the output topic: read_committed readers
        would stall on them."""
        log = read_topic(self.bootstrap, table)
        return sorted(f"partition {p}: {n} offsets past the last stable one"
                      for p, n in log.open_transactions.items())
