"""A micro-batch's path, run once without services: what warms a JVM and
its Python helpers before the job's own first batch.

One streaming query: a Python data source of two partitions, a shuffle,
the ``noop`` sink, availableNow, then a small batch job. It loads the
classes a job's first batch loads, starts the JVM's Python helpers (in
local mode the zygote, which preloads PySpark, pyarrow and the installed
connectors' client libraries; the task workers' daemon) and has the JIT
compile part of that path. Used by the class archive's maker
(``jvm_archive``, under ``spark-submit``) and by a standby driver
(``eoskit.runtime.job.standby``) in its own session.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

#: The data source's name in the session it is registered in.
FORMAT = "eoskit_warmup"


class WarmupReader(DataSourceStreamReader):
    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self) -> dict:
        return {"n": 2}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(i) for i in range(start["n"], end["n"])]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, str]]:
        yield (partition.value, "x")


class WarmupSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return "n int, s string"

    def streamReader(self, schema: StructType) -> WarmupReader:
        return WarmupReader()


def warm_up(spark: SparkSession, checkpoint: str) -> None:
    """Run the warm-up query with its checkpoint at ``checkpoint`` (a new,
    scratch folder), then a batch job; raises what Spark raises."""
    spark.dataSource.register(WarmupSource)
    query = (spark.readStream.format(FORMAT).load()
             .groupBy("s").count().writeStream.outputMode("complete").format("noop")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    spark.range(10).selectExpr("sum(id)").collect()
