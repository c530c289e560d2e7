"""Let ``pytest bench/overhead`` import the harness modules, which are scripts, not a package."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
