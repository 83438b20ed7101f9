"""``eoskit savepoint inspect | dispose``: read or delete a savepoint.

A thin layer over ``eoskit.runtime.savepoints`` (Flink: ``flink savepoint
-d`` disposes; taking a savepoint of a running job comes with the job's
control commands). Tables, or ``--json``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from eoskit.runtime.checkpoint_cli import (
    OPERATOR_HEADERS,
    add_common,
    format_time,
    guarded,
    offset_rows,
    operator_rows,
    render_fields,
    render_table,
    sink_cell,
    storage_options,
)


def _inspect(args: argparse.Namespace) -> int:
    from eoskit.runtime.savepoints import inspect_savepoint

    manifest = inspect_savepoint(args.savepoint, storage_options=storage_options(args.storage_option))
    if args.json:
        print(json.dumps(dict(manifest.to_json(), location=manifest.location), indent=2))
        return 0
    print(render_fields([
        ("savepoint", manifest.location),
        ("job", manifest.job_name),
        ("batch", f"{manifest.batch} (resumes with batch {manifest.batch + 1})"),
        ("batch time", format_time(manifest.batch_timestamp_ms)),
        ("created", format_time(seconds=manifest.created_at)),
        ("query id", manifest.query_id or "-"),
        ("from checkpoint", manifest.checkpoint),
        ("versions", f"Spark {manifest.spark_version or '?'}, eoskit {manifest.eoskit_version or '?'}"),
        ("files", f"{len(manifest.files)} ({manifest.total_bytes} bytes), all present"),
    ]))
    print("\nsource offsets:")
    print(render_table(("source", "topic", "partition", "offset"), offset_rows(manifest.offsets), "  "))
    if manifest.sinks:
        print("\nsinks:")
        print(render_table(("sink id", "decision of the batch", "decided batches"), [
            (s.sink_id, sink_cell(manifest.sink_decisions.get(s.sink_id, "none"), bool(s.decided_batches)),
             len(s.decided_batches)) for s in manifest.sinks], "  "))
    if manifest.state_operators:
        print(f"\nstate operators (state version {manifest.batch + 1}):")
        print(render_table(OPERATOR_HEADERS, operator_rows(manifest.state_operators), "  "))
    if manifest.extra:
        print("\nextra: " + json.dumps(manifest.extra, sort_keys=True))
    return 0


def _dispose(args: argparse.Namespace) -> int:
    from eoskit.runtime.savepoints import dispose_savepoint

    done = dispose_savepoint(args.savepoint, storage_options=storage_options(args.storage_option))
    manifest = done.manifest
    if args.json:
        print(json.dumps({"disposed": manifest.location, "jobName": manifest.job_name,
                          "batch": manifest.batch, "files": len(manifest.files),
                          "bytes": manifest.total_bytes, "leftovers": done.leftovers}, indent=2))
        return 0
    print(f"disposed of savepoint {manifest.location} (job {manifest.job_name}, batch "
          f"{manifest.batch}): {len(manifest.files)} file(s), {manifest.total_bytes} bytes")
    if done.leftovers:
        print(f"left {len(done.leftovers)} file(s) the savepoint does not list, e.g. {done.leftovers[0]}")
    return 0


def register_cli(commands: Any) -> None:
    savepoint = commands.add_parser(
        "savepoint", help="inspect or dispose of a savepoint (a portable copy of one committed batch)")
    sub = savepoint.add_subparsers(dest="savepoint_command", required=True)
    inspect = sub.add_parser("inspect", help="job, batch, source offsets, state operators, sinks, versions")
    dispose = sub.add_parser("dispose", help="delete a savepoint's files (refuses anything else)")
    for parser in (inspect, dispose):
        parser.add_argument("savepoint", metavar="SP",
                            help="the savepoint directory (local path or fsspec URL, e.g. s3://bucket/sp)")
        add_common(parser)
    inspect.set_defaults(func=guarded("savepoint inspect", _inspect))
    dispose.set_defaults(func=guarded("savepoint dispose", _dispose))
