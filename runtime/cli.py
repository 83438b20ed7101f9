"""The ``eoskit`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _run(args: argparse.Namespace) -> int:
    from eoskit.runtime.jobfile import JobFileError, load_pipeline
    from eoskit.runtime.pipeline import PipelineFailed

    try:
        pipeline = load_pipeline(args.job)
        pipeline.run(args.checkpoint_dir, until_caught_up=args.until_caught_up)
    except (JobFileError, PipelineFailed, ValueError) as exc:
        print(f"eoskit run: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eoskit", description="Exactly-once Kafka-to-sink jobs on Spark."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the `pipeline` defined in a job file")
    run.add_argument("job", help="Python file with a module-level `pipeline`")
    run.add_argument(
        "--checkpoint-dir", required=True,
        help="the query's checkpoint location (any Hadoop file system path); "
        "a restart with the same directory continues from it",
    )
    run.add_argument(
        "--until-caught-up", action="store_true",
        help="read what exists at start (availableNow trigger), then exit 0",
    )
    run.set_defaults(func=_run)

    demo = commands.add_parser(
        "demo", help="the end-to-end demo: local services, sample orders, the job, the proof"
    )
    demo.set_defaults(func=lambda args: __import__("eoskit.runtime.demo.run", fromlist=["main"]).main())

    from eoskit.runtime.dev.cli import register_cli
    from eoskit.runtime.txn_cli import register_cli as register_txn_cli
    from eoskit.runtime.checkpoint_cli import register_cli as register_checkpoint_cli
    from eoskit.runtime.savepoint_cli import register_cli as register_savepoint_cli

    register_cli(commands)
    register_txn_cli(commands)
    register_checkpoint_cli(commands)
    register_savepoint_cli(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
