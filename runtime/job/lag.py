"""How far a query is behind its sources, from one of Spark's progress
reports: the source's reported latest offsets against the batch's end
offsets, so the number of offsets not yet read, per topic-partition. Read by
the progress printer and the metrics listener alike."""

from __future__ import annotations

import json
from typing import Any


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    if not value:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def lag_by_topic_partition(progress: dict[str, Any]) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> offsets behind`` for every source of one
    progress report: the pair kept apart, since a topic name may itself
    hold ``-`` (the metrics' ``topic`` and ``partition`` labels)."""
    lag: dict[tuple[str, int], int] = {}
    for source in progress.get("sources", []):
        latest = _offsets(source.get("latestOffset"))
        end = _offsets(source.get("endOffset"))
        for topic, partitions in latest.items():
            if not isinstance(partitions, dict):
                continue
            for partition, offset in partitions.items():
                done = end.get(topic, {}).get(partition, 0)
                if isinstance(offset, int) and isinstance(done, int) and str(partition).isdigit():
                    lag[(topic, int(partition))] = max(0, offset - done)
    return lag


def lag_per_partition(progress: dict[str, Any]) -> dict[str, int]:
    """``topic-partition -> offsets behind`` for every source of one progress
    report, as the progress line and the status file name them."""
    return {f"{topic}-{partition}": behind
            for (topic, partition), behind in lag_by_topic_partition(progress).items()}
