"""``python -m gems_conformance``: the same as the ``gems-conformance`` command."""

import sys

from .cli import main

sys.exit(main())
