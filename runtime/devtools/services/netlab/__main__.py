"""``python -m eoskit.runtime.devtools.services.netlab sweep|check`` (docs/network-faults.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .lab import Lab
from .namespaces import NetlabError, sweep


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eoskit.runtime.devtools.services.netlab",
                                     description="eoskit's network lab (docs/network-faults.md)")
    commands = parser.add_subparsers(dest="command", required=True)
    sweeping = commands.add_parser("sweep", help="remove what labs of dead processes left behind")
    sweeping.add_argument("--prefix", default="eosk", help="only namespaces starting with this")
    commands.add_parser("check", help="say whether a lab can run on this machine")
    args = parser.parse_args(argv)
    try:
        if args.command == "sweep":
            removed = sweep(args.prefix)
            print(f"removed {len(removed)} namespace(s){': ' if removed else ''}{' '.join(removed)}")
            return 0
        reason = Lab.available()
        print(reason or "network labs can run here")
        return 1 if reason else 0
    except NetlabError as err:
        print(f"netlab: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
