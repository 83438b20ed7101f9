"""The job every scenario runs: JSON records from Kafka into the sink under test.

Written to a file and run with ``eoskit run`` (or ``spark-submit job.py``:
``Run.submit``), so that a crash kills a real driver process. Settings arrive through the environment:
``EOSKIT_TEST_STATEFUL`` makes it a stateful job: running totals per
customer (``groupBy`` and ``agg``, Spark's state store) in Spark's update
output mode, which reaches the sink through ``foreachBatch``.
``EOSKIT_TEST_CHAINED`` makes it a chained job (``runtime/job/chain.py``):
the values decoded in the source and an ``ArrowTransform``, run in the
source's tasks, which write to the sink themselves.
``EOSKIT_TEST_MASTER`` selects the master (``local[2,3]`` by default, a
``spark://`` cluster's URL for the cluster tier) and ``EOSKIT_TEST_SPARK_CONF``
(a JSON object) adds Spark settings. On a cluster, executors do not inherit
the driver's environment: the crash and pause points' settings travel to
them as ``spark.executorEnv.*``.
"""

JOB = '''
import json
import os

import pyarrow.compute as pc
from pyspark.sql import functions as F

from eoskit.connectors.format_sink import FormatSink
from eoskit.connectors.kafka import KafkaSource
from eoskit.runtime import ArrowTransform, Pipeline

SCHEMA = "id BIGINT, amount BIGINT, customer STRING"
FAIL_ID = os.environ.get("EOSKIT_TEST_FAIL_ID")
SELECT = json.loads(os.environ.get("EOSKIT_TEST_SELECT") or "[]")
MIN_PARTITIONS = os.environ.get("EOSKIT_TEST_MIN_PARTITIONS")
STATEFUL = bool(os.environ.get("EOSKIT_TEST_STATEFUL"))
CHAINED = bool(os.environ.get("EOSKIT_TEST_CHAINED"))
FAULTS = ("EOSKIT_CRASH_AT", "EOSKIT_CRASH_ONCE", "EOSKIT_PAUSE_AT", "EOSKIT_PAUSE_DIR")


def parse(df):
    rows = df.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r")).select("r.*")
    if FAIL_ID:
        # A poison record: the task holding it fails, and Spark aborts the batch.
        rows = rows.withColumn("id", F.when(F.col("id") == int(FAIL_ID),
                               F.raise_error(F.lit("poison record"))).otherwise(F.col("id")))
    if STATEFUL:
        rows = rows.groupBy("customer").agg(F.sum("amount").alias("total"),
                                            F.count("*").alias("orders"))
    # The columns the sink under test takes (e.g. key and value for Kafka).
    return rows.selectExpr(*SELECT) if SELECT else rows


def parse_arrow(batch):
    """The chained job's transform (EOSKIT_TEST_CHAINED): the values decoded in
    the source into SCHEMA, the poison record failing its task as parse() does."""
    if FAIL_ID and pc.any(pc.equal(batch.column("id"), int(FAIL_ID))).as_py():
        raise ValueError("poison record")
    return batch


if CHAINED and (SELECT or STATEFUL):
    raise SystemExit("EOSKIT_TEST_CHAINED: the chained job writes SCHEMA's columns as they are, stateless")

pipeline = Pipeline(
    name="conformance",
    source=KafkaSource(os.environ["EOSKIT_TEST_KAFKA"], {
        "subscribe": os.environ["EOSKIT_TEST_TOPIC"],
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": os.environ["EOSKIT_TEST_MAX_OFFSETS"],
        **({"minPartitions": MIN_PARTITIONS} if MIN_PARTITIONS else {}),
    }, value_schema=SCHEMA if CHAINED else None),
    transform=ArrowTransform(parse_arrow, SCHEMA) if CHAINED else parse,
    sink=FormatSink(os.environ["EOSKIT_TEST_FORMAT"], json.loads(os.environ["EOSKIT_TEST_OPTIONS"]),
                    output_mode="update" if STATEFUL else "append"),
    checkpoint_interval="500 milliseconds",
    # A scenario's failure must end the run, not be retried: restarts are the scenario's.
    restart_strategy=os.environ.get("EOSKIT_TEST_RESTART_STRATEGY", "none"),
    retained_checkpoints=int(os.environ.get("EOSKIT_TEST_RETAINED_CHECKPOINTS", "100")),
    spark_conf={
        # local[2,3]: two cores, and up to three attempts per task, as a cluster retries.
        "spark.master": os.environ.get("EOSKIT_TEST_MASTER", "local[2,3]"),
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        # A short-lived test driver: the JVM's quick compiler starts it sooner.
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        **{f"spark.executorEnv.{name}": os.environ[name] for name in FAULTS if os.environ.get(name)},
        **json.loads(os.environ.get("EOSKIT_TEST_SPARK_CONF") or "{}"),
    },
)

if __name__ == "__main__":  # spark-submit job.py --checkpoint-dir DIR ...
    pipeline.main()
'''
