"""``eoskit checkpoint import-spark OLD NEW``: a new eoskit checkpoint that
carries on where a Spark ``kafka`` query's checkpoint left off
(``eoskit.runtime.state.spark_import``), and what its first batch re-reads."""

from __future__ import annotations

import argparse
import json
from typing import Any

from eoskit.runtime.cli.checkpoint import add_common, format_offsets, storage_options
from eoskit.runtime.cli.errors import guarded
from eoskit.runtime.state.spark_import import Imported, import_spark_checkpoint


def describe(done: Imported) -> list[str]:
    """What was written and what the eoskit query's first batch does, as lines."""
    lines = [f"wrote {done.target}: the eoskit query starts after Spark's batch {done.batch}, "
             f"the newest it committed",
             f"  starts at    {format_offsets([done.offsets])}"]
    if done.replayed is None:
        lines.append("  re-reads     nothing: Spark had planned no batch after it; the first eoskit "
                     f"batch ({done.batch + 1}) starts at the first record Spark had not read")
        return lines
    total = sum(done.replayed_records.values())
    lines += [
        f"  re-reads     {total:,} record(s), to {format_offsets([done.replayed])}: Spark's batch "
        f"{done.batch + 1}, planned but not committed, which its sink may have written in part. "
        f"The first eoskit batch is that range again, no more.",
        "  so           write with mode=upsert and key (or commitMode=idempotent over a table the "
        "old job did not write) to absorb the rows written before; mode=append would write "
        "them twice",
    ]
    return lines


def _import(args: argparse.Namespace) -> int:
    done = import_spark_checkpoint(args.old, args.new, storage_options(args.storage_option))
    if args.json:
        print(json.dumps(done.to_json(), indent=2, sort_keys=True))
    else:
        print("\n".join(describe(done)))
        print(f"run the job with:  eoskit run JOB.py --checkpoint-dir {args.new}")
    return 0


def register_cli(sub: Any) -> None:
    """``import-spark`` under ``eoskit checkpoint``."""
    parser = sub.add_parser(
        "import-spark", help="a new eoskit checkpoint that carries on where a Spark kafka "
        "query's checkpoint left off",
        description="Read the Kafka offsets of the last batch a Spark query (source kafka, "
        "any sink, no state) committed, from its offsets/ and commits/ logs, and write a new "
        "checkpoint from which an eoskit query starts exactly there. Says what the first "
        "eoskit batch re-reads: the batch Spark planned and did not commit, if any.")
    parser.add_argument("old", metavar="OLD", help="the Spark query's checkpointLocation (read only)")
    parser.add_argument("new", metavar="NEW", help="the eoskit query's checkpoint: a new or empty directory")
    add_common(parser)
    parser.set_defaults(func=guarded("checkpoint import-spark", _import))
