"""``eoskit checkpoint list | inspect``: what a job's checkpoint directory holds.

A thin layer over ``eoskit.runtime.state.checkpoints``: readable tables, or
``--json`` for scripts. Also home of the small helpers the savepoint
commands share (tables, offsets, ``--storage-option``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from eoskit.connectors.kafka.offsets import split_reserved
from eoskit.runtime.cli.errors import UsageError, guarded
from eoskit.runtime.state.checkpoints import Checkpoint, CheckpointError

NO_DECISIONS = "-"


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def render_fields(pairs: Sequence[tuple[str, Any]]) -> str:
    width = max(len(name) for name, _ in pairs)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in pairs)


def format_time(ms: int | None = None, seconds: float | None = None) -> str:
    if ms is None and seconds is None:
        return "-"
    stamp = ms / 1000 if ms is not None else seconds
    return datetime.fromtimestamp(stamp, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def format_offsets(offsets: Sequence[Any]) -> str:
    """One line for a batch's end offsets: ``topic 0:42 1:17``, sources split by ``|``."""
    out = []
    for source in offsets:
        if isinstance(source, dict) and all(isinstance(v, dict) for v in source.values()):
            topics, reserved = split_reserved(source)
            parts_text = [f"{topic} " + " ".join(f"{p}:{o}" for p, o in sorted(parts.items(), key=_part))
                          for topic, parts in sorted(topics.items())]
            parts_text += [_reserved_text(key, value) for key, value in reserved.items()]
            out.append("; ".join(parts_text))
        else:
            out.append("-" if source is None else json.dumps(source, sort_keys=True))
    return " | ".join(out) or "-"


def offset_rows(offsets: Sequence[Any]) -> list[tuple[Any, ...]]:
    """(source, topic, partition, offset) rows, for sources whose offsets are per topic-partition."""
    rows: list[tuple[Any, ...]] = []
    for index, source in enumerate(offsets):
        if isinstance(source, dict) and all(isinstance(v, dict) for v in source.values()):
            for topic, parts in sorted(split_reserved(source)[0].items()):
                rows.extend((index, topic, p, o) for p, o in sorted(parts.items(), key=_part))
        else:
            rows.append((index, "-", "-", "-" if source is None else json.dumps(source, sort_keys=True)))
    return rows


def _reserved_text(key: str, value: Any) -> str:
    """``rules v7 fraud-rules 0:415`` for a broadcast pin; other entries as JSON."""
    if isinstance(value, dict) and {"name", "version", "offsets"} <= set(value):
        pinned = " ".join(f"{topic} " + " ".join(f"{p}:{o}" for p, o in sorted(parts.items(), key=_part))
                          for topic, parts in sorted(value["offsets"].items()))
        return f"{value['name']} v{value['version']}" + (f" {pinned}" if pinned else "")
    return f"{key} {json.dumps(value, sort_keys=True)}"


def _part(item: tuple[str, Any]) -> tuple[int, str]:
    key = item[0]
    return (int(key), "") if str(key).lstrip("-").isdigit() else (0, str(key))


def operator_rows(operators: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [(op.operator_id, op.name or "-", op.provider, op.partitions,
             f"{op.versions[0]}..{op.versions[1]}" if op.versions else "-", op.files, op.bytes,
             "?" if op.rows is None else op.rows) for op in operators]


OPERATOR_HEADERS = ("operator", "name", "backend", "partitions", "versions", "files", "bytes", "rows")


def storage_options(items: Sequence[str] | None) -> dict[str, dict[str, Any]]:
    """``PROTOCOL.KEY=VALUE`` items as fsspec options per protocol."""
    out: dict[str, dict[str, Any]] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        protocol, dot, name = key.partition(".")
        if not sep or not dot or not protocol or not name:
            raise ValueError(f"--storage-option {item!r}: expected PROTOCOL.KEY=VALUE, "
                             "e.g. s3.endpoint_url=http://127.0.0.1:9000")
        try:
            parsed: Any = json.loads(value)  # true, 3, {"endpoint_url": ...}
        except json.JSONDecodeError:
            parsed = value
        out.setdefault(protocol, {})[name] = parsed
    return out


def add_conf(parser: argparse.ArgumentParser, help: str) -> None:
    """``--conf KEY=VALUE`` (repeatable), as spark-submit takes it."""
    parser.add_argument("--conf", action="append", metavar="KEY=VALUE", help=help + " (repeatable)")


def spark_conf(items: Sequence[str] | None) -> dict[str, str]:
    """``--conf`` items as a Spark conf; a usage error names a bad one."""
    conf: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf {key.strip() or item!r}: expected KEY=VALUE, e.g. "
                             "spark.executor.memory=4g")
        conf[key.strip()] = value
    return conf


