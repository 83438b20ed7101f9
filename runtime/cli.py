"""The ``eoskit`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _run(args: argparse.Namespace) -> int:
    from eoskit.runtime.jobfile import JobFileError, load_pipeline
    from eoskit.runtime.pipeline import PipelineFailed

    from eoskit.runtime.listeners import PrometheusMetrics, StatusFile
    from eoskit.runtime.settings import from_flags

    try:
        pipeline = load_pipeline(args.job)
        listeners = ([PrometheusMetrics(args.metrics_port)] if args.metrics_port else []) + \
            ([StatusFile(args.status_file)] if args.status_file else [])
        pipeline.run(args.checkpoint_dir, until_caught_up=args.until_caught_up,
                     settings=from_flags(args), listeners=tuple(listeners),
                     from_savepoint=args.from_savepoint)
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
    run.add_argument("--from-savepoint", metavar="SAVEPOINT",
                     help="start from this savepoint, restored into the (empty) checkpoint directory")
    run.add_argument("--metrics-port", type=int, metavar="PORT",
                     help="serve Prometheus metrics on 127.0.0.1:PORT/metrics")
    run.add_argument("--status-file", metavar="PATH",
                     help="keep the run's state in this JSON file, replaced at every event")
    from eoskit.runtime.settings import add_flags

    add_flags(run)
    run.set_defaults(func=_run)

    demo = commands.add_parser(
        "demo", help="the end-to-end demo: local services, sample orders, the job, the proof"
    )
    demo.set_defaults(func=lambda args: __import__("eoskit.runtime.demo.run", fromlist=["main"]).main())

    from eoskit.runtime.dev.cli import register_cli
    from eoskit.runtime.txn_cli import register_cli as register_txn_cli

    register_cli(commands)
    register_txn_cli(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
