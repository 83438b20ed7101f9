"""The demo job: JSON orders from Kafka, parsed, upserted into PostgreSQL
exactly once.

Run by ``eoskit demo`` as ``eoskit run orders_job.py``; the environment
carries the service addresses (``eoskit dev env``).
"""

import os

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from eoskit.connectors.kafka import KafkaSource
from eoskit.connectors.postgres import PostgresSink
from eoskit.runtime import Pipeline

ORDER_SCHEMA = "order_id BIGINT, customer STRING, amount DECIMAL(12,2), created_at TIMESTAMP"


def parse_orders(df: DataFrame) -> DataFrame:
    orders = df.select(
        F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("order"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
    )
    return orders.select("order.*", "kafka_partition", "kafka_offset")


pipeline = Pipeline(
    name="orders_demo",
    source=KafkaSource(
        os.environ["EOSKIT_KAFKA_BOOTSTRAP"],
        {
            "subscribe": os.environ.get("EOSKIT_DEMO_TOPIC", "orders"),
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "4000",
        },
    ),
    transform=parse_orders,
    sink=PostgresSink(
        os.environ["EOSKIT_POSTGRES_URL"],
        os.environ.get("EOSKIT_DEMO_TABLE", "orders"),
        {"mode": "upsert", "key": "order_id", "createTable": "true"},
    ),
    checkpoint_interval="2 seconds",
    spark_conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
)

if __name__ == "__main__":  # spark-submit orders_job.py --checkpoint-dir DIR
    pipeline.main()
