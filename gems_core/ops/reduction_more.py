"""Reductions built on gems' sum and any kernels: trace, count_nonzero (over all dims or
some, with out=) and equal, and angle (elementwise: the argument of a real number).

trace sums the diagonal view (reduction.py's kernel; integers sum in int64, as in ATen).
count_nonzero flags the non-zero elements (a generated pointwise op) and sums the flags in
int64 over the dims. equal compares two tensors of one shape (a pointwise "differs" flag,
NaN differing from itself) and asks the any kernel, reading back one bool as ATen's
returns a Python bool. angle is pi for negative values, 0 for the others, NaN kept; an
integer input gives the default float dtype.

Left to ATen: complex inputs, shapes it rejects (trace of a non-matrix, bad dims), and
dtypes the backend leaves the underlying kernels out of.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import TL_DTYPES, pointwise
from ..registry import aten_op
from .kernel_gates import leaves_to_aten
from .logical_reduction import any_all
from .reduction import sum_all, sum_dim, sum_out


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _nonzero_flag(x):
    return x != 0


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _differs(x, y):
    return x != y


@pointwise(kind="INT_TO_FLOAT", extras=("pi",))
@triton.jit
def _angle(x, pi):
    # NaN stays NaN (x != x); -0.0 is not below 0
    return tl.where(x < 0, pi, tl.where(x != x, x, 0.0))


def _real(*tensors: torch.Tensor) -> bool:
    return all(t.dtype in TL_DTYPES for t in tensors)


def _traceable(self: torch.Tensor) -> bool:
    """A matrix of a dtype ATen's trace takes (not bool) and the backend sums."""
    return self.dim() == 2 and _real(self) and self.dtype != torch.bool and not leaves_to_aten("sum", self.dtype)


@aten_op("trace")
def trace(self: torch.Tensor) -> Any:
    """The sum of the main diagonal of a matrix."""
    if not _traceable(self):
        return NotImplemented  # ATen raises: expected a matrix
    return sum_all(self.diagonal())


@aten_op("trace.out")
def trace_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    if not _traceable(self) or out.dim() != 0:
        return NotImplemented  # ATen raises or resizes
    return sum_out(self.diagonal(), [0], out=out)


def _count_dims(self: torch.Tensor, dim: Any) -> list[int] | None:
    """The dims counted over (all for None); None for dims ATen rejects."""
    if not _real(self) or leaves_to_aten("sum", torch.int64):
        return None
    dims = list(range(self.dim())) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    rank = max(self.dim(), 1)
    if any(not -rank <= d < rank for d in dims) or len({d % rank for d in dims}) != len(dims):
        return None
    return dims


@aten_op("count_nonzero", "count_nonzero.dim_IntList")
def count_nonzero(self: torch.Tensor, dim: int | Sequence[int] | None = None) -> Any:
    """The number of non-zero elements (over ``dim``: one count per remaining position)."""
    dims = _count_dims(self, dim)
    if dims is None:
        return NotImplemented
    return sum_dim(_nonzero_flag(self), dims or None, dtype=torch.int64)  # no dims: all of them


@aten_op("count_nonzero.out", "count_nonzero.dim_IntList_out")
def count_nonzero_out(self: torch.Tensor, dim: int | Sequence[int] | None = None, *, out: torch.Tensor) -> Any:
    dims = _count_dims(self, dim)
    if dims is None or out.dtype != torch.int64:
        return NotImplemented  # ATen raises on the dtype
    return sum_out(_nonzero_flag(self), dims or None, out=out)


@aten_op("equal")
def equal(self: torch.Tensor, other: torch.Tensor) -> Any:
    """Whether both have one shape and equal elements (NaN equals nothing), as a bool."""
    if not _real(self, other) or self.device != other.device or leaves_to_aten("any", torch.bool):
        return NotImplemented
    if self.shape != other.shape:
        return False
    if self.numel() == 0:
        return True
    return not bool(any_all(_differs(self, other)).item())


@aten_op("angle")
def angle(self: torch.Tensor) -> Any:
    """The argument of each real element: pi below 0, else 0 (NaN kept)."""
    return _angle(self, pi=math.pi) if _real(self) else NotImplemented


@aten_op("angle.out")
def angle_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    if not _real(self) or out.dtype != _angle.result_dtypes(self)[1]:
        return NotImplemented
    return _angle(self, out=out, pi=math.pi)
