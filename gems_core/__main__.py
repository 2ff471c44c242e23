"""``python -m gems_core info [--json]``: see :mod:`gems_core.info`."""

from __future__ import annotations

import sys

from .info import main

if __name__ == "__main__":
    sys.exit(main())
