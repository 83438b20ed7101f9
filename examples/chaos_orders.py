"""A job for ``eoskit chaos`` (docs/chaos.md): JSON orders from Kafka into
PostgreSQL, Kafka or files, configured by the environment.

- ``ORDERS_KAFKA``, ``ORDERS_TOPIC``: where the orders are (JSON records
  ``{"id": 1, "amount": 7, "customer": "c1"}``);
- ``ORDERS_SINK``: ``postgres`` (the default; ``ORDERS_PG_URL``,
  ``ORDERS_TABLE``), ``kafka`` (``ORDERS_OUT_TOPIC``) or ``files``
  (``ORDERS_PATH``, Parquet);
- ``ORDERS_COMMIT_MODE``: the sink's ``commitMode`` (its default when unset);
- ``ORDERS_STAMP``: ``now`` adds ``current_timestamp()`` as ``processed_at``,
  ``rand`` adds ``rand()`` as ``sample``: what makes a job non-deterministic
  on replay, for chaos to find.
"""

import os

from pyspark.sql import functions as F

from eoskit.connectors.files import FilesSink
from eoskit.connectors.kafka import KafkaSink, KafkaSource
from eoskit.connectors.postgres import PostgresSink
from eoskit.runtime import Pipeline

KAFKA = os.environ["ORDERS_KAFKA"]
SCHEMA = "id BIGINT, amount BIGINT, customer STRING"
STAMP = os.environ.get("ORDERS_STAMP", "")
MODE = {"commitMode": os.environ["ORDERS_COMMIT_MODE"]} if os.environ.get("ORDERS_COMMIT_MODE") else {}


def parse(df):
    orders = df.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("o")).select("o.*")
    if STAMP == "now":
        orders = orders.withColumn("processed_at", F.current_timestamp())
    elif STAMP == "rand":
        orders = orders.withColumn("sample", F.rand())
    if os.environ.get("ORDERS_SINK") == "kafka":
        return orders.select(F.col("id").cast("string").alias("key"),
                             F.to_json(F.struct(*orders.columns)).alias("value"))
    return orders


def sink():
    kind = os.environ.get("ORDERS_SINK", "postgres")
    if kind == "kafka":
        return KafkaSink(KAFKA, {"topic": os.environ["ORDERS_OUT_TOPIC"], **MODE})
    if kind == "files":
        return FilesSink(os.environ["ORDERS_PATH"], "parquet", options=MODE)
    return PostgresSink(os.environ["ORDERS_PG_URL"], os.environ.get("ORDERS_TABLE", "orders"), MODE)


pipeline = Pipeline(
    name="chaos_orders",
    source=KafkaSource(KAFKA, {"subscribe": os.environ["ORDERS_TOPIC"], "startingOffsets": "earliest",
                               "maxOffsetsPerTrigger": os.environ.get("ORDERS_BATCH", "200")}),
    transform=parse,
    sink=sink(),
    checkpoint_interval="1 second",
    spark_conf={"spark.master": "local[2,3]", "spark.sql.shuffle.partitions": "2",
                "spark.ui.enabled": "false"},
)

if __name__ == "__main__":  # spark-submit chaos_orders.py --checkpoint-dir DIR
    pipeline.main()