def add_checkpoint_dir(parser: argparse.ArgumentParser, help: str) -> None:
    """``--checkpoint-dir DIR``, as every verb names the checkpoint. A bare
    DIR, as ``checkpoint`` and ``state`` took it before, is still read but no
    longer shown."""
    parser.add_argument("--checkpoint-dir", metavar="DIR", help=help + " (required)")
    parser.add_argument("dir", nargs="?", metavar="DIR", help=argparse.SUPPRESS)


def checkpoint_dir(args: argparse.Namespace) -> str:
    """The checkpoint ``add_checkpoint_dir`` read (a usage error without one)."""
    given = [d for d in (args.checkpoint_dir, args.dir) if d]
    if not given:
        raise UsageError("the checkpoint is missing: give --checkpoint-dir DIR")
    if len(set(given)) > 1:
        raise UsageError("two checkpoints given (--checkpoint-dir and a bare DIR): give one")
    return given[0]


#: ``--storage-option``'s help, said once for every verb that takes it.
STORAGE_OPTION_HELP = ("an fsspec option for that protocol's file system, e.g. "
                       "s3.endpoint_url=http://127.0.0.1:9000 (repeatable; also from FSSPEC_S3_ENDPOINT_URL etc.)")


def add_json(parser: argparse.ArgumentParser, help: str = "print JSON instead of tables") -> None:
    """``--json``: what the verb prints, as JSON on stdout (every verb that prints a result)."""
    parser.add_argument("--json", action="store_true", help=help)


def add_storage_option(parser: argparse.ArgumentParser, serves: str = "") -> None:
    """``--storage-option PROTOCOL.KEY=VALUE`` (repeatable; :func:`storage_options`
    reads it): every verb that reads or writes files through fsspec. ``serves``
    adds what the options are for in that verb."""
    parser.add_argument("--storage-option", action="append", metavar="PROTOCOL.KEY=VALUE",
                        help=STORAGE_OPTION_HELP + (f"; {serves}" if serves else ""))


def add_common(parser: argparse.ArgumentParser) -> None:
    """``--json`` and ``--storage-option``: the flags of every verb that reads a checkpoint or savepoint."""
    add_json(parser)
    add_storage_option(parser)


def add_savepoint(parser: argparse.ArgumentParser, help: str, required: bool = False) -> None:
    """``--savepoint PATH``, as every verb that reads or writes a savepoint names
    it (``run`` restores with ``--from-savepoint``). A bare PATH, as earlier
    versions took it, is still read but no longer shown."""
    parser.add_argument("--savepoint", metavar="PATH", help=help + (" (required)" if required else ""))
    parser.add_argument("savepoint_path", nargs="?", metavar="PATH", help=argparse.SUPPRESS)
    parser.set_defaults(savepoint_required=required)


def savepoint_path(args: argparse.Namespace) -> str | None:
    """The savepoint ``add_savepoint`` read (a usage error when a required one is missing)."""
    given = [p for p in (args.savepoint, args.savepoint_path) if p]
    if len(set(given)) > 1:
        raise UsageError("two savepoints given (--savepoint and a bare PATH): give one")
    if not given and args.savepoint_required:
        raise UsageError("the savepoint is missing: give --savepoint PATH")
    return given[0] if given else None


# -- the commands ------------------------------------------------------------------

def sink_cell(decision: str, has_decisions: bool) -> str:
    return decision if has_decisions or decision != "none" else NO_DECISIONS


