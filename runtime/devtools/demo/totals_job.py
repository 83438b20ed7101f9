"""The demo's stateful job: running totals per customer from the orders
topic, kept in Spark's state store and upserted into PostgreSQL exactly
once.

``groupBy(...).agg(...)`` in Spark's update output mode: each batch upserts
the customers it changed, through the sink's ``foreachBatch`` entry, on the
same two-phase protocol. State and table recover together: a restart
replays a batch from the state of the batch before, and the decision log
keeps the sink from writing a batch twice. Run by ``eoskit demo`` as
``eoskit run totals_job.py``.
"""

import os

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from eoskit.connectors.kafka import KafkaSource
from eoskit.connectors.postgres import PostgresSink
from eoskit.runtime import Pipeline


def running_totals(df: DataFrame) -> DataFrame:
    orders = df.select(F.from_json(F.col("value").cast("string"),
                                   "customer STRING, amount DECIMAL(12,2)").alias("o")).select("o.*")
    return orders.groupBy("customer").agg(F.sum("amount").alias("total"), F.count("*").alias("orders"))


pipeline = Pipeline(
    name="totals_demo",
    source=KafkaSource(
        os.environ["EOSKIT_KAFKA_BOOTSTRAP"],
        {
            "subscribe": os.environ.get("EOSKIT_DEMO_TOPIC", "orders"),
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "4000",
        },
    ),
    transform=running_totals,
    sink=PostgresSink(
        os.environ["EOSKIT_POSTGRES_URL"],
        os.environ.get("EOSKIT_DEMO_TOTALS_TABLE", "customer_totals"),
        {"mode": "upsert", "key": "customer", "createTable": "true"},
        output_mode="update",
    ),
    checkpoint_interval="2 seconds",
    spark_conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
)

if __name__ == "__main__":  # spark-submit totals_job.py --checkpoint-dir DIR
    pipeline.main()
