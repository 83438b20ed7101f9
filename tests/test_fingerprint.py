"""A query's fingerprint (``eoskit.runtime.job.fingerprint``): what a job restored
from a savepoint must share with it, read from pipeline parts, an explained
plan and a checkpoint's operators, and every difference named. Spark
explaining a real query, and a real refused restore, are in
integration_tests/test_savepoints.py."""

from __future__ import annotations

from eoskit.runtime.state.checkpoints import StateOperator
from eoskit.runtime.job.fingerprint import (
    checkpoint_operators,
    component,
    differences,
    operator_kind,
    plan_operators,
    sink_part,
    source_part,
    unchecked,
)

# Spark 4's explain() of rate -> withWatermark -> dropDuplicates -> groupBy().count().
PLAN = """== Physical Plan ==
*(5) HashAggregate(keys=[_groupingexpression#8L], functions=[count(1)])
+- StateStoreSave [_groupingexpression#8L], state info [ checkpoint = <unknown>, runId = f4c4, opId = 0, ver = 0, numPartitions = 2] stateStoreCkptIds = None, Append, -9223372036854775808, -9223372036854775808, 2
   +- *(4) HashAggregate(keys=[_groupingexpression#8L], functions=[merge_count(1)])
      +- StateStoreRestore [_groupingexpression#8L], state info [ checkpoint = <unknown>, runId = f4c4, opId = 0, ver = 0, numPartitions = 2] stateStoreCkptIds = None, 2
         +- *(3) HashAggregate(keys=[_groupingexpression#8L], functions=[merge_count(1)])
            +- Exchange hashpartitioning(_groupingexpression#8L, 2), REQUIRED_BY_STATEFUL_OPERATOR, [plan_id=86]
               +- *(2) Project [(value#1L % 3) AS _groupingexpression#8L]
                  +- StreamingDeduplicate [value#1L], state info [ checkpoint = <unknown>, runId = f4c4, opId = 1, ver = 0, numPartitions = 2] stateStoreCkptIds = None, -9223372036854775808, -9223372036854775808
                     +- Exchange hashpartitioning(value#1L, 2), REQUIRED_BY_STATEFUL_OPERATOR, [plan_id=80]
                        +- EventTimeWatermark 7b39, timestamp#0: timestamp, 10 seconds
                           +- StreamingRelation rate, [timestamp#0, value#1L]
"""


def op(operator_id: int, name: str | None) -> StateOperator:
    return StateOperator(operator_id, name, ("default",), "hdfs", 2, (1, 3), 4, 100, 10, 3)


def test_the_plan_and_the_checkpoint_name_the_same_operators_alike():
    planned = plan_operators(PLAN)
    assert planned == [
        {"operatorId": 0, "name": "StateStoreSave", "kind": "aggregation"},
        {"operatorId": 1, "name": "StreamingDeduplicate", "kind": "deduplication"}]
    # What Spark's operator metadata calls them in the checkpoint.
    saved = checkpoint_operators([op(1, "dedupe"), op(0, "stateStoreSave")])
    assert [o["kind"] for o in saved] == ["aggregation", "deduplication"]
    assert differences({"stateOperators": saved}, {"stateOperators": planned}) == []
    assert plan_operators("== Physical Plan ==\n*(1) Project [value#1]\n+- StreamingRelation x") == []


def test_operator_kinds_from_either_spelling():
    pairs = [("StreamingDeduplicateWithinWatermark", "dedupeWithinWatermark"),
             ("StreamingSymmetricHashJoin", "symmetricHashJoin"),
             ("SessionWindowStateStoreSave", "sessionWindowStateStoreSaveExec"),
             ("StreamingGlobalLimit", "globalLimit"),
             ("TransformWithStateInPySpark", "transformWithStateInPySparkExec"),
             ("FlatMapGroupsWithState", "flatMapGroupsWithState")]
    for plan_name, metadata_name in pairs:
        assert operator_kind(plan_name) == operator_kind(metadata_name) is not None, plan_name
    assert operator_kind(None) is None and operator_kind("somethingNew") is None


