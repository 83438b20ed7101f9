"""``eoskit cancel``: stop the job running on a checkpoint now (Flink's
``cancel``), without waiting for the batch in flight.

Safe at any point of the protocol: the batch in flight is not committed in
the offset log's sense, so the next start replays it with the same offsets,
and the sinks' sweep at that start settles whatever it left prepared by the
decision log (docs/protocol.md). ``eoskit stop`` is the gentle one: it lets
the batch in flight finish and can take a savepoint first.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from eoskit.runtime.cli.checkpoint import add_json, add_storage_option, storage_options
from eoskit.runtime.cli.errors import guarded
from eoskit.runtime.cli.savepoint import wait_duration
from eoskit.runtime.job.control import ControlDir, ControlError
from eoskit.runtime.state.checkpoints import require_directory


def _cancel(args: argparse.Namespace) -> int:
    options = storage_options(args.storage_option)
    require_directory(args.checkpoint_dir, options)  # exit 2 before anything
    control = ControlDir(args.checkpoint_dir, options)
    started = time.monotonic()
    control.wait_answer(control.send("cancel"), args.timeout)
    while control.live_run() is not None:
        if time.monotonic() - started > args.timeout:
            raise ControlError(f"the job on {control.checkpoint} was asked to cancel and did not "
                               f"end within {args.timeout:.0f} s")
        time.sleep(0.2)
    took = time.monotonic() - started
    if args.json:
        print(json.dumps({"checkpoint": control.checkpoint, "cancelled": True, "seconds": round(took, 3)}))
    else:
        print(f"cancelled the job on {control.checkpoint} ({took:.1f} s); its next start replays "
              "the batch it was in")
    return 0


def register_cli(commands: Any) -> None:
    cancel = commands.add_parser(
        "cancel", help="stop the job running on a checkpoint now, the batch in flight too "
        "(replayed at its next start)",
        description="Ask the job running on a checkpoint (eoskit run or spark-submit job.py) to "
        "stop at once, without waiting for the batch in flight (Flink's cancel); its next start "
        "replays that batch and settles what it left prepared. eoskit stop waits for it instead.")
    cancel.add_argument("--checkpoint-dir", required=True, metavar="DIR", help="the running job's checkpoint")
    cancel.add_argument("--timeout", type=wait_duration, default=120.0,
                        help="how long to wait for the job to end: 30s, 2m, or seconds (120)")
    add_json(cancel, "print the outcome as JSON: checkpoint, cancelled, seconds")
    add_storage_option(cancel, "for the checkpoint's control files")
    cancel.set_defaults(func=guarded("cancel", _cancel))
