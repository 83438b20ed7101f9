"""``eoskit savepoint trigger | inspect | dispose`` and ``eoskit stop``.

A thin layer over ``eoskit.runtime.state.savepoints`` (storage) and
``eoskit.runtime.job.control`` (asking a running job): Flink's ``flink
savepoint`` (trigger), ``flink savepoint -d`` (dispose) and ``flink stop
--savepointPath``. Tables, or ``--json``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from eoskit.runtime.cli.checkpoint import (
    OPERATOR_HEADERS,
    add_common,
    add_json,
    add_savepoint,
    add_storage_option,
    format_time,
    guarded,
    offset_rows,
    operator_rows,
    render_fields,
    render_table,
    savepoint_path,
    sink_cell,
    storage_options,
)
from eoskit.core.options import parse_duration
from eoskit.runtime.cli.state import print_summary, session
from eoskit.runtime.job.control import ControlDir, ControlError
from eoskit.runtime.state.checkpoints import require_directory
from eoskit.runtime.state.savepoints import dispose_savepoint, inspect_savepoint
from eoskit.twophase.identity import qualified_location


def _inspect(args: argparse.Namespace) -> int:
    options, path = storage_options(args.storage_option), savepoint_path(args)
    manifest = inspect_savepoint(path, storage_options=options)
    state = None
    if args.state:
        from eoskit.runtime.state.inspection import summarize_savepoint  # PySpark: not for the parser

        state = summarize_savepoint(session(), path, options)
    if args.json:
        extra = {} if state is None else {"state": state.to_json()}
        print(json.dumps(dict(manifest.to_json(), location=manifest.location, **extra), indent=2))
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
    if state is not None:
        print("\nkeyed state (as `eoskit state inspect` shows it):")
        print_summary(state, "  ")
    if manifest.extra:
        print("\nextra: " + json.dumps(manifest.extra, sort_keys=True))
    return 0


def _dispose(args: argparse.Namespace) -> int:
    done = dispose_savepoint(savepoint_path(args), storage_options=storage_options(args.storage_option))
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


def default_target(checkpoint: str) -> str:
    """``savepoints/savepoint-<UTC time>`` beside the checkpoint directory (not
    inside it: a savepoint must outlive its checkpoint)."""
    import posixpath
    import time

    parent = posixpath.dirname(qualified_location(checkpoint).rstrip("/"))
    return posixpath.join(parent, "savepoints", time.strftime("savepoint-%Y%m%dT%H%M%SZ", time.gmtime()))


def _control(args: argparse.Namespace) -> ControlDir:
    """The control folder of the job on ``--checkpoint-dir`` (exit 2 if the
    checkpoint does not exist), with the verb's ``--storage-option``s."""
    options = storage_options(args.storage_option)
    require_directory(args.checkpoint_dir, options)
    return ControlDir(args.checkpoint_dir, options)


def _trigger(args: argparse.Namespace) -> int:
    control = _control(args)
    request = control.send("savepoint", savepoint_path(args) or default_target(args.checkpoint_dir))
    answer = control.wait_answer(request, args.timeout)
    if answer.get("status") != "done":
        raise ControlError(f"the job did not take the savepoint: {answer.get('error')}")
    if args.json:
        print(json.dumps(_answered(control, answer), indent=2))
    else:
        print(answer["path"])
    return 0


def _answered(control: ControlDir, answer: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """What ``savepoint trigger --json`` and ``stop --json`` print: the
    checkpoint, the savepoint's path and batch (None without one)."""
    return {"checkpoint": control.checkpoint, "savepoint": answer.get("path"),
            "batch": answer.get("batch"), **extra}


def _stop(args: argparse.Namespace) -> int:
    import time

    control = _control(args)
    request = control.send("stop", savepoint_path(args))
    answer = control.wait_answer(request, args.timeout)
    if answer.get("status") == "error":
        raise ControlError(f"the job stopped, but without the savepoint: {answer.get('error')}")
    deadline = time.monotonic() + args.timeout
    while control.live_run() is not None:
        if time.monotonic() > deadline:
            raise ControlError(f"the job on {control.checkpoint} did not stop within {args.timeout:.0f} s")
        time.sleep(0.2)
    if args.json:
        print(json.dumps(_answered(control, answer, stopped=True), indent=2))
    else:
        print(f"stopped{'; savepoint ' + answer['path'] if answer.get('path') else ''}")
    return 0


def wait_duration(text: str) -> float:
    """``--timeout``: a duration in the grammar every setting takes (``30s``,
    ``10m``, ``1h``; a bare number counts seconds), as argparse reads it."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def _register_running(sub: Any, commands: Any) -> None:
    """``savepoint trigger`` and ``stop``: the verbs that address a running job."""
    trigger = sub.add_parser("trigger", help="ask the job running on a checkpoint for a savepoint "
                             "of its last committed batch; prints its path")
    stop = commands.add_parser("stop", help="stop the job running on a checkpoint at a batch "
                               "boundary, optionally taking a savepoint first")
    add_savepoint(trigger, "where the job writes the savepoint (default: "
                  "savepoints/savepoint-<time> beside the checkpoint directory)")
    add_savepoint(stop, "take a savepoint there, then stop")
    for parser in (trigger, stop):
        parser.add_argument("--checkpoint-dir", required=True, metavar="DIR",
                            help="the running job's checkpoint")
        parser.add_argument("--timeout", type=wait_duration, default=600.0, metavar="DURATION",
                            help="how long to wait: 30s, 10m, or seconds (600)")
        add_json(parser, "print the answer as JSON: the savepoint's path and batch")
        add_storage_option(parser, "for the checkpoint's control files (the job writes the "
                           "savepoint with its own)")
    trigger.set_defaults(func=guarded("savepoint trigger", _trigger))
    stop.set_defaults(func=guarded("stop", _stop))


def register_cli(commands: Any) -> None:
    savepoint = commands.add_parser(
        "savepoint", help="inspect or dispose of a savepoint (a portable copy of one committed batch)")
    sub = savepoint.add_subparsers(dest="savepoint_command", required=True)
    inspect = sub.add_parser("inspect", help="job, batch, source offsets, state operators, sinks, versions")
    dispose = sub.add_parser("dispose", help="delete a savepoint's files (refuses anything else)")
    for parser in (inspect, dispose):
        add_savepoint(parser, "the savepoint directory (local path or fsspec URL, e.g. s3://bucket/sp)",
                      required=True)
        add_common(parser)
    inspect.add_argument("--state", action="store_true",
                         help="also summarise its keyed state as `eoskit state inspect` does "
                         "(starts Spark, reads a temporary restore of the savepoint)")
    inspect.set_defaults(func=guarded("savepoint inspect", _inspect))
    dispose.set_defaults(func=guarded("savepoint dispose", _dispose))
    _register_running(sub, commands)