def test_a_changed_subscription_is_named_both_ways():
    saved = {"source": source_part("eoskit-kafka", {"subscribe": "orders", "maxOffsetsPerTrigger": "10"})}
    same = {"source": source_part("eoskit-kafka", {"SUBSCRIBE": " orders ", "startingOffsets": "latest"})}
    other = {"source": source_part("eoskit-kafka", {"subscribe": "orders2"})}
    assert differences(saved, same) == []  # rate limits and start positions may change
    assert differences(saved, other) == [
        "the savepoint's source is eoskit-kafka subscribing to topics ['orders'], "
        "this job's is eoskit-kafka subscribing to topics ['orders2']"]
    pattern = {"source": source_part("eoskit-kafka", {"subscribePattern": "orders.*"})}
    assert "subscribing to the pattern 'orders.*'" in differences(saved, pattern)[0]
    assigned = source_part("eoskit-kafka", {"assign": '{"b": [1, 0], "a": [0]}'})
    assert assigned == {"format": "eoskit-kafka", "assign": {"a": [0], "b": [0, 1]}}


def test_a_changed_broadcast_is_named_and_an_unchanged_one_passes():
    rules = {"subscribe": "payments", "broadcastTopic": "rules", "checkpointLocation": "/ck/a"}
    saved = {"source": source_part("eoskit-kafka", rules)}
    moved = {"source": source_part("eoskit-kafka", {**rules, "checkpointLocation": "/ck/b",
                                                    "broadcastMaxBytes": "1m"})}
    assert differences(saved, moved) == []  # where the checkpoint is and the size limit may change
    other = {"source": source_part("eoskit-kafka", {**rules, "broadcastFold": "mod:fold"})}
    assert differences(saved, other) == [
        "the savepoint's source is eoskit-kafka subscribing to topics ['payments'] with the broadcast "
        "state 'rules' folded (latest) from 'rules', this job's is eoskit-kafka subscribing to topics "
        "['payments'] with the broadcast state 'rules' folded (mod:fold) from 'rules'"]
    none = {"source": source_part("eoskit-kafka", {"subscribe": "payments"})}
    assert len(differences(saved, none)) == 1


def test_sinks_are_matched_by_sink_id_the_default_one_included():
    saved = {"defaultSinkId": "ck123", "sinks": [sink_part("eoskit-postgres", {"url": "x"})]}
    assert differences(saved, {"sinks": [sink_part("eoskit-postgres", {"dbtable": "t"})]}) == []
    assert differences(saved, {"sinks": [sink_part("eoskit-postgres", {"sinkId": "ck123"})]}) == []
    other_format = differences(saved, {"sinks": [sink_part("eoskit-mysql", {})]})
    assert other_format == ["the savepoint's sink 'ck123' is eoskit-postgres, this job's sink "
                            "'ck123' is eoskit-mysql"]
    new_id = {"sinks": [sink_part("eoskit-postgres", {"sinkid": "orders2"})]}
    refused = differences(saved, new_id)
    assert len(refused) == 1 and "sink id 'ck123', which no sink of this job has (this job: " \
        "eoskit-postgres with sink id 'orders2')" in refused[0] and "--allow-non-restored-state" in refused[0]
    assert differences(saved, new_id, allow_non_restored_state=True) == []
    assert sink_part("memory", {}) is None  # Spark's own sinks keep nothing a restore could lose
    assert "no eoskit sink" in differences(saved, {"sinks": []})[0]


def test_removed_or_changed_stateful_operators_are_named():
    saved = {"stateOperators": checkpoint_operators([op(0, "dedupe"), op(1, None)])}
    assert differences(saved, {"stateOperators": [
        {"operatorId": 0, "name": "StreamingDeduplicate", "kind": "deduplication"},
        {"operatorId": 1, "name": "StateStoreSave", "kind": "aggregation"}]}) == []  # 1: unknown kind
    assert differences(saved, {"stateOperators": []}) == [
        "the savepoint's state is of the stateful operators [0: deduplication, 1: unknown], "
        "this job's query has none"]
    changed = differences(saved, {"stateOperators": plan_operators(PLAN)})
    assert changed and "this job's query has [0: aggregation, 1: deduplication]" in changed[0]


def test_parts_one_side_lacks_are_not_compared_but_named():
    saved = {"stateOperators": []}
    current = {"source": source_part("eoskit-kafka", {"subscribe": "x"}), "stateOperators": []}
    assert differences(saved, current) == []
    assert unchecked(saved, current) == ["source", "sinks"]


def test_pipeline_parts_say_their_format_and_options():
    from eoskit.connectors.kafka import KafkaSource
    from eoskit.connectors.spark_sinks import SparkSink

    assert component(KafkaSource("b:9092", {"subscribe": "o"})) == (
        "eoskit-kafka", {"kafka.bootstrap.servers": "b:9092", "subscribe": "o"})
    assert component(SparkSink("eoskit-postgres", {"sinkId": "s1"})) == ("eoskit-postgres", {"sinkId": "s1"})
    assert component(object()) is None
