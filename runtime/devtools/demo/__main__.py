"""Run the demo: ``python -m eoskit.runtime.devtools.demo`` (or ``eoskit demo``)."""

import sys

from eoskit.runtime.devtools.demo.run import main

sys.exit(main())
