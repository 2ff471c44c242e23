"""A call run on ATen and then on gems, checking that gems' implementation served it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gems_conformance.routing import RouteWatch, implementations

import gems_core


def on_aten_and_gems(call: Callable[[], Any], ops: Sequence[str]) -> tuple[Any, Any]:
    """(ATen's result, gems' result) of ``call``, gems enabled for ``ops`` only; fails unless
    gems' implementation of one of ``ops`` ran."""
    want = call()
    with RouteWatch(frozenset().union(*implementations(list(ops)).values())) as watch, \
            gems_core.use_gems(include=list(ops)):
        got = call()
    assert watch.hit, f"the call reached none of gems' implementations of {list(ops)}"
    return want, got
