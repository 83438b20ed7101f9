"""The Kafka sink as a conformance target, read back by a plain
``read_committed`` consumer (``eoskit.runtime.devtools.services.kafka_topic``), not by
eoskit's source: what the Kafka crash, broker-fault and dead-letter tests
check their output topics with. Subclasses change where the topic lives
(``create_table``) or what the job writes (``select``, ``options``)."""

from __future__ import annotations

import json
import time

from confluent_kafka.admin import AdminClient, NewTopic

from eoskit.runtime.devtools.demo.orders import recreate_topic
from eoskit.runtime.devtools.services.kafka_topic import read_topic
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

    def in_doubt(self, prefix: str, table: str) -> list[str]:
        """Transactions left open in the output topic: read_committed readers
        would stall on them."""
        log = read_topic(self.bootstrap, table)
        return sorted(f"partition {p}: {n} offsets past the last stable one"
                      for p, n in log.open_transactions.items())


# -- a three-node cluster's metadata, for the tests that fault its brokers ------

REPLICAS = 3
TRANSACTION_STATE = "__transaction_state"


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_replicated_topic(bootstrap: str, name: str, partitions: int) -> None:
    """A topic with a replica on each of the three brokers, every partition led."""
    admin = _admin(bootstrap)
    for future in admin.create_topics([NewTopic(name, partitions, REPLICAS)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if (topic is not None and topic.error is None and len(topic.partitions) == partitions
                and all(p.leader >= 0 and len(p.isrs) == REPLICAS for p in topic.partitions.values())):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {name} did not get {partitions} partitions of {REPLICAS} in-sync replicas")


def partition_metadata(bootstrap: str, topic: str, partition: int):
    return _admin(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[partition]


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    return partition_metadata(bootstrap, topic, partition).leader


def _java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as a signed 32-bit int."""
    value = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        value = (31 * value + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def transaction_coordinator(bootstrap: str, transactional_id: str) -> int:
    """The broker coordinating ``transactional_id``: the leader of its
    partition of ``__transaction_state``, which Kafka's transaction
    coordinator computes as ``Utils.abs(id.hashCode()) % partitions``
    (confluent-kafka's AdminClient has no FindCoordinator call)."""
    topic = _admin(bootstrap).list_topics(TRANSACTION_STATE, timeout=10).topics[TRANSACTION_STATE]
    code = _java_string_hash(transactional_id)
    index = 0 if code == -(1 << 31) else abs(code)
    return topic.partitions[index % len(topic.partitions)].leader


def wait_for_full_isr(bootstrap: str, topics: list[str], timeout: float = 90.0) -> None:
    """Every partition of ``topics`` led and with three in-sync replicas."""
    deadline = time.monotonic() + timeout
    short: list[str] = []
    while time.monotonic() < deadline:
        short = []
        metadata = _admin(bootstrap).list_topics(timeout=10)
        for name in topics:
            for number, partition in metadata.topics[name].partitions.items():
                if partition.leader < 0 or len(partition.isrs) < REPLICAS:
                    short.append(f"{name}[{number}] isr {sorted(partition.isrs)}")
        if not short:
            return
        time.sleep(0.5)
    raise AssertionError(f"the ISR did not come back to {REPLICAS}: {short}")
