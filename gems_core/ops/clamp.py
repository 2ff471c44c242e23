"""clamp (number bounds), clamp.Tensor (tensor bounds, broadcast), clamp_min and clamp_max,
each with out= and in-place overloads.

As in ATen: the result has the promoted dtype of the input and the bounds given; a NaN in the
input or in a bound (a number bound included) gives NaN; min > max gives max everywhere. A
number bound that does not fit the result dtype (300 for int8, 1e6 for fp16) and a bool
result (except of one tensor bound) are errors in ATen, so those calls go there and raise
ATen's message.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import PointwiseOp, pointwise
from ..registry import aten_op


@pointwise(kind="DEFAULT")
@triton.jit
def _clamp(x, lo, hi):
    # min(max(x, lo), hi) with NaN from any operand: NaN-propagating min/max by definition,
    # where a compare-and-select could be folded into a NaN-dropping one by the compiler
    r = tl.maximum(x, lo, propagate_nan=tl.PropagateNan.ALL)
    return tl.minimum(r, hi, propagate_nan=tl.PropagateNan.ALL)


@pointwise(kind="DEFAULT")
@triton.jit
def _clamp_min(x, lo):
    # max(x, lo) with NaN from either operand
    return tl.maximum(x, lo, propagate_nan=tl.PropagateNan.ALL)


@pointwise(kind="DEFAULT")
@triton.jit
def _clamp_max(x, hi):
    # min(x, hi) with NaN from either operand
    return tl.minimum(x, hi, propagate_nan=tl.PropagateNan.ALL)


def _fits(value: Any, dtype: torch.dtype) -> bool:
    """ATen's checked conversion of a number bound to the result dtype (c10 ``overflows``):
    infinities and NaN fit any float dtype; a negative int fits an unsigned dtype while its
    magnitude does (it wraps)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return True
    if dtype.is_floating_point:
        if isinstance(value, float) and not math.isfinite(value):
            return True
        limit = torch.finfo(dtype).max
        return -limit <= value <= limit
    info = torch.iinfo(dtype)
    if isinstance(value, float):
        return info.min <= value <= info.max
    if info.min == 0:
        return -info.max <= value <= info.max
    return info.min <= value <= info.max


def _select(self: torch.Tensor, lo: Any, hi: Any) -> tuple[PointwiseOp, tuple[Any, ...]] | None:
    """The kernel and operands for the bounds given (None: both missing, ATen raises)."""
    if lo is None and hi is None:
        return None
    if hi is None:
        return _clamp_min, (self, lo)
    if lo is None:
        return _clamp_max, (self, hi)
    return _clamp, (self, lo, hi)


def _plan(self: torch.Tensor, lo: Any, hi: Any, numbers: bool) -> tuple[PointwiseOp, tuple[Any, ...], torch.dtype] | None:
    """(kernel, operands, result dtype), or None for a call ATen must serve."""
    chosen = _select(self, lo, hi)
    if chosen is None:
        return None
    op, operands = chosen
    _, result = op.result_dtypes(*operands)
    if result.is_complex:
        return None
    if result == torch.bool and (numbers or op is _clamp):
        return None  # ATen has no bool kernel for number bounds or for both tensor bounds
    if numbers and not all(_fits(v, result) for v in (lo, hi)):
        return None
    return op, operands, result


def _functional(self: torch.Tensor, lo: Any, hi: Any, numbers: bool) -> Any:
    plan = _plan(self, lo, hi, numbers)
    if plan is None:
        return NotImplemented
    op, operands, _ = plan
    return op(*operands)


def _out(self: torch.Tensor, lo: Any, hi: Any, numbers: bool, out: torch.Tensor) -> Any:
    plan = _plan(self, lo, hi, numbers)
    if plan is None or out.dtype != plan[2]:
        return NotImplemented  # ATen casts or raises, depending on the overload
    op, operands, _ = plan
    return op(*operands, out=out)


def _inplace(self: torch.Tensor, lo: Any, hi: Any, numbers: bool) -> Any:
    plan = _plan(self, lo, hi, numbers)
    if plan is None or not torch.can_cast(plan[2], self.dtype):
        return NotImplemented  # ATen's own "can't be cast" message
    op, operands, _ = plan
    return op.inplace(*operands)


@aten_op("clamp")
def clamp(self: torch.Tensor, min: Any = None, max: Any = None) -> Any:
    """``self`` limited to [min, max]; either bound may be missing."""
    return _functional(self, min, max, numbers=True)


@aten_op("clamp.Tensor")
def clamp_tensor(self: torch.Tensor, min: torch.Tensor | None = None, max: torch.Tensor | None = None) -> Any:
    """``self`` limited elementwise by broadcast bound tensors; either may be missing."""
    return _functional(self, min, max, numbers=False)


@aten_op("clamp.out")
def clamp_out(self: torch.Tensor, min: Any = None, max: Any = None, *, out: torch.Tensor) -> Any:
    return _out(self, min, max, True, out)


@aten_op("clamp.Tensor_out")
def clamp_tensor_out(
    self: torch.Tensor, min: torch.Tensor | None = None, max: torch.Tensor | None = None, *, out: torch.Tensor
) -> Any:
    return _out(self, min, max, False, out)


@aten_op("clamp_")
def clamp_(self: torch.Tensor, min: Any = None, max: Any = None) -> Any:
    return _inplace(self, min, max, numbers=True)


@aten_op("clamp_.Tensor")
def clamp_tensor_(self: torch.Tensor, min: torch.Tensor | None = None, max: torch.Tensor | None = None) -> Any:
    return _inplace(self, min, max, numbers=False)


@aten_op("clamp_min", "clamp_min.Tensor")
def clamp_min(self: torch.Tensor, min: Any) -> Any:
    """max(self, min) with NaN propagated."""
    return _functional(self, min, None, numbers=not isinstance(min, torch.Tensor))


@aten_op("clamp_min.out", "clamp_min.Tensor_out")
def clamp_min_out(self: torch.Tensor, min: Any, *, out: torch.Tensor) -> Any:
    return _out(self, min, None, not isinstance(min, torch.Tensor), out)


@aten_op("clamp_min_", "clamp_min_.Tensor")
def clamp_min_(self: torch.Tensor, min: Any) -> Any:
    return _inplace(self, min, None, numbers=not isinstance(min, torch.Tensor))


@aten_op("clamp_max", "clamp_max.Tensor")
def clamp_max(self: torch.Tensor, max: Any) -> Any:
    """min(self, max) with NaN propagated."""
    return _functional(self, None, max, numbers=not isinstance(max, torch.Tensor))


@aten_op("clamp_max.out", "clamp_max.Tensor_out")
def clamp_max_out(self: torch.Tensor, max: Any, *, out: torch.Tensor) -> Any:
    return _out(self, None, max, not isinstance(max, torch.Tensor), out)


@aten_op("clamp_max_", "clamp_max_.Tensor")
def clamp_max_(self: torch.Tensor, max: Any) -> Any:
    return _inplace(self, None, max, numbers=not isinstance(max, torch.Tensor))
