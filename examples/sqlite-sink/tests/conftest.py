"""The plug-in's tests import their target by module name."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
