"""``eoskit state inspect | read``: a checkpoint's keyed state, through Spark.

A thin layer over ``eoskit.runtime.state_inspect`` (Flink: the State
Processor API's reading side). Both start a small local Spark session, as
Spark's state data sources need one; tables, or ``--json``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from eoskit.runtime.checkpoint_cli import add_common, render_fields, render_table
from eoskit.runtime.cli_errors import guarded

SUMMARY_HEADERS = ("operator", "name", "store", "state variable", "type", "ttl", "partitions",
                   "batches", "keys", "entries")


def session() -> Any:
    """The process's Spark session if it has one, else a small local one for
    reading state, quiet about failures (the command reports them itself)."""
    from pyspark.sql import SparkSession

    from eoskit.runtime.spark import get_session, quiet_failure_logs

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    spark = get_session("eoskit-state", {"spark.ui.enabled": "false",
                                         "spark.sql.shuffle.partitions": "1"})
    quiet_failure_logs(spark)
    return spark


def summary_rows(summary: Any) -> list[tuple[Any, ...]]:
    return [(r.operator_id, r.operator_name, r.store, r.variable or "-", r.kind or "-",
             "yes" if r.ttl else "-", r.partitions, f"{r.batches[0]}..{r.batches[1]}",
             "?" if r.keys is None else r.keys, "?" if r.entries is None else r.entries)
            for r in summary.rows]


def print_summary(summary: Any, indent: str = "") -> None:
    if not summary.rows:
        print(f"{indent}no keyed state (the query has no stateful operator)")
        return
    print(render_table(SUMMARY_HEADERS, summary_rows(summary), indent))
    sizes = ", ".join(f"operator {op}: {summary.bytes[op]} bytes in {summary.files.get(op, 0)} files"
                      for op in sorted(summary.bytes))
    if sizes:
        print(f"{indent}on disk (every retained version): {sizes}")


def _inspect(args: argparse.Namespace) -> int:
    from eoskit.runtime.state_inspect import summarize

    summary = summarize(session(), args.dir, args.batch)
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


def _read(args: argparse.Namespace) -> int:
    from eoskit.runtime.state_inspect import read_state

    rows = read_state(session(), args.dir, args.operator, store=args.store, variable=args.state_var,
                      timers=args.timers, key=args.key or (), batch=args.batch,
                      limit=None if args.limit == 0 else args.limit)
    if args.json:
        for row in rows:
            print(json.dumps(row, sort_keys=True, default=str))
        return 0
    if not rows:
        print("no rows")
        return 0
    headers = list(rows[0])
    print(render_table(headers, [[_cell(row[h]) for h in headers] for row in rows]))
    return 0


def register_cli(commands: Any) -> None:
    state = commands.add_parser(
        "state", help="what a checkpoint's keyed state holds (Spark's state data sources)")
    sub = state.add_subparsers(dest="state_command", required=True)
    inspect = sub.add_parser("inspect", help="stateful operators, stores, state variables, "
                             "partitions, keys and bytes")
    read = sub.add_parser("read", help="the keys and values of one operator's store or state variable")
    for parser in (inspect, read):
        parser.add_argument("dir", metavar="DIR", help="the checkpoint location")
        parser.add_argument("--batch", type=int, metavar="N",
                            help="the committed batch whose state to read (default: the latest)")
        add_common(parser)
    read.add_argument("--operator", type=int, required=True, metavar="ID",
                      help="the operator id (`eoskit state inspect` lists them)")
    read.add_argument("--store", metavar="NAME", help="the store, for an operator with several (joins)")
    read.add_argument("--state-var", metavar="NAME",
                      help="the state variable of a transformWithState operator")
    read.add_argument("--timers", action="store_true",
                      help="the registered timers of a transformWithState operator")
    read.add_argument("--key", action="append", metavar="VALUE|COLUMN=VALUE",
                      help="only this key (repeat COLUMN=VALUE for a key of several columns)")
    read.add_argument("--limit", type=int, default=100, metavar="N",
                      help="at most N rows (100; 0: all)")
    inspect.set_defaults(func=guarded("state inspect", _inspect))
    read.set_defaults(func=guarded("state read", _read))
