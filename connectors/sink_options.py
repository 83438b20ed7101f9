"""Options every eoskit sink takes, declared once (each sink's ``OptionSet``
lists them beside its own), and the dead-letter options the sinks share."""

from __future__ import annotations

from eoskit.connectors.options import Option, parse_choice, parse_str
from eoskit.twophase.contract import EXACTLY_ONCE, CommitMode


def parse_names(text: str) -> tuple[str, ...]:
    """Comma-separated column names; an empty text is no column."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


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

#: In every sink's OptionSet.
COMMON = (COMMIT_MODE, SINK_ID, CHECKPOINT, QUERY_NAME)

DEAD_LETTER_TABLE = Option(
    "deadLetterTable", parse_str, None,
    "A table (`table` or `schema.table`, written like `dbtable`; a bare name is in the "
    "target's schema) that receives each row the database refuses (a constraint, a value "
    "the column cannot hold), in the same transaction as the task's good rows, with the "
    "error and the row's position; created if missing. Unset: a refused row fails the "
    "batch and nothing committed is lost.")
DEAD_LETTER_TOPIC = Option(
    "deadLetterTopic", parse_str, None,
    "An existing topic that receives each record the sink cannot write (over the size "
    "limit of the producer or the topic, naming a partition the topic lacks, without a "
    "topic), in the same transaction as the task's records, with the error and the "
    "record's position. Unset: such a record fails the batch and nothing committed is lost.")
DEAD_LETTER_SOURCE_COLUMNS = Option(
    "deadLetterSourceColumns", parse_names, None,
    "Comma-separated DataFrame columns whose values each dead letter carries as its "
    "source position (e.g. the Kafka source's `topic,partition,offset`); columns the "
    "target table lacks are carried, not written. Default: for the SQL sinks, whichever "
    "of `topic`, `partition`, `offset` the DataFrame has; for the Kafka sink none "
    "(`topic` and `partition` are its output columns: keep the source's under other "
    "names and list them).")
