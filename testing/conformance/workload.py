"""The conformance scenarios' input: a topic of JSON records keyed by id,
produced once per test, and what a job's output must be once it has read
them all (every record's row, or every customer's running total).

Runs in the test process, with a Kafka client; nothing here touches a sink.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace

from eoskit.runtime.devtools.demo.orders import recreate_topic
from eoskit.runtime.devtools.services.produce import produce_records


#: The endurance tier's job keeps this many batches in its checkpoint's logs
#: (``retained_checkpoints``, Spark's ``minBatchesToRetain``; 100 by
#: default): what is pruned follows it, and a smaller one is reached, and
#: crossed again and again, in fewer batches.
ENDURANCE_RETAINED = 30
#: Batches of the endurance tier: the driver killed after batch 60, twice the
#: retention (what the job keeps is at its steady size by then), and the
#: 10-batch prune period (``PRUNE_EVERY``) crossed 12 times, the retention
#: four times over. Batch 1,100, where pruning once stopped the two-phase SQL
#: sinks for good, is crossed by test_endurance_protocol.py for every sink
#: without Spark's per-batch cost, and by the long tier in one real run.
ENDURANCE_BATCHES = 4 * ENDURANCE_RETAINED


@dataclass(frozen=True)
class Workload:
    """A topic of ``records`` JSON records over ``partitions``, keyed by id."""

    bootstrap: str
    topic: str
    records: int
    partitions: int
    batch_offsets: int

    @staticmethod
    def amount(record_id: int) -> int:
        return (record_id * 7) % 1000

    @classmethod
    def produce(cls, bootstrap: str, records: int = 100_000, partitions: int = 4,
                batches: int = 5) -> "Workload":
        topic = f"conformance-{uuid.uuid4().hex[:8]}"
        recreate_topic(bootstrap, topic, partitions)
        produce_records(bootstrap, topic, (cls.record(i, partitions) for i in range(records)))
        return cls(bootstrap, topic, records, partitions, max(1, records // batches))

    @classmethod
    def record(cls, i: int, partitions: int) -> tuple[int, bytes, bytes]:
        """Record ``i``: (partition, key, value)."""
        return (i % partitions, str(i).encode(),
                json.dumps({"id": i, "amount": cls.amount(i), "customer": f"c{i % 50}"}).encode())

    def extend(self, more: int) -> "Workload":
        """The same topic with ``more`` records after the last (their ids go on)."""
        produce_records(self.bootstrap, self.topic,
                        (self.record(i, self.partitions) for i in range(self.records, self.records + more)))
        return replace(self, records=self.records + more)

    @classmethod
    def endurance(cls, bootstrap: str) -> "Workload":
        """The endurance tier's input: ``ENDURANCE_BATCHES`` batches of two
        records on one partition."""
        return cls.produce(bootstrap, records=2 * ENDURANCE_BATCHES, partitions=1, batches=ENDURANCE_BATCHES)

    def expected(self) -> list[tuple[int, int]]:
        return [(i, self.amount(i)) for i in range(self.records)]

    def expected_totals(self) -> dict[str, tuple[int, int]]:
        """``customer -> (total amount, orders)``: what a stateful job's
        running totals end at."""
        totals: dict[str, tuple[int, int]] = {}
        for i in range(self.records):
            total, orders = totals.get(f"c{i % 50}", (0, 0))
            totals[f"c{i % 50}"] = (total + self.amount(i), orders + 1)
        return totals
