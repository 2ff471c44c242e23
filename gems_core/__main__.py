"""``python -m gems_core info | warmup | tune``: see :mod:`gems_core.info` and :mod:`gems_core.warmup`."""

from __future__ import annotations

import sys

from .info import main

if __name__ == "__main__":
    sys.exit(main())
