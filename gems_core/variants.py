"""Variant points: places in the core's kernels where a backend may put its own kernel.

A backend answers ``gems_kernel_variants(arch)`` with :class:`~gems_core.KernelVariant`
entries naming one of :data:`POINTS` (the contract's table, each point with the signature
its variant follows). At that point the core offers each call to the variant first;
the variant serves the inputs it accepts (and returns True) or declines (False), and the
portable kernel serves everything it declines. The portable kernel stays the reference: the
conformance suite and the tests compare both against ATen.

A variant that raises is turned off for the rest of the process with one warning, and the
call it failed goes to the portable kernel.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import launch_cache, runtime
from .contract import VARIANT_POINT_OPS as POINT_OPS  # noqa: F401 - the tables' names here
from .contract import VARIANT_POINTS as POINTS  # noqa: F401
from .launch_cache import recording

_turned_off: set[str] = set()


def variant(point: str) -> Callable[..., bool] | None:
    """The selected backend's variant at ``point``, or None."""
    if point in _turned_off:
        return None
    entry = runtime.current().policy.variants.get(point)
    return entry.fn if entry is not None else None


@contextmanager
def suspended(*points: str) -> Iterator[None]:
    """Inside the block the variants at ``points`` are not offered calls (the portable
    kernels serve them): for comparing the two. Process-wide. The plans and native recipes
    made on either side of the block's edges are dropped (they name the kernels chosen)."""
    added = [p for p in points if p not in _turned_off]
    _turned_off.update(added)
    launch_cache.invalidate()
    try:
        yield
    finally:
        _turned_off.difference_update(added)
        launch_cache.invalidate()


def offer(point: str, *args: Any) -> bool:
    """Offer a call to the variant at ``point``: True when it served the call. A served call
    launched outside gems' launch cache, so the native layer does not record it, unless the
    variant reports its launches itself (``fn.reports_launches = True``: each launch reported
    through :mod:`gems_core.launches` while a call is recorded, or the call marked
    unrepeatable there)."""
    fn = variant(point)
    if fn is None:
        return False
    try:
        served = bool(fn(*args))
        if served:
            recording.launched = True  # the backend's kernel ran: ATen may not redo the call
        if served and not getattr(fn, "reports_launches", False):
            recording.impure = True
        return served
    except Exception as exc:  # noqa: BLE001 - any failure of a backend's kernel turns it off
        _turned_off.add(point)
        name = runtime.current().selection.descriptor.name
        warnings.warn(
            f"gems: the {name} backend's {point} variant failed ({type(exc).__name__}: {exc}); "
            "the portable kernel serves this point from now on",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
