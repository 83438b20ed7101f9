"""A Kafka source's input pinned: where a new query of the source would
start, and where each partition's data ends now (``KafkaSource.pin``).

``eoskit chaos`` runs a job several times on one input; a pinned source
(``KafkaSource.bounded``) starts at the pin's start offsets whatever its
checkpoint holds and ends at its end offsets (the ``stopAtOffsets`` option),
so that records produced meanwhile belong to no run. Runs on the driver.
"""

from __future__ import annotations

from eoskit.connectors.kafka.client import KafkaMetadata
from eoskit.connectors.kafka.offsets import from_json_dict, to_json_dict
from eoskit.connectors.kafka.settings import (
    COMMIT_GROUP,
    STARTING_OFFSETS,
    STARTING_OFFSETS_BY_TIMESTAMP,
    STARTING_TIMESTAMP,
    STOP_AT_OFFSETS,
    KafkaSourceSettings,
)
from eoskit.connectors.kafka.source import resolve_start
from eoskit.core.options import OptionError

#: The options a pinned source replaces: its start and its end.
REPLACED = {o.name.lower() for o in (STARTING_OFFSETS, STARTING_TIMESTAMP,
                                     STARTING_OFFSETS_BY_TIMESTAMP, STOP_AT_OFFSETS)}


def pin(settings: KafkaSourceSettings) -> dict:
    """``{"start": offsets, "end": offsets}`` in Spark's offset JSON shape,
    for every partition the source reads now; refused (``OptionError``)
    when they hold nothing to read."""
    metadata = KafkaMetadata(settings.kafka)
    try:
        broker_topics = metadata.topics()
        settings.subscription.require_present(broker_topics, settings.bootstrap_servers)
        partitions = settings.subscription.select(broker_topics)
        start = resolve_start(settings, metadata, partitions)
        end = metadata.latest(partitions)
    finally:
        metadata.close()
    if not any(end[tp] > start.get(tp, end[tp]) for tp in end):
        raise OptionError(
            f"the source ({settings.subscription.describe()}) has nothing to read between its "
            f"startingOffsets ({settings.starting_offsets or 'latest'}) and the latest offsets: "
            "produce records first, or start from earliest")
    return {"start": to_json_dict(start), "end": to_json_dict(end)}


def offsets(pinned: dict) -> int:
    """How many offsets the pin holds (records, and the transaction markers among them)."""
    start, end = from_json_dict(pinned["start"], "pinned start"), from_json_dict(pinned["end"], "pinned end")
    return sum(max(0, o - start.get(tp, o)) for tp, o in end.items())


def describe(pinned: dict) -> str:
    end = from_json_dict(pinned["end"], "pinned end")
    topics = sorted({topic for topic, _ in end})
    return f"{', '.join(topics)}: {len(end)} partitions, {offsets(pinned):,} offsets"


#: Dropped from a bounded source: the runs of ``eoskit chaos`` read the pin
#: again and again, and must not commit those offsets to the job's consumer
#: group (its lag tools would see them, moved back and forth).
SIDE_EFFECTS = {COMMIT_GROUP.name.lower()}


def bounded_options(options: dict[str, str], pinned: dict) -> dict[str, str]:
    """``options`` with the pin's start (``startingOffsets``) and end
    (``stopAtOffsets``) instead of any start or end they gave, and without
    ``commitOffsetsToGroup`` (:data:`SIDE_EFFECTS`)."""
    import json

    kept = {k: v for k, v in options.items() if k.lower() not in REPLACED | SIDE_EFFECTS}
    return {**kept, STARTING_OFFSETS.name: json.dumps(pinned["start"]),
            STOP_AT_OFFSETS.name: json.dumps(pinned["end"])}
