"""Options every eoskit sink takes, declared once: each sink's ``OptionSet``
lists ``COMMON`` beside its own, and the protocol's adapter
(``connectors/spark/datasource.py``, ``connectors/spark/foreach_batch.py``) reads
``commitMode``, ``sinkId`` and ``checkpointLocation`` through these
declarations, on the driver: the commit process gets ``sinkId`` and
``checkpointLocation`` resolved, pickled with the data source."""

from __future__ import annotations

from eoskit.twophase.contract import EXACTLY_ONCE, CommitMode
from eoskit.core.options import Option, parse_choice, parse_positive_int, parse_str

COMMIT_MODE = Option(
    "commitMode", parse_choice(EXACTLY_ONCE, *(m.value for m in CommitMode)), EXACTLY_ONCE,
    "`exactly_once` (default): the sink's exactly-once protocol, two-phase where the sink "
    "has it; `twophase`: prepared transactions, committed once the whole batch is "
    "decided; `idempotent`: each task commits with a progress marker, exactly-once for "
    "deterministic replays; `at_least_once`: each task commits by itself. Each sink's "
    "page lists the modes it supports.")
SINK_ID = Option("sinkId", parse_str, None,
                 "Namespace of the sink's transaction ids and markers, stable across "
                 "restarts and savepoints. Default: derived from the checkpoint location.")
CHECKPOINT = Option("checkpointLocation", parse_str, None,
                    "Set by Spark from writeStream's checkpointLocation; the decision log "
                    "lives beside it.")
QUERY_NAME = Option("queryName", parse_str, None,
                    "Set by Spark from writeStream's queryName; not used by the sink.")
OPERATOR_STATE_PARALLELISM = Option(
    "operatorStateParallelism", parse_positive_int, None,
    "For a sink whose writers keep operator state (a plug-in's `KeepsOperatorState`): the "
    "number of writer instances k, one per task partition 0..k-1. Spark does not tell a "
    "Python writer how many tasks a batch has, so it is declared; a `Pipeline` sink "
    "repartitions to it, a plain job must `repartition(k)` before the sink, and a batch with "
    "another task count is refused. Changing it between runs redistributes the state. "
    "Needs commitMode twophase. Unset: the writers keep no operator state.")

#: In every sink's OptionSet.
COMMON = (COMMIT_MODE, SINK_ID, CHECKPOINT, QUERY_NAME, OPERATOR_STATE_PARALLELISM)
