"""Any eoskit ``Sink`` as a PySpark streaming data source.

Where each piece runs, as Spark 4 drives a Python streaming sink:
- planning, on the driver, once per micro-batch before its tasks start: a
  fresh ``DataSource`` is built from the options and ``streamWriter`` is
  called. Here eoskit checks the sink, settles in-doubt transactions (the
  start-up sweep, noted in the decision log for the runtime's metrics) and
  creates the decision log.
- ``write``, on executors, once per task (``eoskit.twophase.task``).
- ``commit`` / ``abort``, on the driver, in a separate Python process that
  receives a *pickled* copy of the data source: it knows only what the copy
  carries and the task acks. The copy is recognised by having been
  unpickled, so the sweep never runs there (where the batch's own
  transactions are in flight).

What the copy carries: Spark pickles the data source once, on the driver,
when it creates it for the query (its ``create_data_source`` worker), and
hands every commit the same bytes. ``checkpointLocation`` (made absolute)
and ``sinkId`` (or the checkpoint's default, read from its identity record)
are resolved then, in ``__getstate__``, and travel resolved: the commit
reads neither the options (``options.py``) nor the checkpoint's identity
(``identity.py``). Without the option, as where a data source is built only
to check its options (a ``Pipeline`` component, ``foreach_batch``), nothing
is resolved, and the option is required at first use, as before.
"""

from __future__ import annotations

import json
import logging
from abc import abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from eoskit.twophase.contract import (
    CommitMode,
    MarkedCommitting,
    Sink,
    SinkContext,
    SinkError,
    TwoPhaseCommitting,
    resolve_commit_mode,
)
from eoskit.twophase import marked
from eoskit.core import timings
from eoskit.twophase.coordinator import Coordinator
from eoskit.twophase.decision_log import DecisionLog, latest_planned_batch
from eoskit.twophase.messages import TaskAck, dead_letters
from eoskit.twophase.task import write_task
from eoskit.twophase.identity import (
    default_sink_id,
    qualified_location,
    record_identity,
)
from eoskit.twophase.sink_options import CHECKPOINT, COMMIT_MODE, OPERATOR_STATE_PARALLELISM, SINK_ID
from eoskit.twophase.txn_id import validate_sink_id

log = logging.getLogger(__name__)

#: Sinks already checked by this planning process (it is reused batch after
#: batch, and across queries): reflection, rights and start-up work (e.g. the
#: Kafka sink aborting leftover transactions) run once per process and set of
#: options, as Spark's JDBC sink checks once per query start, not at every
#: micro-batch. (Keying it by the run record's start, ``identity.run_started``,
#: re-ran the Kafka sink's start-up mid-session and fenced live producers:
#: see issue 8's open bug.)
_checked: dict[str, Sink] = {}


class TransactionalStreamWriter(DataSourceStreamArrowWriter):
    """Executors write (and prepare, or commit with a marker); the driver
    decides and commits two-phase batches. ``parallelism``: the option
    ``operatorStateParallelism`` (writers that keep operator state)."""

    def __init__(self, sink: Sink, decisions: DecisionLog, commit_mode: CommitMode,
                 parallelism: int | None = None) -> None:
        self.sink = sink
        self.decisions = decisions
        self.commit_mode = commit_mode
        self.parallelism = parallelism

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskAck:
        return write_task(self.sink, self.decisions, self.commit_mode, iterator, parallelism=self.parallelism)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        with timings.span("driver.commit", batchId):
            if isinstance(self.sink, TwoPhaseCommitting) and self.commit_mode is CommitMode.TWOPHASE:
                Coordinator(self.sink.committer(), self.decisions, self.parallelism).commit(messages, batchId)
            elif isinstance(self.sink, MarkedCommitting) and self.commit_mode is CommitMode.IDEMPOTENT:
                marked.commit(self.sink, self.decisions, batchId,
                              [m for m in messages if m is not None])
        count = dead_letters(messages)
        if count:
            log.warning("batch %d: %d record(s) dead-lettered to %s", batchId, count,
                        self.sink.dead_letter_destination() or self.sink.describe())

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if isinstance(self.sink, TwoPhaseCommitting) and self.commit_mode is CommitMode.TWOPHASE:
            Coordinator(self.sink.committer(), self.decisions).abort(batchId)


