"""``python -m eoskit.runtime.cli``: the ``eoskit`` command without its script."""

import sys

from eoskit.runtime.cli.main import main

sys.exit(main())
