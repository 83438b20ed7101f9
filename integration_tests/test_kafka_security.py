"""The eoskit-kafka source and sink against the broker's SASL_SSL listener
(SCRAM-SHA-512 over TLS), configured with Spark's option names and a PEM
truststore; a wrong password fails in one line that names the cause and
never shows the password."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from eoskit.runtime.spark.errors import root_cause
from eoskit.runtime.devtools.services.kafka_topic import read_topic

#: Also run on Apache Kafka 3.9 (the kafka3 tier, conftest.py).
pytestmark = pytest.mark.kafka_versions

WRONG = "wr0ng-Passw0rd-for-the-test"


def with_password(options: dict[str, str], password: str) -> dict[str, str]:
    jaas = options["kafka.sasl.jaas.config"]
    head, _ = jaas.split(' password="', 1)
    return {**options, "kafka.sasl.jaas.config": f'{head} password="{password}";'}


@pytest.fixture
def source(new_topic, produce_to, numbered_records):
    topic = new_topic(2, "secsrc")
    produce_to(topic, numbered_records(2, 50))  # over PLAINTEXT
    return topic


def test_batch_read_over_sasl_ssl(spark, kafka_secure, source):
    assert kafka_secure["kafka.security.protocol"] == "SASL_SSL"
    df = spark.read.format("eoskit-kafka").options(**kafka_secure).option("subscribe", source).load()
    values = sorted(int(r.v) for r in df.selectExpr("cast(value as string) v").collect())
    assert values == list(range(100))


def test_streaming_available_now_read_over_sasl_ssl(spark, kafka_secure, source, tmp_path):
    df = (spark.readStream.format("eoskit-kafka").options(**kafka_secure).option("subscribe", source)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40").load())
    query = (df.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    rows = spark.read.parquet(str(tmp_path / "out")).selectExpr("cast(value as string) v").collect()
    assert sorted(int(r.v) for r in rows) == list(range(100))
    assert len([p for p in query.recentProgress if p["numInputRows"]]) >= 3


def test_sink_writes_exactly_once_over_sasl_ssl(spark, kafka, kafka_secure, source, new_topic, tmp_path):
    out = new_topic(2, "secout")
    df = (spark.readStream.format("eoskit-kafka").options(**kafka_secure).option("subscribe", source)
          .option("startingOffsets", "earliest").load())
    query = (df.select("key", F.concat(F.lit("s="), F.col("value").cast("string")).alias("value"))
             .writeStream.format("eoskit-kafka").options(**kafka_secure).option("topic", out)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    log = read_topic(kafka, out)  # read back over PLAINTEXT
    assert sorted(int(r.value.decode()[2:]) for r in log.records()) == list(range(100))
    assert log.open_transactions == {}


def test_wrong_password_fails_load_in_one_line_without_the_password(spark, kafka_secure, source, caplog):
    caplog.set_level("DEBUG", logger="eoskit")
    wrong = with_password(kafka_secure, WRONG)
    with pytest.raises(Exception) as info:
        spark.read.format("eoskit-kafka").options(**wrong).option("subscribe", source).load()
    line = str(root_cause(info.value))
    assert "\n" not in line
    assert line.startswith(f"Kafka at kafka.bootstrap.servers={kafka_secure['kafka.bootstrap.servers']!r} "
                           "refused the SASL credentials of kafka.sasl.jaas.config (user 'eoskit', "
                           "kafka.sasl.mechanism=SCRAM-SHA-512)"), line
    assert "check the username and password" in line
    everything = "\n".join([str(info.value), caplog.text])
    assert WRONG not in everything and kafka_secure_password(kafka_secure) not in everything


def kafka_secure_password(options: dict[str, str]) -> str:
    return options["kafka.sasl.jaas.config"].split(' password="', 1)[1].rsplit('";', 1)[0]


def test_wrong_password_of_the_sink_fails_the_query_in_one_line(spark, kafka, kafka_secure, source,
                                                                new_topic, tmp_path, caplog):
    caplog.set_level("DEBUG", logger="eoskit")
    out = new_topic(1, "secout")
    df = (spark.readStream.format("eoskit-kafka").option("kafka.bootstrap.servers", kafka)
          .option("subscribe", source).option("startingOffsets", "earliest").load())
    query = (df.select("value").writeStream.format("eoskit-kafka")
             .options(**with_password(kafka_secure, WRONG)).option("topic", out)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(300)
    line = str(root_cause(info.value))
    assert "\n" not in line and "refused the SASL credentials of kafka.sasl.jaas.config" in line, line
    everything = "\n".join([str(info.value), caplog.text, json.dumps(query.recentProgress)])
    assert WRONG not in everything


WRONG_PASSWORD_SCRIPT = """
import json, sys
from pyspark.sql import SparkSession
from eoskit.connectors.kafka import KafkaDataSource
from eoskit.runtime.spark.errors import root_cause

options, topic, checkpoint = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.dataSource.register(KafkaDataSource)
try:
    spark.read.format("eoskit-kafka").options(**options).option("subscribe", topic).load().collect()
except Exception as exc:
    print("LOAD FAILED:", root_cause(exc))
try:  # load() asks the broker for the topics already
    df = (spark.readStream.format("eoskit-kafka").options(**options).option("subscribe", topic)
          .option("startingOffsets", "earliest").load())
    query = (df.writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
except Exception as exc:
    print("QUERY FAILED:", root_cause(exc))
"""


def test_a_driver_with_a_wrong_password_never_prints_it(kafka_secure, source, tmp_path):
    """In a process of its own, to see everything the driver and its JVM print."""
    script = tmp_path / "wrong.py"
    script.write_text(WRONG_PASSWORD_SCRIPT)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    result = subprocess.run(
        [sys.executable, str(script), json.dumps(with_password(kafka_secure, WRONG)), source,
         str(tmp_path / f"ck-{uuid.uuid4().hex[:6]}")],
        capture_output=True, text=True, env=env, timeout=300)
    output = result.stdout + result.stderr
    assert "LOAD FAILED: Kafka at kafka.bootstrap.servers=" in result.stdout, output[-3000:]
    assert "QUERY FAILED: Kafka at kafka.bootstrap.servers=" in result.stdout, output[-3000:]
    assert result.stdout.count("refused the SASL credentials") == 2
    assert WRONG not in output
