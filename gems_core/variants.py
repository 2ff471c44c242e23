"""Variant points: places in the core's kernels where a backend may put its own kernel.

A backend answers ``gems_kernel_variants(arch)`` with :class:`~gems_core.KernelVariant`
entries naming a point below. At that point the core offers each call to the variant first;
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

from . import runtime
from .launch_cache import recording

#: point name -> the signature and contract a variant at that point follows
POINTS: dict[str, str] = {
    "attention_forward": (
        "fn(q, k, v, out, lse, causal, qk_scale) -> bool: attention without a mask, from the "
        "SDPA prefill path (more than 16 queries, or causal). q is (B, H, L, D), k is "
        "(B, HKV, S, D) and v is (B, HKV, S, DV) with H a multiple of HKV (DV may differ from "
        "D), any strides, all on the backend's device in one dtype. Write softmax(scores) @ v "
        "into out ((B, H, L, DV), preallocated), where the "
        "scores are qk_scale * q @ k^T in base 2 (qk_scale > 0 is the softmax scale times "
        "log2(e)), causal masking keeps key j <= query i (top-left), and write each row's "
        "base-2 log-sum-exp of its scores (max + log2(sum of exp2)) into lse, a (B * H, L) "
        "float32 tensor (the backward reads it). Return False, having written nothing, to "
        "leave the call to the portable kernel."
    ),
    "mm": (
        "fn(a, b, out, bias, alpha, beta) -> bool: a matrix product from mm and addmm (and the "
        "products built on them: linear, matmul) that the core would run on its tiled or "
        "tensor-descriptor kernel (more than one row and column, and more than 64 rows unless "
        "fp64). a is (M, K), "
        "b is (K, N), out is (M, N), preallocated, not overlapping a or b; any strides, all on "
        "the backend's device in one floating dtype, M, N > 0 (K may be 0). Write "
        "alpha * (a @ b) + beta * bias into out, accumulating in at least fp32; bias is None "
        "(mm, or addmm with beta == 0: then nothing of the input is read) or addmm's input "
        "expanded to (M, N) (stride-0 broadcast dims), which may be out itself. alpha and beta "
        "are Python numbers. Return False, having written nothing, to leave the call to the "
        "core's kernels."
    ),
}

#: point name -> the op whose kernel holds it (the compile tier's ``--ops`` selects by op)
POINT_OPS: dict[str, str] = {"attention_forward": "scaled_dot_product_attention", "mm": "mm"}

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
    from . import plan_cache

    added = [p for p in points if p not in _turned_off]
    _turned_off.update(added)
    plan_cache.clear_all()
    try:
        yield
    finally:
        _turned_off.difference_update(added)
        plan_cache.clear_all()


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
