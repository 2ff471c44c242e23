"""all and any over every dim, one dim or a list of dims, with their out= overloads.

Both run on the reduction kernel of :mod:`.reduction`: each element is first rounded to bool
(non-zero, NaN included, is true), then ``all`` takes the minimum and ``any`` the maximum
over the reduced dims. Results are bool, or uint8 for a uint8 input, as in ATen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..codegen.pointwise import TL_DTYPES
from ..registry import aten_op
from .reduction import MAX, MIN, out_shape, reduce_into, wrap_dims, write_out


def _result_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.uint8 if x.dtype == torch.uint8 else torch.bool


def _logical(
    x: torch.Tensor, dim: int | Sequence[int] | None, keepdim: bool, op: int,
    out: torch.Tensor | None = None,
) -> Any:
    if x.dtype not in TL_DTYPES:
        return NotImplemented
    result = _result_dtype(x)
    if out is not None and out.dtype != result:
        return NotImplemented  # ATen decides what a differently typed out= means
    # an explicit empty list reduces nothing (all.dims), unlike sum's "every dim"
    dims = () if isinstance(dim, Sequence) and len(dim) == 0 else wrap_dims(dim, x.dim())
    shape = out_shape(x, dims, keepdim)
    direct = out is not None and list(out.shape) == shape and out.is_contiguous()
    target = out if direct else torch.empty(shape, dtype=result, device=x.device)
    if target.numel():
        if x.numel() == 0:
            target.fill_(op == MIN)  # all() of nothing is true, any() false
        else:
            reduce_into(x, dims, target, op, False, torch.bool, torch.int8)
    if out is None or direct:
        return target
    return write_out(out, target)


@aten_op("all")
def all_all(self: torch.Tensor) -> torch.Tensor:
    """True where every element is non-zero (an empty input: True)."""
    return _logical(self, None, False, MIN)


@aten_op("all.dim", "all.dims")
def all_dim(self: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> torch.Tensor:
    return _logical(self, dim, keepdim, MIN)


@aten_op("all.out", "all.dims_out")
def all_out(
    self: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, out: torch.Tensor
) -> torch.Tensor:
    return _logical(self, dim, keepdim, MIN, out)


@aten_op("all.all_out")
def all_all_out(self: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return _logical(self, None, False, MIN, out)


@aten_op("any")
def any_all(self: torch.Tensor) -> torch.Tensor:
    """True where some element is non-zero (an empty input: False)."""
    return _logical(self, None, False, MAX)


@aten_op("any.dim", "any.dims")
def any_dim(self: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> torch.Tensor:
    return _logical(self, dim, keepdim, MAX)


@aten_op("any.out", "any.dims_out")
def any_out(
    self: torch.Tensor, dim: int | Sequence[int] | None = None, keepdim: bool = False, *, out: torch.Tensor
) -> torch.Tensor:
    return _logical(self, dim, keepdim, MAX, out)


@aten_op("any.all_out")
def any_all_out(self: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return _logical(self, None, False, MAX, out)
