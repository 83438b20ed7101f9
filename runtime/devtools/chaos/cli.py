"""``eoskit chaos JOB.py``: prove a job exactly-once by crashing it, on
scratch copies of its sink (``eoskit.runtime.devtools.chaos.runner``). Exit 0 only
when every output is exact and the job deterministic (when checked); 1 when
they are not, or a run failed by itself; 2 when the job is refused."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path
from typing import Any

from eoskit.runtime.cli.checkpoint import add_conf, spark_conf
from eoskit.runtime.cli.errors import UsageError, guarded
from eoskit.runtime.devtools.chaos.plan import FAULT_KINDS, KINDS, FaultPlan, parse_faults
from eoskit.runtime.devtools.services.local import DEFAULT_ROOT


def _every(text: str) -> tuple[int, int]:
    try:
        low, _, high = text.partition(",")
        return int(low), int(high or low)
    except ValueError:
        raise UsageError(f"--faults-every {text!r}: give batches as LOW,HIGH (e.g. 1,3)") from None


def _dev_dir(given: str | None) -> Path | None:
    """``--dev-dir``, else ``EOSKIT_DEV_DIR``, else ``eoskit dev``'s default
    folder when it exists; None when there is none."""
    if given:
        if not Path(given).is_dir():
            raise UsageError(f"--dev-dir {given}: no such folder (the one given to `eoskit dev up --dir`)")
        return Path(given)
    found = Path(os.environ.get("EOSKIT_DEV_DIR") or DEFAULT_ROOT)
    return found if found.is_dir() else None


def _records(args: argparse.Namespace) -> None:
    """``--records N`` and ``--generator SPEC`` come together, N at least 1."""
    if args.records is not None and args.generator is None:
        raise UsageError("--records needs --generator SPEC (path/to/file.py:function or "
                         "package.module:function): the function that makes the records")
    if args.generator is not None and args.records is None:
        raise UsageError("--generator needs --records N: how many records it makes")
    if args.records is not None and args.records < 1:
        raise UsageError(f"--records {args.records}: give how many records to generate (1 or more)")


def _chaos(args: argparse.Namespace) -> int:
    from eoskit.runtime.devtools.chaos.runner import ChaosSettings, chaos  # PySpark: not for the parser
    _records(args)
    try:
        kinds = parse_faults(args.faults)
        every = _every(args.faults_every)
        seed = args.seed if args.seed is not None else secrets.randbelow(10**6)
        FaultPlan.draw(seed, kinds, args.kills, every)  # bad bounds refused before anything runs
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    conf = spark_conf(args.conf)
    if args.master:
        conf["spark.master"] = args.master
    settings = ChaosSettings(Path(args.job), seed, kinds, args.kills, every,
                             check_determinism=args.check_determinism, keep=args.keep,
                             workdir=Path(args.workdir) if args.workdir else None, conf=conf,
                             dev_dir=_dev_dir(args.dev_dir),
                             ignore=tuple(c.strip() for c in (args.ignore_columns or "").split(",") if c.strip()),
                             records=args.records, generator=args.generator)
    report = chaos(settings, sys.stderr)
    print(report.to_text())
    if args.report:
        Path(args.report).write_text(report.to_json())
    if args.html:
        Path(args.html).write_text(report.to_html())
    return report.exit_code()


def register_cli(commands: Any) -> None:
    parser = commands.add_parser(
        "chaos", help="prove a job exactly-once by crashing it, on scratch copies of its sink",
        description="Pin the job's input, run the job into scratch copies of its sink once "
        "without faults, once more to check it is deterministic, and once with faults drawn "
        "from --seed; compare the outputs row by row. Nothing is written to the job's own "
        "target. Exit 0 only when every output is exact. Faults: " + "; ".join(
            f"{k}: {KINDS[k].help}" for k in FAULT_KINDS) + ".")
    parser.add_argument("job", help="the job file, as eoskit run takes it")
    parser.add_argument("--seed", type=int, help="draw the faults from this seed (default: a "
                        "random one, printed in the report: give it again to repeat the run)")
    parser.add_argument("--faults", default="driver,worker", metavar="KINDS",
                        help=f"comma-separated, among {', '.join(FAULT_KINDS)} (default driver,worker)")
    parser.add_argument("--kills", type=int, default=4, metavar="N", help="faults to inject (default 4)")
    parser.add_argument("--faults-every", default="1,3", metavar="LOW,HIGH",
                        help="batches between two faults, drawn between LOW and HIGH (default 1,3)")
    parser.add_argument("--no-check-determinism", dest="check_determinism", action="store_false",
                        help="skip the second run without faults that tells a non-deterministic "
                        "job from a sink that lost or doubled records")
    parser.add_argument("--ignore-columns", metavar="COLUMNS",
                        help="comma-separated columns left out of the comparisons: values the job "
                        "computes anew on every run by design (a processing time written in the "
                        "two-phase mode)")
    parser.add_argument("--records", type=int, metavar="N",
                        help="with --generator: the job reads N records generated by SPEC, written "
                        "to a scratch copy of its input topic, instead of its topic's offsets")
    parser.add_argument("--generator", metavar="SPEC",
                        help="with --records: path/to/file.py:function or package.module:function, "
                        "called once as function(N); it returns N records, each a value (bytes or "
                        "str), a (key, value) tuple, or a dict of key, value, headers, partition")
    parser.add_argument("--report", metavar="FILE.json", help="also write the report as JSON")
    parser.add_argument("--html", metavar="FILE.html", help="also write the report as a web page")
    parser.add_argument("--keep", action="store_true",
                        help="keep the scratch targets and the runs' folder, to look into them")
    parser.add_argument("--workdir", metavar="DIR",
                        help="the runs' checkpoints and logs (default: a new temporary folder)")
    parser.add_argument("--dev-dir", metavar="DIR",
                        help="the folder of eoskit's dev services (`eoskit dev up --dir`) whose "
                        "database and Kafka the database and broker faults may stop: only a "
                        "server of the job that is one of them is ever stopped (default: "
                        "$EOSKIT_DEV_DIR, else .eoskit/dev)")
    parser.add_argument("--master", help="Spark master for the runs (e.g. spark://host:7077)")
    add_conf(parser, "a Spark setting for the runs")
    parser.set_defaults(func=guarded("chaos", _chaos))
