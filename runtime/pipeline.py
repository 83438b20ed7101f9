"""A job: a source, an optional transformation, a sink and a checkpoint interval.

A ``Pipeline`` only describes the job; ``run`` starts it as one Spark
Structured Streaming query whose checkpoint location holds every bit of
state (source offsets in the offset log, sink progress in the commit log),
so a restart with the same checkpoint directory continues where it stopped.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TextIO

from pyspark.sql import DataFrame, SparkSession
from pyspark.errors import PySparkException, StreamingQueryException
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from eoskit.runtime.progress import ProgressPrinter, RunSummary
from eoskit.runtime.spark import get_session
from eoskit.runtime.spark_errors import root_cause

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_POLL_S = 0.5
_STOP_POLL_S = 0.05


class Source(Protocol):
    def read_stream(self, spark: SparkSession) -> DataFrame: ...
    def describe(self) -> str: ...


class Sink(Protocol):
    def write_stream(self, df: DataFrame) -> DataStreamWriter: ...
    def describe(self) -> str: ...


class PipelineFailed(RuntimeError):
    """The streaming query could not start or stopped with an error.

    The message is one line, the pipeline's name and the root cause: the
    error a data source, sink or UDF raised in Python when there is one (a
    ``SinkError``, an ``OptionError``...), else Spark's innermost message
    (see ``eoskit.runtime.spark_errors``). ``cause_type`` names the root
    cause's Python type (``eoskit.twophase.contract.SinkError``), None for a
    JVM error; ``__cause__`` is Spark's exception, with every trace.
    """

    def __init__(self, message: str, cause_type: str | None = None) -> None:
        super().__init__(message)
        self.cause_type = cause_type

    @classmethod
    def from_spark(cls, pipeline: str, error: BaseException, what: str = "failed") -> "PipelineFailed":
        cause = root_cause(error)
        return cls(f"pipeline {pipeline} {what}: {cause}", cause.type)


@dataclass
class Pipeline:
    """Source -> transform -> sink, one micro-batch per checkpoint interval."""

    name: str
    source: Source
    sink: Sink
    transform: Callable[[DataFrame], DataFrame] | None = None
    checkpoint_interval: str = "5 seconds"
    spark_conf: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(
                f"Pipeline name {self.name!r} must be letters, digits and underscores "
                "(it is the Spark query name, and the table name of a memory sink)"
            )

    def start(
        self, spark: SparkSession, checkpoint_dir: str, until_caught_up: bool = False
    ) -> StreamingQuery:
        """Start the query; ``until_caught_up`` reads what exists now, then ends."""
        df = self.source.read_stream(spark)
        if self.transform is not None:
            df = self.transform(df)
        writer = self.sink.write_stream(df).queryName(self.name)
        writer = writer.option("checkpointLocation", str(checkpoint_dir))
        if until_caught_up:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=self.checkpoint_interval)
        return writer.start()

    def run(
        self,
        checkpoint_dir: str | os.PathLike[str],
        until_caught_up: bool = False,
        spark: SparkSession | None = None,
        out: TextIO | None = None,
    ) -> RunSummary:
        """Run until caught up, stopped by SIGINT/SIGTERM, or failed.

        A stop request waits for the batch in flight to finish, so the job
        ends at a batch boundary; a second signal stops at once (the batch
        in flight is replayed from the offset log on the next start).
        """
        spark = spark or get_session(self.name, self.spark_conf)
        printer = ProgressPrinter(self.name, out)
        stop = _StopRequest()
        try:
            query = self.start(spark, os.fspath(checkpoint_dir), until_caught_up)
        except PySparkException as exc:
            raise PipelineFailed.from_spark(self.name, exc, "could not start") from exc
        with stop.installed():
            in_flight_after: int | None = None
            while query.isActive:
                for progress in query.recentProgress:
                    printer.observe(progress)
                if stop.requested:
                    last_done = printer.summary.last_batch
                    if in_flight_after is None:
                        # The batch in flight when the signal came must finish first.
                        in_flight_after = -1 if last_done is None else last_done
                    finished = last_done is not None and last_done > in_flight_after
                    if stop.forced or finished or not query.status["isTriggerActive"]:
                        query.stop()
                        break
                time.sleep(_STOP_POLL_S if stop.requested else _POLL_S)
            try:
                query.awaitTermination()
            except StreamingQueryException:
                pass  # reported below, from query.exception()
        for progress in query.recentProgress:
            printer.observe(progress)
        printer.summary.ended = time.monotonic()
        error = query.exception()
        if error is not None:
            raise PipelineFailed.from_spark(self.name, error) from error
        printer.out.write(printer.summary.render(self.name) + "\n")
        printer.out.flush()
        return printer.summary


class _StopRequest:
    """SIGINT/SIGTERM handling for the duration of a run (main thread only)."""

    def __init__(self) -> None:
        self.count = 0

    @property
    def requested(self) -> bool:
        return self.count > 0

    @property
    def forced(self) -> bool:
        return self.count > 1

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1

    def installed(self) -> "_Installed":
        return _Installed(self)


class _Installed:
    def __init__(self, request: _StopRequest) -> None:
        self.request = request
        self.previous: dict[int, object] = {}

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self.request._handle)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
