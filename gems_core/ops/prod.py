"""prod over every dim or one dim, with ``dtype=`` and out=.

Runs on the reduction kernel of :mod:`.reduction` with its PROD op: floating inputs multiply
in float32 (float64 for float64), integer and bool inputs in int64, wrapping on overflow as
ATen does. The product of nothing is 1.
"""

from __future__ import annotations

from typing import Any

import torch

from ..registry import aten_op
from .reduction import PROD, reduce_dims


def _result_dtype(x: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    return x.dtype if x.dtype.is_floating_point or x.dtype.is_complex else torch.int64


@aten_op("prod")
def prod_all(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> Any:
    """Product of every element; bool and integer inputs multiply in int64."""
    return reduce_dims(self, None, False, PROD, False, _result_dtype(self, dtype), None, 1)


@aten_op("prod.dim_int")
def prod_dim(self: torch.Tensor, dim: int, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Any:
    """Product over ``dim``."""
    return reduce_dims(self, [dim], keepdim, PROD, False, _result_dtype(self, dtype), None, 1)


@aten_op("prod.int_out")
def prod_out(
    self: torch.Tensor, dim: int, keepdim: bool = False, *, dtype: torch.dtype | None = None, out: torch.Tensor
) -> Any:
    if dtype is not None and dtype != out.dtype:
        return NotImplemented
    return reduce_dims(self, [dim], keepdim, PROD, False, out.dtype, out, 1)
