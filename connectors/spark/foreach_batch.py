"""Any eoskit sink as a ``foreachBatch`` function, on the same commit protocol.

Why: Spark grants the ``update`` and ``complete`` output modes (running
aggregates, ``transformWithState`` in update mode) only to sinks with an
internal capability that Python data sources lack, so
``writeStream.format("eoskit-postgres").outputMode("update")`` is refused.
``foreachBatch`` accepts every output mode and passes the batch id, which is
all the protocol needs. ``BatchWriter`` plays, inside that one call on the
driver, the three parts Spark plays for a data source (``adapter.py``):

1. Planning: build the data source from the options, check the sink, settle
   in-doubt transactions (the start-up sweep) and create the decision log:
   ``TransactionalDataSource.streamWriter``, unchanged. The checkpoint
   location is the running query's own, read from it.
2. Tasks: one Spark task per partition of the batch's DataFrame runs
   ``write_task`` (``task.py``) with the id of this batch, its partition and
   its attempt, and hands back its ack: a job of ``mapInArrow`` whose only
   output is the pickled acks, collected on the driver. Spark keeps one
   successful attempt per partition, as it keeps one commit message. A
   batch the decision log already holds is a replay (Spark re-runs the last
   batch of a run that died before writing its commit log): its tasks write
   nothing. Every task reads its partition to the end all the same: a
   stateful query's state stores commit only then, and Spark fails a
   foreachBatch batch whose stores did not.
3. Commit: ``TransactionalStreamWriter.commit`` with the acks (the
   coordinator's decision, commits, roll-backs; a replayed batch's decision
   is found done, or rolled forward); if the tasks failed, ``abort``, and
   the error fails the batch, which the query's restart replays.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.datasource import CaseInsensitiveDict

from eoskit.connectors.spark.datasource import TransactionalDataSource, TransactionalStreamWriter
from eoskit.twophase.contract import SinkError
from eoskit.twophase.identity import qualified_location
from eoskit.twophase.messages import TaskAck
from eoskit.twophase.sink_options import CHECKPOINT
from eoskit.twophase.task import write_task

_ACKS = pa.schema([("ack", pa.binary())])


def running_checkpoint(df: DataFrame) -> str | None:
    """The checkpoint location of the streaming query whose batch ``df`` is
    (inside ``foreachBatch``), or None where it cannot be read: the query id
    is a local property of the query's thread, and the query knows its
    resolved checkpoint root."""
    try:
        session = df.sparkSession
        query_id = session.sparkContext.getLocalProperty("sql.streaming.queryId")
        if not query_id:
            return None
        jquery = session._jsparkSession.streams().get(query_id)  # type: ignore[attr-defined]
        if jquery is None:
            from pyspark.sql import SparkSession

            active = SparkSession.getActiveSession()
            jquery = active._jsparkSession.streams().get(query_id) if active else None  # type: ignore[union-attr]
        if jquery is None:
            return None
        return str(jquery.streamingQuery().resolvedCheckpointRoot())
    except Exception:  # noqa: BLE001 - Spark Connect, or internals moved: the option says it
        return None


def _local(location: str) -> str:
    """Spark's ``file:/path`` as the plain path the data source writer is given."""
    if location.startswith("file:") and not location.startswith("file://"):
        return location[len("file:"):]
    return location


def _task_writer(writer: TransactionalStreamWriter, batch: int) -> Callable[[Iterator[pa.RecordBatch]],
                                                                           Iterator[pa.RecordBatch]]:
    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        identity = (batch, context.partitionId(), context.attemptNumber())
        ack = write_task(writer.sink, writer.decisions, writer.commit_mode, batches, identity,
                         parallelism=writer.parallelism)
        for _ in batches:
            pass  # a replay wrote nothing: the partition is read to its end all the same
        yield pa.RecordBatch.from_pylist([{"ack": pickle.dumps(ack)}], schema=_ACKS)

    return write


class BatchWriter:
    """``foreachBatch(BatchWriter(PostgresDataSource, options))``: writes each
    micro-batch exactly once through the sink's commit protocol, in any
    output mode. The options are the data source's own (checked here, when
    the query is built); ``checkpointLocation`` may be left out, as it is
    read from the running query."""

    def __init__(self, data_source: type[TransactionalDataSource], options: Mapping[str, Any]) -> None:
        self.data_source = data_source
        self.options = {k: str(v) for k, v in options.items()}
        data_source(CaseInsensitiveDict(self.options))  # every option check, with Spark's options

    def checkpoint_location(self, df: DataFrame) -> str:
        given = CHECKPOINT.get(self.options)
        found = running_checkpoint(df)
        if found is None and given is None:
            raise SinkError(
                f"{self.data_source.name()} in foreachBatch cannot read the query's checkpoint "
                "location here; give it as the option 'checkpointLocation' too (the decision "
                "log lives beside it)")
        if found is not None and given is not None and \
                qualified_location(_local(found)).rstrip("/") != qualified_location(given).rstrip("/"):
            raise SinkError(
                f"{self.data_source.name()} in foreachBatch: option 'checkpointLocation' = "
                f"{given!r}, but the query's checkpoint is {found!r}; leave the option out")
        return qualified_location(given if given is not None else _local(found or ""))

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        # Step 1: planning, as for the data source (check, sweep, decision log).
        options = CaseInsensitiveDict({**self.options, "checkpointLocation": self.checkpoint_location(df)})
        writer = self.data_source(options).streamWriter(df.schema, False)
        # Step 2: the tasks, one per partition, each writing and acking.
        try:
            rows = df.mapInArrow(_task_writer(writer, batch_id), "ack binary").collect()
        except BaseException:
            writer.abort([], batch_id)
            raise
        acks: list[TaskAck] = [pickle.loads(row.ack) for row in rows]
        # Step 3: the coordinator decides and commits.
        writer.commit(acks, batch_id)  # type: ignore[arg-type]
