"""Fraud detection with dynamic rules: Flink's broadcast-state pattern on Spark.

Payments ``{"id": 1, "account": "a7", "amount": 900, "category": "travel"}``
are judged by rules ``{"category": "travel", "max_amount": 500}`` read from a
compacted topic keyed by rule id. Rules change while the job runs; a
tombstone (a null value) deletes one. Each payment is written to PostgreSQL
with the rule it broke (or none) and the version of the rules its batch was
planned with; a replay after a crash judges it by that same version, so
the table is exactly once, replays included (docs/state.md, "Broadcast
state").

Configured by the environment: ``RULES_KAFKA``, ``RULES_EVENTS`` (the
payments topic), ``RULES_TOPIC`` (the rules), ``RULES_PG_URL``,
``RULES_TABLE``, ``RULES_BATCH`` (offsets per batch, default 100).

    eoskit run examples/dynamic_rules.py --checkpoint-dir /tmp/ck-rules
"""

import io
import json
import os

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from eoskit.connectors.kafka import KafkaBroadcast, KafkaSource
from eoskit.connectors.postgres import PostgresSink
from eoskit.runtime import Pipeline

KAFKA = os.environ["RULES_KAFKA"]
OUTPUT = "id long, account string, amount long, rule string, rules_version long"
PAYMENT = pa.schema([("id", pa.int64()), ("account", pa.string()), ("amount", pa.int64()),
                     ("category", pa.string())])
OUT = pa.schema([("id", pa.int64()), ("account", pa.string()), ("amount", pa.int64()),
                 ("rule", pa.string()), ("rules_version", pa.int64())])

rules = KafkaBroadcast("rules", topic=os.environ["RULES_TOPIC"], decode=json.loads)


def judge(batch: pa.RecordBatch, state) -> pa.RecordBatch:
    """The payments of one batch against the rules in force (``state``: rule id -> rule)."""
    lines = io.BytesIO(b"\n".join(batch.column("value").to_pylist()))
    payments = pa_json.read_json(lines, parse_options=pa_json.ParseOptions(explicit_schema=PAYMENT))
    payments = payments.combine_chunks().to_batches()[0]  # one batch in, one out
    broken = pa.nulls(payments.num_rows, pa.string())
    for rule_id in sorted(state, reverse=True):  # the lowest rule id wins: same answer every run
        rule = state[rule_id]
        hit = pc.and_(pc.equal(payments["category"], rule["category"]),
                      pc.greater(payments["amount"], rule["max_amount"]))
        broken = pc.if_else(pc.fill_null(hit, False), pa.scalar(rule_id), broken)
    version = pa.repeat(pa.scalar(state.version, pa.int64()), payments.num_rows)
    return pa.RecordBatch.from_arrays(
        [payments["id"], payments["account"], payments["amount"], broken, version], schema=OUT)


pipeline = Pipeline(
    name="dynamic_rules",
    source=KafkaSource(KAFKA, {"subscribe": os.environ["RULES_EVENTS"], "startingOffsets": "earliest",
                               "maxOffsetsPerTrigger": os.environ.get("RULES_BATCH", "100")},
                       broadcast=rules),
    transform=lambda df: df.mapInArrow(rules.map(judge), OUTPUT),
    sink=PostgresSink(os.environ["RULES_PG_URL"], os.environ.get("RULES_TABLE", "alerts")),
    checkpoint_interval="1 second",
    spark_conf={"spark.master": "local[2,3]", "spark.sql.shuffle.partitions": "2",
                "spark.ui.enabled": "false"},
)

if __name__ == "__main__":  # spark-submit dynamic_rules.py --checkpoint-dir DIR
    pipeline.main()
