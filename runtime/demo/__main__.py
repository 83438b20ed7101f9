"""Run the demo: ``python -m eoskit.runtime.demo`` (or ``eoskit demo``)."""

import sys

from eoskit.runtime.demo.run import main

sys.exit(main())
