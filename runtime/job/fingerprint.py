"""What a restored job must share with its savepoint: the query's fingerprint.

Why: Spark resumes a checkpoint into whatever query is started on it. A
query that reads other topics would plan its next batch from offsets of
topics it no longer reads; one that writes through another sink, or under
another sink id, would leave the savepoint's in-doubt transactions and
progress markers behind; one with other stateful operators would load
state that is not its own, or none. Spark's guide lists these as changes a
checkpoint does not survive, and fails on some of them late, mid-batch, or
not at all. So a savepoint records a fingerprint of its query, and a
restore (``--from-savepoint``) compares the new job's before anything is
copied, refusing with every difference named.

The fingerprint, JSON in the savepoint's manifest:

- ``source``: its format and what it reads (``subscribe`` as a sorted list
  of topics, ``subscribePattern``, ``assign``, or a ``path``), and the
  broadcast state it keeps (eoskit-kafka's ``broadcastTopic``: name, topic
  and fold, since the checkpoint's pins and snapshots belong to them);
- ``sinks``: each eoskit sink's format and ``sinkId`` (None: the
  checkpoint's default id, ``defaultSinkId``, which travels with the
  checkpoint); Spark's own sinks keep nothing a restore could lose;
- ``stateOperators``: per operator id, Spark's name for the operator and
  its kind (aggregation, deduplication, join, ...). The savepoint's come
  from the checkpoint's own ``state/`` directory and operator metadata;
  the new job's from its physical plan (``DataFrame.explain``), where
  Spark numbers stateful operators the same way.

A part that is not known (a component without ``spark_format`` and
``all_options()``, a savepoint taken without the job at hand) is absent,
and its check skipped. Everything here is pure but ``of_pipeline`` and
``plan_of``, which read a pipeline and explain its query.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from eoskit.runtime.job.components import Formatted

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from eoskit.runtime.state.checkpoints import StateOperator
    from eoskit.runtime.job.pipeline import Pipeline

Fingerprint = dict[str, Any]

#: Source options that say what a source reads, in Spark's spelling.
READS = ("subscribe", "subscribePattern", "assign", "path")

#: A physical plan line of a stateful operator: its node name, and the
#: operator id in its ``state info [ ... opId = N ... ]``.
_PLAN_OPERATOR = re.compile(
    r"^[\s:|+\-]*(?:\*\(\d+\)\s*)?(?P<node>[A-Za-z]\w*)\b.*?\bstate info \[.*?\bopId = (?P<op>\d+)")


# -- the parts ----------------------------------------------------------------------

def component(part: Any) -> tuple[str, dict[str, str]] | None:
    """(format, options) of a pipeline source or sink, where it tells them."""
    if not isinstance(part, Formatted):
        return None
    return part.spark_format, dict(part.all_options())


def source_part(fmt: str, options: Mapping[str, str]) -> dict[str, Any]:
    """The source's format and what it reads."""
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    part: dict[str, Any] = {"format": fmt}
    for name in READS:
        value = lowered.get(name.lower())
        if value is None:
            continue
        if name == "subscribe":
            part[name] = sorted({t.strip() for t in value.split(",") if t.strip()})
        elif name == "assign":
            try:
                assigned = json.loads(value)
                part[name] = {t: sorted(ps) for t, ps in sorted(assigned.items())}
            except (ValueError, AttributeError, TypeError):
                part[name] = value
        else:
            part[name] = value
    topic = lowered.get("broadcasttopic")
    if topic is not None:
        part["broadcast"] = {"name": lowered.get("broadcastname") or topic, "topic": topic,
                             "fold": (lowered.get("broadcastfold") or "latest").strip()}
    return part


def sink_part(fmt: str, options: Mapping[str, str]) -> dict[str, Any] | None:
    """An eoskit sink's format and sink id (None: the checkpoint's default);
    None for Spark's own sinks."""
    if not fmt.startswith("eoskit-"):
        return None
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    return {"format": fmt, "sinkId": lowered.get("sinkid") or None}


def operator_kind(name: str | None) -> str | None:
    """A stateful operator's kind, from Spark's plan node name
    (``StreamingDeduplicate``) or its operator metadata name (``dedupe``)."""
    if not name:
        return None
    n = name.lower()
    if "dedup" in n:
        return "deduplication within watermark" if "within" in n else "deduplication"
    if "join" in n:
        return "stream-stream join"
    if "session" in n:
        return "session window aggregation"
    if "limit" in n:
        return "limit"
    if "transformwithstate" in n:
        return "transformWithState"
    if "groupswithstate" in n or "groupsinpandaswithstate" in n:
        return "flatMapGroupsWithState"
    if "statestore" in n or "aggregat" in n:
        return "aggregation"
    return None


def plan_operators(plan: str) -> list[dict[str, Any]]:
    """The stateful operators of an explained streaming plan, by operator id
    (an aggregation's StateStoreRestore and StateStoreSave share one)."""
    found: dict[int, str] = {}
    for line in plan.splitlines():
        match = _PLAN_OPERATOR.match(line)
        if match is not None:
            found.setdefault(int(match["op"]), match["node"])
    return [{"operatorId": op, "name": name, "kind": operator_kind(name)}
            for op, name in sorted(found.items())]


