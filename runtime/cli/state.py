"""``eoskit state inspect | read | rescale``: a checkpoint's keyed state, through Spark.

A thin layer over ``eoskit.runtime.state.inspection`` (Flink: the State
Processor API's reading side) and ``eoskit.runtime.state.rescale`` (Flink:
restoring with a new parallelism). Each starts a small local Spark session,
as Spark's state data sources and its state repartition need one; tables,
or ``--json``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from eoskit.runtime.cli.checkpoint import (
    add_checkpoint_dir,
    add_common,
    add_conf,
    add_json,
    add_storage_option,
    checkpoint_dir,
    render_fields,
    render_table,
    spark_conf,
    storage_options,
)
from eoskit.runtime.cli.errors import UsageError, guarded
from eoskit.runtime.state.checkpoints import Checkpoint

SUMMARY_HEADERS = ("operator", "name", "store", "state variable", "type", "ttl", "partitions",
                   "batches", "keys", "entries")


def session(conf: dict[str, str] | None = None) -> Any:
    """The process's Spark session if it has one, else a small local one for
    reading state (with ``--conf``), quiet about failures (the command
    reports them itself)."""
    from pyspark.sql import SparkSession

    from eoskit.runtime.spark.session import get_session, quiet_failure_logs  # PySpark: not for the parser

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    spark = get_session("eoskit-state", {"spark.ui.enabled": "false",
                                         "spark.sql.shuffle.partitions": "1", **(conf or {})})
    quiet_failure_logs(spark)
    return spark


def summary_rows(summary: Any) -> list[tuple[Any, ...]]:
    return [(r.operator_id, r.operator_name, r.store, r.variable or "-", r.kind or "-",
             "yes" if r.ttl else "-", r.partitions, f"{r.batches[0]}..{r.batches[1]}",
             "?" if r.keys is None else r.keys, "?" if r.entries is None else r.entries)
            for r in summary.rows]


OPERATOR_STATE_HEADERS = ("sink id", "operator state", "kind", "parallelism", "elements", "decided by batch")
BROADCAST_HEADERS = ("broadcast", "topic", "fold", "version", "offsets", "keys", "bytes", "versions kept")


def broadcast_rows(rows: Any) -> list[tuple[Any, ...]]:
    return [(r.name, r.topic, r.fold, f"v{r.version}",
             " ".join(f"{p}:{o}" for parts in r.offsets.values() for p, o in sorted(parts.items())) or "-",
             "?" if r.keys is None else r.keys, "?" if r.bytes is None else r.bytes, r.versions_kept)
            for r in rows]


def print_summary(summary: Any, indent: str = "") -> None:
    if not summary.rows:
        print(f"{indent}no keyed state (the query has no stateful operator)")
    else:
        print(render_table(SUMMARY_HEADERS, summary_rows(summary), indent))
        sizes = ", ".join(f"operator {op}: {summary.bytes[op]} bytes in {summary.files.get(op, 0)} files"
                          for op in sorted(summary.bytes))
        if sizes:
            print(f"{indent}on disk (every retained version): {sizes}")
    if summary.broadcast:
        print(f"\n{indent}broadcast state (what batch {summary.batch}'s tasks judged rows by):")
        print(render_table(BROADCAST_HEADERS, broadcast_rows(summary.broadcast), indent))
    if summary.operator_state:
        print(f"\n{indent}sinks' operator state (what the next batch's writers restore):")
        print(render_table(OPERATOR_STATE_HEADERS, [
            (r.sink_id, r.name, r.kind, r.parallelism, r.elements, r.batch) for r in summary.operator_state],
            indent))


def _inspect(args: argparse.Namespace) -> int:
    from eoskit.runtime.state.inspection import summarize  # PySpark: not for the parser

    location = checkpoint_dir(args)
    Checkpoint(location, storage_options(args.storage_option))  # bad input is refused before Spark starts
    summary = summarize(session(spark_conf(args.conf)), location, args.batch)
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
        return 0
    print(render_fields([
        ("checkpoint", summary.checkpoint),
        ("state of batch", "-" if summary.batch is None else
         f"{summary.batch} (what batch {summary.batch + 1} starts from)"),
        ("state backend", summary.backend or "-"),
    ]))
    print()
    print_summary(summary)
    return 0


def _cell(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _print_rows(rows: list[dict[str, Any]], as_json: bool, empty: str, plain_text: bool = False) -> int:
    """``state read``'s rows: one JSON object per line, or a table (cells as
    JSON; ``plain_text``: text cells as they are)."""
    if as_json:
        for row in rows:
            print(json.dumps(row, sort_keys=True, default=str))
    elif not rows:
        print(empty)
    else:
        headers = list(rows[0])
        print(render_table(headers, [[row[h] if plain_text and isinstance(row[h], str) else _cell(row[h])
                                      for h in headers] for row in rows]))
    return 0


def _read(args: argparse.Namespace) -> int:
    if (args.operator is None) == (args.broadcast is None):
        raise UsageError("eoskit state read: give --operator ID (keyed state, through Spark) or "
                         "--broadcast NAME (broadcast state), one of them")
    if args.broadcast is not None:
        return _read_broadcast(args)
    if args.version is not None:
        raise UsageError("eoskit state read: --version is for --broadcast (keyed state takes --batch)")
    from eoskit.runtime.state.inspection import read_state  # PySpark: not for the parser

    location = checkpoint_dir(args)
    Checkpoint(location, storage_options(args.storage_option))  # bad input is refused before Spark starts
    rows = read_state(session(spark_conf(args.conf)), location, args.operator, store=args.store, variable=args.state_var,
                      timers=args.timers, key=args.key or (), batch=args.batch,
                      limit=None if args.limit == 0 else args.limit)
    return _print_rows(rows, args.json, "no rows")


def _read_broadcast(args: argparse.Namespace) -> int:
    """``--broadcast NAME``: read with pyarrow beside the checkpoint, no Spark."""
    from eoskit.runtime.state.inspection import broadcast_entries

    if args.key and len(args.key) > 1:
        raise UsageError("eoskit state read --broadcast: one --key (a broadcast state's key is one value)")
    ck = Checkpoint(checkpoint_dir(args), storage_options(args.storage_option))
    rows = broadcast_entries(ck, args.broadcast, batch=args.batch, version=args.version,
                             key=args.key[0] if args.key else None,
                             limit=None if args.limit == 0 else args.limit)
    return _print_rows(rows, args.json, "no entries", plain_text=True)


def _rescale(args: argparse.Namespace) -> int:
    from eoskit.runtime.state.rescale import check_arguments, plan, rescale  # PySpark: not for the parser

    from eoskit.core.fs import use_storage_options

    # The rescale reads and writes eoskit's files in many places: the options
    # serve them all, as the process's fsspec configuration (bad ones: exit 2).
    use_storage_options(storage_options(args.storage_option))
    if args.dry_run:
        done = plan(args.checkpoint_dir, args.partitions)
    else:
        # Bad arguments are refused before a Spark session (a JVM) starts for nothing.
        conf = spark_conf(args.conf)
        check_arguments(args.checkpoint_dir, args.partitions)
        done = rescale(session(conf), args.checkpoint_dir, args.partitions)
    if args.json:
        print(json.dumps({**done.to_json(), "dryRun": bool(args.dry_run)}, indent=2))
        return 0
    if done.earlier:
        print(f"first: {done.earlier}")
    verb = "would rescale" if args.dry_run else "rescaled"
    print(f"{verb} the state of {done.checkpoint} from {done.partitions} to {done.target} partitions "
          f"(operators {', '.join(done.operators)}): the state of batch {done.batch}, as batch "
          f"{done.repartition_batch}, which reads no input; the next run starts at batch "
          f"{done.repartition_batch + 1}")
    return 0


def register_cli(commands: Any) -> None:
    state = commands.add_parser(
        "state", help="what a checkpoint's keyed state holds (Spark's state data sources); "
        "rescale it to a new number of partitions")
    sub = state.add_subparsers(dest="state_command", required=True)
    inspect = sub.add_parser("inspect", help="stateful operators, stores, state variables, "
                             "partitions, keys and bytes")
    read = sub.add_parser("read", help="the keys and values of one operator's store or state variable")
    for parser in (inspect, read):
        add_checkpoint_dir(parser, "the checkpoint location")
        parser.add_argument("--batch", type=int, metavar="N",
                            help="the committed batch whose state to read (default: the latest)")
        add_common(parser)
        add_conf(parser, "a Spark setting for the session that reads the state (Spark reads the "
                 "checkpoint through Hadoop: e.g. spark.hadoop.fs.s3a.endpoint=...; "
                 "--storage-option serves eoskit's own reads)")
    read.add_argument("--operator", type=int, metavar="ID",
                      help="the operator id (`eoskit state inspect` lists them)")
    read.add_argument("--broadcast", metavar="NAME",
                      help="the broadcast state NAME (eoskit-kafka's broadcastTopic) instead: its entries, "
                      "read without Spark, of the version the batch pins")
    read.add_argument("--version", type=int, metavar="V",
                      help="with --broadcast: this version instead of the batch's")
    read.add_argument("--store", metavar="NAME", help="the store, for an operator with several (joins)")
    read.add_argument("--state-var", metavar="NAME",
                      help="the state variable of a transformWithState operator")
    read.add_argument("--timers", action="store_true",
                      help="the registered timers of a transformWithState operator")
    read.add_argument("--key", action="append", metavar="VALUE|COLUMN=VALUE",
                      help="only this key (repeat COLUMN=VALUE for a key of several columns)")
    read.add_argument("--limit", type=int, default=100, metavar="N",
                      help="at most N rows (100; 0: all)")
    rescale = sub.add_parser(
        "rescale", help="repartition a stopped job's state into N partitions (Spark 4.2+)",
        description="Repartition the keyed state of a stopped job into N partitions, on Spark's "
        "offline state repartition (Spark 4.2+). A checkpoint's state partitions are "
        "spark.sql.shuffle.partitions when it was created, fixed for its life and the upper bound "
        "of the job's parallelism (Flink's max parallelism, its key groups). The job must be "
        "stopped and its last batch committed. The rescale adds one batch that reads no input; "
        "the next run continues from it, exactly once. A failed rescale is rolled back, leaving "
        "the checkpoint as it was.")
    rescale.add_argument("--checkpoint-dir", required=True, metavar="DIR",
                         help="the stopped job's checkpoint location")
    rescale.add_argument("--partitions", type=int, required=True, metavar="N",
                         help="the new number of state partitions (>= 1)")
    rescale.add_argument("--dry-run", action="store_true",
                         help="check and say what would be done, without Spark; change nothing")
    add_json(rescale, "print JSON instead of text")
    add_storage_option(rescale, "for eoskit's reads and writes of the checkpoint (Spark's go through "
                       "Hadoop: --conf spark.hadoop.fs.s3a.endpoint=...)")
    add_conf(rescale, "a Spark setting for the session that repartitions the state")
    inspect.set_defaults(func=guarded("state inspect", _inspect))
    rescale.set_defaults(func=guarded("state rescale", _rescale))
    read.set_defaults(func=guarded("state read", _read))
