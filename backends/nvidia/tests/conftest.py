"""The NVIDIA backend's tests run with the core suite's setup (``tests/conftest.py``: the
cpu backend unless GEMS_DEVICE says otherwise, a cache of the run's own). Only its module-level
setup is run here: its hooks are the whole run's once the core suite is collected too."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parents[3] / "tests" / "conftest.py"))
