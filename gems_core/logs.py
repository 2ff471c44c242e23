"""gems' logging, through the standard ``logging`` module: the ``gems`` logger and its
children ``gems.selection`` (the backend selected, at info), ``gems.dispatch`` (each op call
served by gems or handed to ATen, and why), ``gems.launch`` (each kernel compiled, and how
long it took, or compiling in the background while ATen serves), ``gems.tuning`` (each
tuning choice and where it came from) and ``gems.native`` (each call the native dispatch
layer will not replay, and why); all but the selection at debug.

Silent unless configured: the ``gems`` logger has a ``NullHandler``. ``GEMS_LOG=debug``
(``info``, ``warning``) attaches a stderr handler at that level when gems selects its
backend; any other logging configuration works as for any library. Debug messages are
logged once per signature (the op and its dtypes, the kernel and its specialization...),
not per call; callers on hot paths ask ``isEnabledFor(logging.DEBUG)`` first, so a
disabled logger costs one check.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Hashable, Mapping
from typing import Any

from . import settings

ROOT = logging.getLogger("gems")
ROOT.addHandler(logging.NullHandler())
#: signatures logged already; past this many the set starts afresh (memory stays bounded,
#: and a signature may then be logged again)
SEEN_LIMIT = 4096
_seen: set[Hashable] = set()
_handler: logging.Handler | None = None


def get(name: str) -> logging.Logger:
    """The ``gems.<name>`` logger."""
    return logging.getLogger(f"gems.{name}")


def once(logger: logging.Logger, key: Hashable, message: str, *args: Any) -> None:
    """Log ``message % args`` at debug the first time ``key`` is met."""
    if key in _seen:
        return
    if len(_seen) >= SEEN_LIMIT:
        _seen.clear()
    _seen.add(key)
    logger.debug(message, *args)


def configure(environ: Mapping[str, str] | None = None) -> None:
    """Attach the stderr handler ``GEMS_LOG`` asks for (once; nothing where it is unset)."""
    global _handler
    level = settings.get("GEMS_LOG", environ)
    if level == "off" or _handler is not None:
        return
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
    ROOT.addHandler(_handler)
    ROOT.setLevel(level.upper())