def _list(args: argparse.Namespace) -> int:
    checkpoint = Checkpoint(checkpoint_dir(args), storage_options(args.storage_option))
    batches, sinks = checkpoint.batches(), checkpoint.sinks()
    if args.json:
        print(json.dumps({"checkpoint": checkpoint.url, "queryId": checkpoint.query_id(),
                          "latestCommitted": checkpoint.latest_committed(),
                          "batches": [b.to_json() for b in batches]}, indent=2))
        return 0
    latest = checkpoint.latest_committed()
    print(f"checkpoint {checkpoint.url} (query {checkpoint.query_id() or '-'}): "
          f"{len(batches)} retained batch(es), latest committed "
          f"{'-' if latest is None else latest}")
    if not batches:
        return 0
    decided = {s.sink_id: bool(s.decided_batches) for s in sinks}
    headers = ["batch", "time", "committed", "end offsets"] + [f"sink {s.sink_id}" for s in sinks]
    rows = [[b.batch, format_time(b.timestamp_ms, b.written_at), "yes" if b.committed else "no",
             format_offsets(b.offsets)]
            + [sink_cell(b.sinks.get(s.sink_id, "none"), decided[s.sink_id]) for s in sinks]
            for b in batches]
    print(render_table(headers, rows))
    if any(not d for d in decided.values()):
        print(f"{NO_DECISIONS}: the sink commits in its tasks with progress markers; it keeps no decisions")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    checkpoint = Checkpoint(checkpoint_dir(args), storage_options(args.storage_option))
    retained, latest = checkpoint.batch_ids(), checkpoint.latest_committed()
    number = args.batch if args.batch is not None else latest if latest is not None else (
        retained[-1] if retained else None)
    if number is None:
        raise CheckpointError(f"checkpoint {checkpoint.url} has no batch yet (its offset log is empty)")
    batch, sinks = checkpoint.batch(number), checkpoint.sinks()
    operators = checkpoint.state_operators(number + 1 if batch.committed else number)
    if args.json:
        print(json.dumps({
            "checkpoint": checkpoint.url, "queryId": checkpoint.query_id(), "retained": retained,
            "latestCommitted": latest, "batch": batch.to_json(),
            "sinks": [dict(s.to_json(), decision=batch.sinks.get(s.sink_id, "none")) for s in sinks],
            "stateOperators": [op.to_json() for op in operators],
        }, indent=2))
        return 0
    print(render_fields([
        ("checkpoint", checkpoint.url),
        ("query id", checkpoint.query_id() or "-"),
        ("batch", f"{batch.batch} ({'committed' if batch.committed else 'not committed'}); "
                  f"retained {retained[0]}..{retained[-1]}, latest committed {'-' if latest is None else latest}"),
        ("time", format_time(batch.timestamp_ms, batch.written_at)),
        ("watermark", "-" if batch.watermark_ms is None else f"{batch.watermark_ms} ms"),
    ]))
    print("\nend offsets:")
    print(render_table(("source", "topic", "partition", "offset"), offset_rows(batch.offsets), "  "))
    if sinks:
        print("\nsinks:")
        print(render_table(("sink id", "decision", "decided batches", "created"), [
            (s.sink_id, sink_cell(batch.sinks.get(s.sink_id, "none"), bool(s.decided_batches)),
             f"{len(s.decided_batches)}", format_time(seconds=s.created_at)) for s in sinks], "  "))
    if operators:
        print(f"\nstate operators (rows at state version {operators[0].version}):")
        print(render_table(OPERATOR_HEADERS, operator_rows(operators), "  "))
    return 0


def register_cli(commands: Any) -> Any:
    """``eoskit checkpoint list | inspect``; returns its verbs' subparsers, for
    verbs registered elsewhere (``import-spark``)."""
    checkpoint = commands.add_parser(
        "checkpoint", help="list and inspect the batches a job's checkpoint directory retains; "
        "import a Spark query's")
    sub = checkpoint.add_subparsers(dest="checkpoint_command", required=True)
    listing = sub.add_parser("list", help="retained batches: id, time, end offsets, committed, sink decisions")
    inspect = sub.add_parser("inspect", help="one batch in detail, with the sinks and the state operators")
    for parser in (listing, inspect):
        add_checkpoint_dir(parser, "the checkpoint location (local path, file:, s3a://, any fsspec URL)")
        add_common(parser)
    inspect.add_argument("--batch", type=int, metavar="N",
                         help="the batch to show (default: the latest committed)")
    listing.set_defaults(func=guarded("checkpoint list", _list))
    inspect.set_defaults(func=guarded("checkpoint inspect", _inspect))
    return sub