def checkpoint_operators(operators: Iterable[StateOperator]) -> list[dict[str, Any]]:
    """The stateful operators whose state a checkpoint (or savepoint) holds."""
    return [{"operatorId": op.operator_id, "name": op.name, "kind": operator_kind(op.name)}
            for op in sorted(operators, key=lambda o: o.operator_id)]


# -- a pipeline's fingerprint ---------------------------------------------------------

def plan_of(df: DataFrame) -> str:
    """The physical plan of a streaming DataFrame, as ``explain()`` prints it
    (Spark plans it incrementally, numbering its stateful operators)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain()
    return out.getvalue()


def of_pipeline(pipeline: Pipeline, spark: SparkSession | None = None) -> Fingerprint:
    """The source and sinks of ``pipeline``; with ``spark``, also the
    stateful operators of its query (built, not started)."""
    found: Fingerprint = {}
    source = component(pipeline.source)
    if source is not None:
        found["source"] = source_part(*source)
    sink = component(pipeline.sink)
    if sink is not None:
        part = sink_part(*sink)
        found["sinks"] = [] if part is None else [part]
    if spark is not None:
        found["stateOperators"] = plan_operators(plan_of(pipeline.dataframe(spark)))
    return found


# -- comparing ---------------------------------------------------------------------------

def _reads(part: Mapping[str, Any]) -> str:
    words = [str(part.get("format", "?"))]
    if "subscribe" in part:
        words.append(f"subscribing to topics {part['subscribe']}")
    if "subscribePattern" in part:
        words.append(f"subscribing to the pattern {part['subscribePattern']!r}")
    if "assign" in part:
        words.append(f"assigned {json.dumps(part['assign'], sort_keys=True)}")
    if "path" in part:
        words.append(f"reading {part['path']!r}")
    if "broadcast" in part:
        b = part["broadcast"]
        words.append(f"with the broadcast state {b['name']!r} folded ({b['fold']}) from {b['topic']!r}")
    return " ".join(words)


def _operators(operators: Iterable[Mapping[str, Any]]) -> str:
    shown = [f"{o['operatorId']}: {o.get('kind') or o.get('name') or 'unknown'}" for o in operators]
    return f"[{', '.join(shown)}]" if shown else "none"


def _sinks(sinks: Iterable[Mapping[str, Any]]) -> str:
    return ", ".join(f"{s['format']} with sink id {s['sinkId']!r}" for s in sinks)


def differences(saved: Mapping[str, Any], current: Mapping[str, Any],
                allow_non_restored_state: bool = False) -> list[str]:
    """What differs between a savepoint's fingerprint and a job's, one
    sentence each; parts either side lacks are not compared.

    A savepoint sink whose id no sink of the job has is a difference unless
    ``allow_non_restored_state`` (Flink's ``--allowNonRestoredState``): its
    in-doubt transactions and progress stay behind under the old id, which
    is what a second restore under a new sink id wants.
    """
    found: list[str] = []
    if "source" in saved and "source" in current and saved["source"] != current["source"]:
        found.append(f"the savepoint's source is {_reads(saved['source'])}, "
                     f"this job's is {_reads(current['source'])}")
    if saved.get("sinks") is not None and current.get("sinks") is not None:
        default = saved.get("defaultSinkId")
        now = [{"format": s["format"], "sinkId": s.get("sinkId") or default} for s in current["sinks"]]
        by_id = {s["sinkId"]: s for s in now}
        for before in ({"format": s["format"], "sinkId": s.get("sinkId") or default}
                       for s in saved["sinks"]):
            match = by_id.get(before["sinkId"])
            if match is None and not allow_non_restored_state:
                found.append(
                    f"the savepoint's sink {before['format']} has sink id {before['sinkId']!r}, "
                    f"which no sink of this job has (this job: {_sinks(now) or 'no eoskit sink'}); "
                    "its in-doubt transactions and progress would stay behind under that id "
                    "(--allow-non-restored-state restores anyway)")
            elif match is not None and match["format"] != before["format"]:
                found.append(f"the savepoint's sink {before['sinkId']!r} is {before['format']}, "
                             f"this job's sink {before['sinkId']!r} is {match['format']}")
    if "stateOperators" in saved and "stateOperators" in current:
        was = {o["operatorId"]: o for o in saved["stateOperators"]}
        now_ops = {o["operatorId"]: o for o in current["stateOperators"]}
        same = set(was) == set(now_ops) and all(
            not was[i].get("kind") or not now_ops[i].get("kind") or was[i]["kind"] == now_ops[i]["kind"]
            for i in was)
        if not same:
            found.append(f"the savepoint's state is of the stateful operators "
                         f"{_operators(saved['stateOperators'])}, this job's query has "
                         f"{_operators(current['stateOperators'])}")
    return found


def unchecked(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The parts one side does not record, so that a restore can say what it
    did not check."""
    names = {"source": "source", "sinks": "sinks", "stateOperators": "stateful operators"}
    return [label for key, label in names.items() if key not in saved or key not in current]
