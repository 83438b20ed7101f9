"""The ``eoskit`` command line.

Every verb fails the same way (``eoskit.runtime.cli.errors``): one line on
stderr naming the cause, a documented exit code, the traceback only with
``--verbose``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from eoskit.runtime.cli.cancel import register_cli as register_cancel_cli
from eoskit.runtime.cli.checkpoint import (
    add_conf,
    add_json,
    add_storage_option,
    register_cli as register_checkpoint_cli,
    spark_conf,
    storage_options,
)
from eoskit.runtime.cli.errors import EXIT_CODES, UsageError, add_verbose, guarded, is_verbose
from eoskit.runtime.cli.logs import add_log_format, configure, log_format, progress_stream
from eoskit.runtime.cli.savepoint import register_cli as register_savepoint_cli
from eoskit.runtime.cli.state import register_cli as register_state_cli
from eoskit.runtime.cli.spark_import import register_cli as register_import_cli
from eoskit.runtime.cli.status import register_cli as register_status_cli
from eoskit.runtime.cli.txn import register_cli as register_txn_cli
from eoskit.runtime.devtools.chaos.cli import register_cli as register_chaos_cli
from eoskit.runtime.devtools.services.cli import register_cli
from eoskit.runtime.job.settings import add_flags, from_flags
from eoskit.runtime.spark.package import ALIAS, pack


def _run(args: argparse.Namespace) -> int:
    # PySpark, and the job's connectors: for `eoskit run`, not for the CLI's parser.
    from eoskit.runtime.job.jobfile import load_pipeline

    conf = spark_conf(args.conf)  # a bad --conf is refused before the job file runs
    flags = from_flags(args)  # and so is a bad setting flag
    if args.master:
        conf["spark.master"] = args.master
    return run_loaded(load_pipeline(args.job), args, conf, flags)


def run_loaded(pipeline: Any, args: argparse.Namespace, conf: dict[str, str],
               flags: dict[str, Any]) -> int:
    """Run a loaded ``pipeline`` as ``eoskit run`` and ``spark-submit job.py`` do:
    its settings checked with the flags over them before Spark starts, the
    session (spark-submit's, if it started this process), the listeners the
    flags ask for, and the run."""
    from eoskit.core.fs import use_storage_options
    from eoskit.runtime.job.control import ControlDir
    from eoskit.runtime.job.listeners import PrometheusMetrics, StatusFile
    from eoskit.runtime.job.standby import stand_by
    from eoskit.runtime.spark.session import get_session, quiet_failure_logs

    if args.standby and args.from_savepoint:
        raise UsageError("--standby takes over the job running on --checkpoint-dir; --from-savepoint "
                         "starts a job from a savepoint: give one of them")
    options = storage_options(args.storage_option)  # a bad --storage-option is refused here
    # Before the session: Spark's Python processes inherit them (Pipeline.run).
    use_storage_options(options)
    # The flags over the job file's settings, checked with its parts (as
    # Pipeline.run checks them again) before Spark starts.
    pipeline.check_settings(pipeline.settings.override(flags))
    spark = get_session(pipeline.name, {**pipeline.spark_conf, **conf})
    if not is_verbose(args):
        quiet_failure_logs(spark)  # the failure's root cause is our one line
    out = progress_stream(log_format(args))
    if args.standby and not stand_by(spark, ControlDir(args.checkpoint_dir), pipeline.name, out):
        return 0  # the run it stood by for ended as it decided to
    listeners = ([PrometheusMetrics(args.metrics_port, args.metrics_host)] if args.metrics_port else []) + \
        ([StatusFile(args.status_file)] if args.status_file else [])
    summary = pipeline.run(args.checkpoint_dir, until_caught_up=args.until_caught_up, spark=spark,
                           out=out, settings=flags,
                           listeners=tuple(listeners), from_savepoint=args.from_savepoint,
                           allow_non_restored_state=args.allow_non_restored_state,
                           storage_options=options, print_summary=not args.json)
    if args.json:
        print(json.dumps(summary.to_json(pipeline.name, args.checkpoint_dir)), flush=True)
    return 0


def submit_main(pipeline: Any, job: str, argv: Sequence[str]) -> int:
    """``spark-submit job.py [eoskit run's flags]``: the job file's
    ``pipeline.main()`` runs it as ``eoskit run job.py`` would, in the
    session spark-submit started (its --master and --conf: ours are refused)."""
    parser = argparse.ArgumentParser(
        prog=f"spark-submit [spark-submit's options] {job}",
        description=f"Run the pipeline {pipeline.name!r} as `eoskit run` does; Spark's own "
        "options (--master, --conf, --deploy-mode, --archives) go to spark-submit, before the file.")
    add_run_arguments(parser, submitted=True)
    add_verbose(parser)
    add_log_format(parser)
    args = parser.parse_args(argv)
    configure(log_format(args), is_verbose(args))

    def run(args: argparse.Namespace) -> int:
        return run_loaded(pipeline, args, {}, from_flags(args))

    return int(guarded("run", run)(args) or 0)


def _package(args: argparse.Namespace) -> int:
    packed = pack(args.output, args.with_, args.python)
    print(f"packed {len(packed.distributions)} distributions ({packed.files} files, "
          f"{packed.bytes / 2**20:.0f} MB unpacked) into {packed.path} "
          f"({packed.path.stat().st_size / 2**20:.0f} MB); nodes need Python {packed.python}")
    print(f"ship it with:  spark-submit --archives {packed.path}#{ALIAS} "
          f"--conf spark.pyspark.python=./{ALIAS}/bin/python ...")
    print(f"or in the job:  spark_conf={{\"spark.archives\": \"{packed.path}#{ALIAS}\"}} and "
          f"PYSPARK_PYTHON=./{ALIAS}/bin/python (docs/deploy.md)")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from eoskit.runtime.devtools.demo.run import main  # PySpark, confluent-kafka, SQLAlchemy: not for the parser

    return main()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("eoskit")
    except PackageNotFoundError:  # run from a source tree, not installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eoskit", description="Exactly-once Kafka-to-sink jobs on Spark.",
        epilog="Exit codes: " + ", ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items())
        + " (docs/operations.md#exit-codes).",
    )
    parser.add_argument("--version", action="version", version=f"eoskit {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    _register_run(commands)
    _register_package(commands)

    demo = commands.add_parser(
        "demo", help="the end-to-end demo: local services, sample orders, the job, the proof"
    )
    demo.set_defaults(func=guarded("demo", _demo))

    register_cli(commands)
    register_txn_cli(commands)
    register_import_cli(register_checkpoint_cli(commands))
    register_savepoint_cli(commands)
    register_cancel_cli(commands)
    register_state_cli(commands)
    register_status_cli(commands)
    register_chaos_cli(commands)
    add_verbose(parser)
    add_log_format(parser)
    return parser


def _register_run(commands: argparse._SubParsersAction) -> None:
    """``eoskit run``: its arguments, the runtime settings' flags, and its handler."""
    run = commands.add_parser("run", help="run the `pipeline` defined in a job file")
    run.add_argument("job", help="Python file with a module-level `pipeline`")
    add_run_arguments(run)
    run.set_defaults(func=guarded("run", _run))


def add_run_arguments(run: argparse.ArgumentParser, submitted: bool = False) -> None:
    """The arguments of a run, but the job file: ``eoskit run``'s, and a job
    file's under spark-submit (``submitted``: without --master and --conf,
    which are spark-submit's)."""
    run.add_argument(
        "--checkpoint-dir", required=True, metavar="DIR",
        help="the query's checkpoint location (any Hadoop file system path); "
        "a restart with the same directory continues from it",
    )
    run.add_argument(
        "--until-caught-up", action="store_true",
        help="read what exists at start (availableNow trigger), then exit 0",
    )
    run.add_argument(
        "--standby", action="store_true",
        help="start and warm the session now, then wait beside the job running on --checkpoint-dir "
        "and take over when its driver dies (a restart without the cold start; ends when the job "
        "ends by itself); see docs/runtime.md, 'A standby driver'",
    )
    run.add_argument("--from-savepoint", metavar="PATH",
                     help="start from this savepoint, restored into the (empty) checkpoint directory")
    run.add_argument("--allow-non-restored-state", action="store_true",
                     help="with --from-savepoint: restore even if a sink of the savepoint is not "
                     "restored, because this job names a new sink id (Flink's --allowNonRestoredState)")
    run.add_argument("--metrics-port", type=int, metavar="PORT",
                     help="serve Prometheus metrics on HOST:PORT/metrics (see --metrics-host)")
    run.add_argument("--metrics-host", metavar="HOST", default="127.0.0.1",
                     help="the address the metrics are served on: 127.0.0.1 (default, this "
                     "machine only), 0.0.0.0 for every interface (a Prometheus in another "
                     "pod or host), or one interface's address")
    run.add_argument("--status-file", metavar="PATH",
                     help="also keep the run's state in this JSON file, replaced at every event "
                     "(every run keeps it beside its checkpoint: eoskit status)")
    if not submitted:
        run.add_argument("--master", metavar="URL",
                         help="Spark's master (spark.master), as spark-submit takes it: local[4], "
                         "spark://host:7077, ...; over the job's spark_conf")
        add_conf(run, "a Spark setting, as spark-submit takes it, over the job's spark_conf")
    add_storage_option(run, "for eoskit's own files beside the checkpoint and --from-savepoint "
                       "(control, decision log, savepoints), in this process and the Python "
                       "processes Spark starts; Spark's own go through Hadoop (--conf spark.hadoop.*)")
    add_json(run, "print the run's summary as one JSON object on stdout at its end, instead of "
             "the summary's text lines")
    add_flags(run)


def _register_package(commands: argparse._SubParsersAction) -> None:
    """``eoskit package``: its arguments and its handler."""
    package = commands.add_parser(
        "package", help="pack this Python environment (eoskit and what it needs) for executors",
        description="Write a relocatable virtualenv archive (venv-pack's layout) holding eoskit, "
        "its requirements and the --with distributions, for spark-submit --archives "
        "env.tar.gz#environment with PYSPARK_PYTHON=./environment/bin/python. PySpark is left "
        "out: the nodes' Spark provides it.")
    package.add_argument("-o", "--output", default="eoskit-env.tar.gz",
                         help="the archive to write (default eoskit-env.tar.gz)")
    package.add_argument("--with", dest="with_", action="append", default=[], metavar="DIST",
                         help="also pack this installed distribution and its requirements "
                         "(the job's own libraries; repeatable; e.g. --with requests)")
    package.add_argument("--python", metavar="PATH",
                         help="the Python interpreter's path on the nodes (default: this "
                         "environment's base interpreter)")
    package.set_defaults(func=guarded("package", _package))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure(log_format(args), is_verbose(args))
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
