"""argmin, amin and aminmax, with their out= overloads.

argmin takes the (value, index) kernel of :mod:`.argreduce` with the smaller value winning:
NaN beats any number and equal values go to the first index, as in ATen. amin and aminmax
are plain MIN (and MAX) reductions of :mod:`.reduction`, which propagate NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..registry import aten_op
from .argreduce import _with_indices
from .reduction import MAX, MIN, reduce_dims, write_out


@aten_op("argmin")
def argmin(self: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    """Index of the smallest value over ``dim`` (None: of the flattened input); the first
    one on ties, the first NaN where there is one."""
    if self.dtype == torch.bool:
        return NotImplemented  # ATen raises: argmin does not support bool
    result = _with_indices(self, dim, keepdim, True, want_values=False)
    return NotImplemented if result is None else result[1]


@aten_op("argmin.out")
def argmin_out(self: torch.Tensor, dim: int | None = None, keepdim: bool = False, *, out: torch.Tensor) -> Any:
    if out.dtype != torch.int64:
        return NotImplemented
    result = argmin(self, dim, keepdim)
    return result if result is NotImplemented else write_out(out, result)


@aten_op("amin")
def amin(self: torch.Tensor, dim: Sequence[int] = (), keepdim: bool = False) -> Any:
    """Minimum over ``dim`` (``[]``: every dim); NaN wins, as in ATen."""
    return reduce_dims(self, dim, keepdim, MIN, False, self.dtype, None, None)


@aten_op("amin.out")
def amin_out(self: torch.Tensor, dim: Sequence[int] = (), keepdim: bool = False, *, out: torch.Tensor) -> Any:
    if out.dtype != self.dtype:
        return NotImplemented
    return reduce_dims(self, dim, keepdim, MIN, False, self.dtype, out, None)


def _aminmax(x: torch.Tensor, dim: int | None, keepdim: bool, outs: tuple[Any, Any] = (None, None)) -> Any:
    if any(out is not None and out.dtype != x.dtype for out in outs):
        return NotImplemented  # ATen raises for mismatched out dtypes
    if x.dtype.is_complex or (x.numel() == 0 and (dim is None or not -x.dim() <= dim < x.dim()
                                                    or x.shape[dim] == 0)):
        return NotImplemented  # ATen raises: a reduction over nothing has no minimum
    if dim is None and keepdim and x.device.type != "cpu":
        keepdim = False  # ATen's CPU kernel keeps the reduced dims here, its CUDA kernel does not
    dims = None if dim is None else (dim,)
    low = reduce_dims(x, dims, keepdim, MIN, False, x.dtype, outs[0], None)
    if low is NotImplemented:
        return NotImplemented
    return low, reduce_dims(x, dims, keepdim, MAX, False, x.dtype, outs[1], None)


@aten_op("aminmax")
def aminmax(self: torch.Tensor, *, dim: int | None = None, keepdim: bool = False) -> Any:
    """(minimum, maximum) over ``dim`` (None: every element); NaN wins, as in ATen."""
    return _aminmax(self, dim, keepdim)


@aten_op("aminmax.out")
def aminmax_out(self: torch.Tensor, *, dim: int | None = None, keepdim: bool = False, min: torch.Tensor,
                max: torch.Tensor) -> Any:
    return _aminmax(self, dim, keepdim, (min, max))
