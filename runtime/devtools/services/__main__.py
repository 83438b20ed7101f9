"""``python -m eoskit.runtime.devtools.services up|down|status|env``: the dev CLI without the ``eoskit`` script."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(["dev", *sys.argv[1:]]))
