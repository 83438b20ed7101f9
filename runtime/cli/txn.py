"""``eoskit txn list | resolve``: in-doubt transactions of a sink, by hand.

Failures are reported by the eoskit CLI's one convention
(``eoskit.runtime.cli.errors``): the handlers here just raise.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from eoskit.connectors.plugins import in_doubt_sink
from eoskit.runtime.cli.checkpoint import add_json, add_storage_option, storage_options
from eoskit.runtime.cli.errors import UsageError, guarded
from eoskit.twophase.decision_log import DecisionLog
from eoskit.twophase.identity import default_sink_id, qualified_location
from eoskit.twophase.txn_id import validate_sink_id

if TYPE_CHECKING:  # the contract imports PySpark and pyarrow, which the CLI's parser must not
    from eoskit.twophase.contract import TwoPhaseCommitting


def _sink(args: argparse.Namespace) -> TwoPhaseCommitting:
    """The registered sink that owns the target (``eoskit.connectors.plugins``):
    each plug-in's ``in_doubt(kind, target, options)`` is asked with ``kind``
    ``"url"`` or ``"path"`` (the flag given), ``target`` the flag's value as
    typed, and ``options`` the ``--storage-option``s as ``fs.PROTOCOL.KEY``
    (plus the hidden ``--option KEY=VALUE``s)."""
    kind, target = ("url", args.url) if args.url else ("path", args.path)
    # --storage-option PROTOCOL.KEY=VALUE is the files sink's option fs.PROTOCOL.KEY.
    options = {f"fs.{protocol}.{key}": str(value)
               for protocol, given in storage_options(args.storage_option).items()
               for key, value in given.items()}
    options.update(item.split("=", 1) for item in args.option or ())
    return in_doubt_sink(kind, target, options)


def _decisions(args: argparse.Namespace):
    location = qualified_location(args.checkpoint_dir)
    sink_id = validate_sink_id(args.sink_id) if args.sink_id else default_sink_id(location)
    return DecisionLog(location, sink_id)


def _list(args: argparse.Namespace) -> int:
    from eoskit.twophase.in_doubt import list_in_doubt  # PySpark, pyarrow (the contract): not for the parser

    sink, decisions = _sink(args), _decisions(args)
    entries = list_in_doubt(sink.committer(), decisions)
    if args.json:
        print(json.dumps({"sinkId": decisions.sink_id, "sink": sink.describe(), "transactions": [
            {"txnId": e.txn_id, "batch": e.batch, "verdict": e.verdict} for e in entries]}, indent=2))
        return 0
    print(f"sink id {decisions.sink_id} in {sink.describe()}: "
          f"{len(entries)} prepared transaction(s)")
    for entry in entries:
        print(f"  {entry.txn_id}  batch {entry.batch}  -> {entry.verdict}")
    return 0


def _resolve(args: argparse.Namespace) -> int:
    from eoskit.twophase.in_doubt import resolve_in_doubt  # PySpark, pyarrow (the contract): not for the parser

    orphans = "rollback" if args.rollback_orphans else "commit" if args.commit_orphans else None
    sink, decisions = _sink(args), _decisions(args)
    try:
        result = resolve_in_doubt(sink.committer(), decisions, orphans)
    except ValueError as exc:  # ids without a decision log need --rollback/--commit-orphans
        raise UsageError(str(exc)) from exc
    if args.json:
        print(json.dumps({"sinkId": decisions.sink_id, "sink": sink.describe(),
                          "committed": list(result["committed"]),
                          "rolledBack": list(result["rolled_back"])}, indent=2))
        return 0
    print(f"committed {len(result['committed'])}, rolled back {len(result['rolled_back'])}")
    for verb, ids in (("committed", result["committed"]), ("rolled back", result["rolled_back"])):
        for txn in ids:
            print(f"  {verb}: {txn}")
    return 0


#: Which of --url and --path names a sink, for eoskit's sinks and a plug-in's.
TARGET_HELP = """\
Name the sink by where its prepared transactions are found:
  --url   a server the sink reaches by URL and that lists its prepared
          transactions: PostgreSQL, MySQL/MariaDB (SQLAlchemy or JDBC URLs,
          as the sink's url option takes them)
  --path  a place in a file system the sink writes to and keeps its staged
          transactions in: the files sinks (eoskit-parquet, eoskit-json)
A plug-in's sink takes the one its documentation names (a URL for a
server, a path for files it writes); each installed two-phase sink is
asked in turn, and the first that owns the target settles it. Sinks with
no two-phase mode (eoskit-kafka, any idempotent mode) leave nothing
prepared: there is nothing for this command to do.
"""


def _key_value(text: str) -> str:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return text


def register_cli(commands: Any) -> None:
    txn = commands.add_parser("txn", help="list and settle a sink's in-doubt (prepared) transactions")
    sub = txn.add_subparsers(dest="txn_command", required=True)
    for name, func, text in (("list", _list, "show prepared transactions and their verdicts"),
                             ("resolve", _resolve, "settle them by the decision log")):
        parser = sub.add_parser(name, help=text, description=TARGET_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--url", help="the server that holds the prepared transactions, as a URL: "
                           "a database sink's SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db, "
                           "mysql+pymysql://user@host/db")
        where.add_argument("--path", help="the place the sink writes, as a path: a files sink's output "
                           "directory, local or any fsspec URL (s3://bucket/dir)")
        add_storage_option(parser, "for a --path target's file system; a plug-in receives it "
                           "as the option fs.PROTOCOL.KEY")
        add_json(parser, "print the transactions (list) or the outcome (resolve) as JSON")
        # The form of earlier versions (a sink option, fs.s3.endpoint_url=...): still read.
        parser.add_argument("--option", action="append", metavar="KEY=VALUE", type=_key_value,
                            help=argparse.SUPPRESS)
        parser.add_argument("--checkpoint-dir", required=True, metavar="DIR",
                            help="the query's checkpoint location (holds the decision log)")
        parser.add_argument("--sink-id", help="the sink's sinkId option, if it was set")
        if name == "resolve":
            group = parser.add_mutually_exclusive_group()
            group.add_argument("--rollback-orphans", action="store_true",
                               help="roll back prepared ids whose decision log is gone")
            group.add_argument("--commit-orphans", action="store_true",
                               help="commit prepared ids whose decision log is gone")
        parser.set_defaults(func=guarded(f"txn {name}", func))
