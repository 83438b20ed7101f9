"""A job: a source, an optional transformation, a sink and a checkpoint interval.

A ``Pipeline`` only describes the job; ``run`` starts it as one Spark
Structured Streaming query whose checkpoint location holds every bit of
state (source offsets in the offset log, sink progress in the commit log),
so a restart with the same checkpoint directory continues where it stopped.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from eoskit.core.fs import use_storage_options
from eoskit.runtime.state import backend as state_backend
from eoskit.runtime.job.chain import chained_writer
from eoskit.runtime.job.components import Checkpointed, Formatted, Gated, Pausable, Sink, Source
from eoskit.runtime.spark.executors import check_executors, connector_modules
from eoskit.runtime.job.listeners import RunListener
from eoskit.runtime.job.progress import RunSummary
from eoskit.runtime.job.runner import PipelineError, Runner
from eoskit.runtime.job.settings import JobSettings, SettingError
from eoskit.runtime.spark.session import get_session
from eoskit.twophase.identity import qualified_location

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Pipeline:
    """Source -> transform -> sink, one micro-batch per checkpoint interval.

    Keyword settings (``checkpoint_interval="5 seconds"``,
    ``restart_strategy="fixed_delay(3, 10s)"``, ...) are the runtime's
    declared settings (``eoskit.runtime.job.settings``), checked here.
    """

    def __init__(self, name: str, source: Source, sink: Sink,
                 transform: Callable[[DataFrame], DataFrame] | None = None,
                 spark_conf: Mapping[str, str] | None = None, **settings: Any) -> None:
        if not _NAME.match(name):
            raise ValueError(
                f"Pipeline name {name!r} must be letters, digits and underscores "
                "(it is the Spark query name, and the table name of a memory sink)"
            )
        self.name = name
        self.source = source
        self.sink = sink
        self.transform = transform
        self.spark_conf = dict(spark_conf or {})
        #: Whether the last ``start`` chained the transform into the source's tasks (runtime/job/chain.py).
        self.chained = False
        self.settings = JobSettings.of(**state_backend.settings_with_spark_conf(self.spark_conf, settings))
        self.check_settings(self.settings)

    def check_settings(self, settings: JobSettings) -> None:
        """What the settings ask of this job's parts, checked before anything runs."""
        if settings.min_pause and not isinstance(self.source, Pausable):
            raise SettingError(
                f"setting min_pause (--min-pause) = {settings.min_pause:g} s: the source "
                f"{self.source.describe()} cannot hold a batch back (eoskit-kafka can); "
                "remove the setting or use a longer checkpoint_interval")

    def dataframe(self, spark: SparkSession, min_pause: tuple[float, str] | None = None,
                  checkpoint: str | None = None, stop_gate: str | None = None) -> DataFrame:
        """The source, transformed: the query's input, not started.
        ``min_pause``: (seconds, checkpoint) for a source that holds batches back;
        ``checkpoint``: the query's, for a source that keeps state beside it;
        ``stop_gate``: the runner's gate directory, for a source that can hold a planning."""
        df = self._source(min_pause, checkpoint, stop_gate).read_stream(spark)
        return df if self.transform is None else self.transform(df)

    def _source(self, min_pause: tuple[float, str] | None, checkpoint: str | None,
                stop_gate: str | None = None) -> Source:
        source = self.source
        if stop_gate is not None and isinstance(source, Gated):
            source = source.with_stop_gate(stop_gate)
        if checkpoint is not None and isinstance(source, Checkpointed):
            source = source.with_checkpoint(checkpoint)
        if min_pause is not None and isinstance(source, Pausable):
            source = source.with_min_pause(*min_pause)
        return source

    def start(self, spark: SparkSession, checkpoint_dir: str, until_caught_up: bool = False,
              settings: JobSettings | None = None, stop_gate: str | None = None) -> StreamingQuery:
        """Start the query; ``until_caught_up`` reads what exists now, then ends;
        ``stop_gate``: the directory of the runner's ``core.stop_gate.StopGate``.
        On a cluster, first check that the executors can run it
        (``eoskit.runtime.spark.executors``): an ``ExecutorCheckError`` names the node."""
        settings = settings or self.settings
        # Absolute on the driver: executors elsewhere resolve a relative path
        # from their own working directory.
        checkpoint = qualified_location(str(checkpoint_dir))
        check_executors(spark, checkpoint, connector_modules(self.source, self.sink))
        state_backend.check_checkpoint(checkpoint, settings)
        spark.conf.set("spark.sql.streaming.minBatchesToRetain", str(settings.retained_checkpoints))
        state_backend.apply(spark, settings)
        # An availableNow run ends at a trigger without data: no pause there.
        pause = (settings.min_pause, checkpoint) if settings.min_pause and not until_caught_up else None
        # every eoskit sink's mode
        modes = {"commitMode": "at_least_once"} if settings.mode == "at_least_once" else {}
        writer = None
        if settings.operator_chaining and isinstance(self.sink, Formatted):  # runtime/job/chain.py
            writer = chained_writer(self.transform, self._source(pause, checkpoint, stop_gate), self.sink, spark,
                                    {**self.sink.all_options(), "checkpointLocation": checkpoint, **modes})
        self.chained = writer is not None
        if writer is None:
            df = self.dataframe(spark, pause, checkpoint, stop_gate)
            state_backend.check_plan(df, settings, self.name)
            writer = self.sink.write_stream(df).options(**modes)
        writer = writer.queryName(self.name).option("checkpointLocation", checkpoint)
        if until_caught_up:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{settings.checkpoint_interval:g} seconds")
        return writer.start()

    def run(
        self,
        checkpoint_dir: str | os.PathLike[str],
        until_caught_up: bool = False,
        spark: SparkSession | None = None,
        out: TextIO | None = None,
        settings: Mapping[str, Any] | None = None,
        listeners: tuple[RunListener, ...] = (),
        from_savepoint: str | None = None,
        allow_non_restored_state: bool = False,
        storage_options: Mapping[str, Mapping[str, Any]] | None = None,
        print_summary: bool = True,
    ) -> RunSummary:
        """Run until caught up, stopped (SIGINT/SIGTERM, ``eoskit stop``), or
        failed beyond what the restart strategy allows (``runner.py``).
        ``settings`` override the pipeline's own (e.g. command-line flags).
        ``from_savepoint``: restore it first, if its query is this one;
        ``allow_non_restored_state``: even if a sink of it is not restored
        (this job names a new sink id). ``storage_options``: fsspec options
        per protocol (``{"s3": {"endpoint_url": ...}}``) for eoskit's own files
        beside the checkpoint and the savepoint (control, decision log,
        savepoints), made this process's fsspec configuration and exported to
        the Python processes Spark starts after it
        (``eoskit.core.fs.use_storage_options``: give them before the session
        starts for Spark's processes to see them); Spark's own files go through
        Hadoop's configuration. ``print_summary``: write the summary's lines to
        ``out`` at the end (``eoskit run --json`` prints the returned summary
        itself)."""
        merged = self.settings.override(settings or {})
        self.check_settings(merged)
        if storage_options:
            use_storage_options(storage_options)
        spark = spark or get_session(self.name, self.spark_conf)
        runner = Runner(self, qualified_location(os.fspath(checkpoint_dir)), spark,
                        merged, out, until_caught_up, listeners, from_savepoint,
                        allow_non_restored_state, print_summary)
        return runner.run()

    def main(self, argv: Sequence[str] | None = None) -> None:
        """Run this pipeline as ``eoskit run`` does, from a job file started by
        ``spark-submit`` (``if __name__ == "__main__": pipeline.main()``):
        ``spark-submit [--master ...] job.py --checkpoint-dir DIR [flags]``.
        The arguments after the file are ``eoskit run``'s but the job,
        ``--master`` and ``--conf``; the session is spark-submit's. Exits the
        process with ``eoskit run``'s exit code (docs/deploy.md)."""
        # The CLI layer sits above this one: imported when a job file asks for it.
        from eoskit.runtime.cli.main import submit_main

        job = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "job.py"
        sys.exit(submit_main(self, job, sys.argv[1:] if argv is None else list(argv)))


__all__ = ["Pipeline", "PipelineError", "Sink", "Source"]
