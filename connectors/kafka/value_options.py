"""The eoskit-kafka source's options that decode values in the source
(``value_json.py``), declared once here; ``settings.KafkaSourceSettings``
reads them into its fields."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eoskit.core.options import Option, OptionError, parse_choice, parse_str

if TYPE_CHECKING:
    from eoskit.connectors.kafka.settings import KafkaSourceSettings

VALUE_FORMAT = Option(
    "value.format", parse_choice("json"), None,
    "eoskit only (Flink's value.format): decode each record's value in the source, as Spark's "
    "from_json(value, schema) then select('v.*') would, and give the query the value's fields as "
    "columns; the schema is the query's: readStream.schema('id BIGINT, ...') (a Pipeline: "
    "KafkaSource(value_schema=...)). The rows never cross into the JVM as bytes to be parsed there.",
)
VALUE_MODE = Option(
    "value.mode", parse_choice("PERMISSIVE", "FAILFAST"), "PERMISSIVE",
    "With value.format, from_json's mode: PERMISSIVE reads a value that is not a JSON object as a row "
    "of nulls (and a field that does not convert as null); FAILFAST fails the task, naming the record.",
)
VALUE_TIME_ZONE = Option(
    "value.timeZone", parse_str, "UTC",
    "With value.format: the time zone of timestamps written without an offset (from_json's "
    "timeZone; a Pipeline passes the session's spark.sql.session.timeZone).",
)
METADATA_COLUMNS = Option(
    "metadataColumns", parse_str, None,
    "With value.format: comma-separated Kafka columns (key, topic, partition, offset, timestamp, "
    "timestampType, headers) that the schema's fields of those names are filled from, instead of the "
    "value; each with the Kafka column's type.",
)
VALUE_OPTIONS = (VALUE_FORMAT, VALUE_MODE, VALUE_TIME_ZONE, METADATA_COLUMNS)


def value_options_are_whole(settings: "KafkaSourceSettings", _: Any) -> None:
    """No option of the decoding without ``value.format``."""
    if settings.value_format is None:
        stray = [o.name for o in VALUE_OPTIONS[1:] if o.name in settings.given]
        if stray:
            raise OptionError(f"option '{stray[0]}' needs the option '{VALUE_FORMAT.name}' (json: "
                              "decode the values in the source)")


def metadata_columns(text: str | None) -> tuple[str, ...]:
    return tuple(c.strip() for c in (text or "").split(",") if c.strip())
