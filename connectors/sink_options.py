"""The dead-letter options the sinks share, declared once. The options
every sink takes (``commitMode``, ``sinkId``, ...) are the protocol's:
``eoskit.twophase.sink_options``."""

from __future__ import annotations

from eoskit.core.options import Option, parse_str


def parse_names(text: str) -> tuple[str, ...]:
    """Comma-separated column names; an empty text is no column."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


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
