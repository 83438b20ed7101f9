"""The demo's second job: JSON orders from Kafka, enriched (amount with tax,
customer tier), written to another Kafka topic exactly once.

Run by ``eoskit demo`` as ``eoskit run enrich_job.py``, after the PostgreSQL
leg and on the same orders; the environment carries the broker's address
(``eoskit dev env``), the topics and the sink id (one per demo run, so that
a rerun of the demo never meets the progress markers of the last one).
"""

import os

from eoskit.connectors.kafka import KafkaSink, KafkaSource
from eoskit.runtime import Pipeline
from eoskit.runtime.devtools.demo.enrich import enrich_orders

sink_options = {"topic": os.environ.get("EOSKIT_DEMO_ENRICHED_TOPIC", "orders-enriched")}
if os.environ.get("EOSKIT_DEMO_SINK_ID"):
    sink_options["sinkId"] = os.environ["EOSKIT_DEMO_SINK_ID"]

pipeline = Pipeline(
    name="enrich_demo",
    source=KafkaSource(
        os.environ["EOSKIT_KAFKA_BOOTSTRAP"],
        {
            "subscribe": os.environ.get("EOSKIT_DEMO_TOPIC", "orders"),
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "4000",
        },
    ),
    transform=enrich_orders,
    sink=KafkaSink(os.environ["EOSKIT_KAFKA_BOOTSTRAP"], sink_options),
    checkpoint_interval="2 seconds",
    # Up to three attempts per task, as a cluster retries (local[*] gives
    # each task one).
    spark_conf={"spark.master": "local[*,3]",
                "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
)

if __name__ == "__main__":  # spark-submit enrich_job.py --checkpoint-dir DIR
    pipeline.main()
