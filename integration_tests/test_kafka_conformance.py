"""The conformance crash scenarios against the Kafka sink (task commit with
progress markers), Kafka to Kafka, verified by a plain read_committed
consumer: every input record's output exactly once, in order per input
partition, and no transaction left open."""

from __future__ import annotations

import json
import signal

import pytest
from confluent_kafka.admin import AdminClient

from eoskit.connectors.kafka.sink_markers import marker_group
from eoskit.runtime.devtools.services.kafka_topic import read_topic
from eoskit.testing.conformance import ENDURANCE, Scenario, TotalsTarget, Workload, run_scenario, scenarios_for
from eoskit.testing.conformance.harness import Run
from eoskit.testing.conformance.kafka import KafkaTopicTarget
from eoskit.core import crash

#: Also run on Apache Kafka 3.9 (the kafka3 tier, conftest.py).
pytestmark = pytest.mark.kafka_versions

INPUT_PARTITIONS = 4
OUTPUT_PARTITIONS = 3


class KafkaTarget(KafkaTopicTarget, TotalsTarget):
    """The kit's Kafka target, with the stateful job's totals, the order of
    records per input partition, and the marker groups it keeps."""

    #: The stateful job's updates, keyed by customer: the topic's last record
    #: of a key is its current total.
    totals_select = ("customer AS key",
                     "to_json(named_struct('customer', customer, 'total', total, 'orders', orders)) AS value")
    records_replay_rows = True
    partitions = OUTPUT_PARTITIONS

    def __init__(self, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def _records(self, table: str):
        return read_topic(self.bootstrap, table).records()

    def check_order(self, table: str) -> None:
        last: dict[tuple[int, int], int] = {}
        for record in self._records(table):
            record_id = json.loads(record.value)["id"]
            source = (record.partition, record_id % INPUT_PARTITIONS)
            assert last.get(source, -1) < record_id, (
                f"output partition {record.partition} has id {record_id} after "
                f"{last[source]} of the same input partition")
            last[source] = record_id

    def totals_options(self, table: str) -> dict[str, str]:
        return self.options(table)

    def create_totals_table(self, table: str) -> None:
        self.create_table(table)

    def totals(self, table: str) -> dict[str, tuple[int, int]]:
        """The last update of each customer. A key's updates are in one
        partition, in batch order, and each batch adds orders: a key's order
        counts must rise strictly, or a batch was written twice."""
        last: dict[str, tuple[int, int]] = {}
        for record in self._records(table):
            value = json.loads(record.value)
            assert record.key == value["customer"].encode(), record
            before = last.get(value["customer"])
            assert before is None or value["orders"] > before[1], (
                f"customer {value['customer']}: an update with {value['orders']} orders after one "
                f"with {before[1]} (partition {record.partition}, offset {record.offset}): a batch "
                "was written twice")
            last[value["customer"]] = (value["total"], value["orders"])
        return last

    def kept(self, table: str, sink_id: str) -> dict[str, int]:
        """The progress markers: one consumer group per task partition."""
        groups = self.admin.list_consumer_groups().result(30).valid
        return {"marker groups": sum(g.group_id.startswith(f"eoskit-{sink_id}-") for g in groups)}


@pytest.fixture(scope="module")
def workload(kafka: str) -> Workload:
    return Workload.produce(kafka, records=20_000, partitions=INPUT_PARTITIONS, batches=5)


SCENARIOS = scenarios_for("idempotent", KafkaTarget)
#: The stateful job (running totals per customer in update mode, each
#: batch's updates in one transaction per task).
STATEFUL = [s for s in scenarios_for("idempotent", KafkaTarget, stateful=True) if s.name in (
    "task_killed_after_commit", "driver_killed_at_random")]


@pytest.fixture(scope="module")
def stateful_workload(kafka: str) -> Workload:
    """Smaller batches: a random kill lands in a run of ten of them."""
    return Workload.produce(kafka, records=20_000, partitions=INPUT_PARTITIONS, batches=10)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_kafka_exactly_once(spark, kafka, workload, scenario, tmp_path):
    run_scenario(KafkaTarget(kafka), workload, scenario, tmp_path, spark)


@pytest.mark.crash
@pytest.mark.parametrize("scenario", STATEFUL, ids=[s.name for s in STATEFUL])
def test_kafka_stateful(spark, kafka, stateful_workload, scenario, tmp_path):
    run_scenario(KafkaTarget(kafka), stateful_workload, scenario, tmp_path, spark, stateful=True)


#: The endurance tier (``ENDURANCE``, see test_postgres_conformance.py); the
#: Kafka sink keeps no per-batch state but its marker groups.
@pytest.mark.crash
@pytest.mark.endurance
@pytest.mark.full
def test_kafka_endurance(spark, kafka, tmp_path):
    workload = Workload.endurance(kafka)
    run_scenario(KafkaTarget(kafka), workload, ENDURANCE, tmp_path, spark)


# -- the markers' lifetime -------------------------------------------------------
# The broker drops a consumer group's offsets offsets.retention.minutes (7
# days by default) after its last commit when the group has no member, and
# the sink's marker groups never have one: a job stopped for longer finds its
# markers gone. Deleting the groups is what the broker's expiry does to them.


def settled_rows(run: Run, quiet_s: float = 3.0, timeout_s: float = 90.0) -> int:
    """The output's row count once it has not changed for ``quiet_s``."""
    import time

    count, since, deadline = len(run.target.rows(run.table)), time.monotonic(), time.monotonic() + timeout_s
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, "the output kept changing after the driver was killed"
        time.sleep(0.5)
        now = len(run.target.rows(run.table))
        if now != count:
            count, since = now, time.monotonic()
    return count


def drop_markers(run: Run) -> None:
    admin = AdminClient({"bootstrap.servers": run.workload.bootstrap})
    groups = [g.group_id for g in admin.list_consumer_groups().result(30).valid
              if g.group_id.startswith(marker_group(run.sink_id, 0)[:-1])]
    assert groups, "the job left no marker group"
    for future in admin.delete_consumer_groups(groups).values():
        future.result(30)


def _markers_dropped_with_a_replay_pending(run: Run) -> None:
    """The driver dies after a task of batch 1 committed; the markers are
    dropped; the restart must not guess whether batch 1's tasks are in."""
    code, log = run.run_job(**{crash.ENV: f"{crash.DRIVER_AFTER_TASK_COMMIT}@1"})
    assert code == -signal.SIGKILL, f"the crash point did not fire (exit {code}):\n{log[-3000:]}"
    # The killed driver's Python workers live in process groups of their own
    # and may still be committing their tasks of batch 1: count once they are done.
    before = settled_rows(run)
    drop_markers(run)
    error = run.expect_failure()
    first = error.strip().splitlines()[0]
    assert "batch 1 is to be replayed" in first and "offsets.retention.minutes" in error, error[-3000:]
    assert len(run.target.rows(run.table)) == before, "the refused start wrote records"


def _markers_dropped_after_a_clean_stop(run: Run) -> None:
    """Every planned batch committed, then the markers dropped: nothing
    depends on them, and the job goes on exactly once."""
    run.recover()
    drop_markers(run)
    run.workload = run.workload.extend(run.workload.records // 2)
    run.recover()
    run.verify_exactly_once()


@pytest.mark.crash
@pytest.mark.parametrize("scenario", [
    Scenario("markers_dropped_with_a_replay_pending", _markers_dropped_with_a_replay_pending),
    Scenario("markers_dropped_after_a_clean_stop", _markers_dropped_after_a_clean_stop),
], ids=lambda s: s.name)
def test_kafka_markers_dropped_by_the_broker(spark, kafka, scenario, tmp_path):
    workload = Workload.produce(kafka, records=8_000, partitions=INPUT_PARTITIONS, batches=4)
    run_scenario(KafkaTarget(kafka), workload, scenario, tmp_path, spark)