class TransactionalDataSource(DataSource):
    """Base of eoskit's sinks as data sources; subclasses name their sink type
    and build the sink. The commit mode comes from the ``commitMode`` option,
    checked against the sink type's capabilities."""

    #: The sink's class: its capabilities decide the allowed commit modes.
    sink_type: ClassVar[type[Sink]]

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._planning = True
        #: ``checkpoint_location()`` and ``sink_id()``, once resolved on the
        #: driver (None until then); pickled with the data source.
        self._location: str | None = None
        self._sink_id: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        """The data source as Spark pickles it for the commit process, with
        the checkpoint location and sink id resolved here, on the driver
        (the module doc). Without ``checkpointLocation`` they stay to be
        resolved at first use."""
        if CHECKPOINT.get(self.options):
            try:
                self.checkpoint_location()
                self.sink_id()
            except Exception:  # noqa: BLE001 - left to first use, which raises it as before
                pass
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._planning = False

    @abstractmethod
    def transactional_sink(self, schema: StructType) -> Sink:
        """The sink for these options and this DataFrame schema."""

    def commit_mode(self) -> CommitMode:
        return resolve_commit_mode(self.sink_type, COMMIT_MODE.get(self.options))

    def operator_state_parallelism(self) -> int | None:
        """``operatorStateParallelism``; refused unless the commit mode is
        ``twophase``: operator state is checkpointed in a batch's decision,
        and the other modes have none."""
        parallelism = OPERATOR_STATE_PARALLELISM.get(self.options)
        if parallelism is not None and self.commit_mode() is not CommitMode.TWOPHASE:
            raise SinkError(
                f"{self.name()}: option '{OPERATOR_STATE_PARALLELISM.name}' needs commitMode "
                f"twophase (given: {self.commit_mode().value}): operator state is checkpointed with "
                "a two-phase batch's decision, and marked or at-least-once commits have no decision")
        return parallelism

    def sink_id(self) -> str:
        """``sinkId``, or the checkpoint's default sink id; resolved once."""
        if self._sink_id is None:
            given = SINK_ID.get(self.options)
            self._sink_id = (validate_sink_id(given) if given
                             else default_sink_id(self.checkpoint_location()))
        return self._sink_id

    def checkpoint_location(self) -> str:
        """Absolute, as the driver means it: tasks on other nodes and other
        working directories read the decision log from this path. Resolved
        once."""
        if self._location is None:
            location = CHECKPOINT.get(self.options)
            if not location:
                raise SinkError(
                    f"{self.name()} needs the query's 'checkpointLocation' option on "
                    "writeStream: its decision log lives beside the checkpoint"
                )
            self._location = qualified_location(location)
        return self._location

    def streamWriter(self, schema: StructType, overwrite: bool) -> TransactionalStreamWriter:
        decisions = DecisionLog(self.checkpoint_location(), self.sink_id())
        parallelism = self.operator_state_parallelism()  # refused here, at start, outside twophase
        if not self._planning:
            return TransactionalStreamWriter(self.transactional_sink(schema), decisions, self.commit_mode(),
                                             parallelism)
        twophase = self.commit_mode() is CommitMode.TWOPHASE
        planned = (latest_planned_batch(self.checkpoint_location())
                   if twophase or timings.enabled() else None)
        with timings.span("plan.writer", planned):
            key = json.dumps([type(self).__qualname__, sorted(self.options.items()), schema.json()])
            sink = _checked.get(key)
            if sink is None:
                with timings.span("plan.check"):
                    sink = self.transactional_sink(schema)
                    sink.check(schema, SinkContext(decisions.sink_id, self.checkpoint_location(),
                                                   self.commit_mode()))
                _checked[key] = sink
            if twophase:
                with timings.span("plan.sweep"):
                    assert isinstance(sink, TwoPhaseCommitting)
                    settled = Coordinator(sink.committer(), decisions).sweep(planned)
                if settled["committed"] or settled["rolled_back"]:
                    decisions.record_settled(settled["committed"], settled["rolled_back"])
            if self.commit_mode().exactly_once:  # at-least-once keeps nothing beside the checkpoint
                with timings.span("plan.decision_log"):
                    decisions.create()
                    record_identity(self.checkpoint_location(),
                                    default_sink_id(self.checkpoint_location()))
        return TransactionalStreamWriter(sink, decisions, self.commit_mode(), parallelism)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        raise SinkError(
            f"{self.name()} writes streaming queries only (df.writeStream); its exactly-once "
            "protocol is keyed by micro-batch"
        )
