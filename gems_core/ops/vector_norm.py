"""linalg_vector_norm over any set of dims, every ``ord``, with ``dtype=`` and out=.

Each element becomes a term of the norm (|x|^2 for ord 2, |x| for 1 and +-inf, x != 0 for
0, |x|^p otherwise), terms are summed (or, for +-inf, maxed/minned, NaN winning) over the
reduced dims read through the layout of :mod:`.reduction`, and the total is finished
(sqrt, or ^(1/p)). A short output of a long reduction splits each row over several
programs; the second pass combines the partial totals and finishes them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from .reduction import (
    REDUCTION,
    acc_dtype,
    bench_ms,
    index_reach,
    max_nan_combine,
    min_nan_combine,
    out_shape,
    reduction_view,
    split_plan,
    wrap_dims,
    write_out,
)

_INT32 = 2**31 - 1
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# TERM: how an element becomes a term of the norm
_AS_IS, _ABS, _SQUARE, _NONZERO, _POWER = 0, 1, 2, 3, 4
# COMBINE: how terms are combined;  FINISH: what is done to the total
_SUM, _MAX, _MIN = 0, 1, 2
_NONE, _SQRT, _ROOT = 0, 1, 2


@triton.jit
def _vector_norm_kernel(
    x_ptr,  # (OUTER, INNER) kept x (N) reduced, read through strides; row m = o * INNER + i
    out_ptr,  # (M, splits) contiguous
    M,
    N,
    INNER,
    stride_o,
    stride_i,
    stride_n,
    cols_per_split,
    splits,
    p,
    inv_p,
    TERM: tl.constexpr,
    COMBINE: tl.constexpr,
    FINISH: tl.constexpr,
    CAST: tl.constexpr,  # elements are rounded to this dtype first (ATen's dtype=)
    ACC: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # out[m, s] = FINISH(COMBINE over n in split s of TERM(x[m, n]))
    pid = tl.program_id(0)
    split = tl.program_id(1)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    col_range = tl.arange(0, BLOCK_N)
    if INT64:
        rows = rows.to(tl.int64)
        col_range = col_range.to(tl.int64)
    row_mask = rows < M
    base = (rows // INNER) * stride_o + (rows % INNER) * stride_i
    start = split * cols_per_split
    identity = 0.0
    if COMBINE == 2:
        identity = float("inf")
    acc = tl.full((BLOCK_M, BLOCK_N), identity, ACC)
    for offset in range(0, cols_per_split, BLOCK_N):
        cols = start + offset + col_range
        mask = row_mask[:, None] & (cols < N)[None, :]
        x = tl.load(x_ptr + base[:, None] + cols[None, :] * stride_n, mask=mask, other=0.0)
        x = x.to(CAST).to(ACC)
        if TERM == 1:
            x = tl.abs(x)
        elif TERM == 2:
            x = x * x
        elif TERM == 3:
            x = (x != 0).to(ACC)
        elif TERM == 4:
            x = tl.exp2(tl.log2(tl.abs(x)) * p)
        x = tl.where(mask, x, identity)
        if COMBINE == 0:
            acc += x
        elif COMBINE == 1:
            acc = max_nan_combine(acc, x)
        else:
            acc = min_nan_combine(acc, x)
    # tl.max / tl.min leave NaN out: it is put back for rows that have one
    if COMBINE == 0:
        total = tl.sum(acc, 1)
    else:
        nan = acc != acc  # noqa: PLR0124 (NaN test)
        has_nan = tl.max(nan.to(tl.int32), 1) > 0
        if COMBINE == 1:
            total = tl.max(tl.where(nan, 0.0, acc), 1)
        else:
            total = tl.min(tl.where(nan, float("inf"), acc), 1)
        total = tl.where(has_nan, float("nan"), total)
    if FINISH == 1:
        total = tl.sqrt(total)
    elif FINISH == 2:
        total = tl.exp2(tl.log2(total) * inv_p)
    tl.store(out_ptr + rows * splits + split, total.to(out_ptr.dtype.element_ty), mask=row_mask)


_launch = LaunchCache(_vector_norm_kernel, name="vector_norm")


def _plan(ord: float) -> tuple[int, int, int]:
    """(TERM, COMBINE, FINISH) for a norm of order ``ord``."""
    if ord == 2:
        return _SQUARE, _SUM, _SQRT
    if ord == 1:
        return _ABS, _SUM, _NONE
    if ord == math.inf:
        return _ABS, _MAX, _NONE
    if ord == -math.inf:
        return _ABS, _MIN, _NONE
    if ord == 0:
        return _NONZERO, _SUM, _NONE
    return _POWER, _SUM, _ROOT


def _run(x: torch.Tensor, dims: tuple[int, ...], out: torch.Tensor, ord: float, cast: torch.dtype) -> None:
    n = math.prod(x.size(d) for d in dims)
    m = out.numel()
    source, (inner, stride_o, stride_i, stride_n) = reduction_view(x, dims)
    acc = acc_dtype(cast)
    term, combine, finish = _plan(ord)
    p = float(ord) if term == _POWER else 1.0
    inv_p = 1.0 / p
    big = index_reach(m, n, inner, stride_o, stride_i, stride_n) > _INT32

    def launch(config: KernelConfig) -> None:
        block_m, block_n, programs, splits, cols_per_split = split_plan(
            m, n, config.params["BLOCK_M"], config.params["BLOCK_N"], x.device
        )
        common = {"config": config, "options": REDUCTION.options(), "COMBINE": combine,
                  "ACC": TL_DTYPES[acc], "BLOCK_M": block_m}
        partial = out if splits == 1 else torch.empty((m, splits), dtype=acc, device=x.device)
        _launch((programs, splits), source, partial, m, n, inner, stride_o, stride_i, stride_n,
                cols_per_split, splits, p, inv_p, TERM=term, FINISH=finish if splits == 1 else _NONE,
                CAST=TL_DTYPES[cast], INT64=big or m * splits > _INT32, BLOCK_N=block_n, **common)
        if splits > 1:  # combine and finish the partial totals of each row
            width = next_power_of_2(splits)
            _launch((programs, 1), partial, out, m, splits, 1, splits, 0, 1, width, 1, p, inv_p,
                    TERM=_AS_IS, FINISH=finish, CAST=TL_DTYPES[acc], INT64=m * splits > _INT32,
                    BLOCK_N=width, **common)

    key = ("vector_norm", term, combine, str(x.dtype), m.bit_length(), n.bit_length(), stride_n == 1)
    launch(REDUCTION.choose(key, lambda config: bench_ms(lambda: launch(config))))


def _vector_norm(
    x: torch.Tensor, ord: float, dim: Sequence[int] | None, keepdim: bool, dtype: torch.dtype | None,
    out: torch.Tensor | None = None,
) -> Any:
    result = x.dtype if dtype is None else dtype
    if x.dtype not in _FLOATS or result not in _FLOATS or torch.promote_types(x.dtype, result) != result:
        return NotImplemented  # ATen raises for integers and for a narrowing dtype=
    if out is not None and out.dtype != result:
        return NotImplemented
    ord = float(ord)
    dims = wrap_dims(dim, x.dim())
    if x.numel() == 0 and (ord < 0 or math.isinf(ord)):
        return NotImplemented  # ATen raises: that norm has no identity
    shape = out_shape(x, dims, keepdim)
    direct = out is not None and list(out.shape) == shape and out.is_contiguous()
    target = out if direct else torch.empty(shape, dtype=result, device=x.device)
    if target.numel():
        if x.numel() == 0:
            target.zero_()
        else:
            _run(x, dims, target, ord, result)
    if out is None or direct:
        return target
    return write_out(out, target)


@aten_op("linalg_vector_norm")
def vector_norm(
    self: torch.Tensor, ord: float = 2, dim: Sequence[int] | None = None, keepdim: bool = False, *,
    dtype: torch.dtype | None = None,
) -> Any:
    """The ``ord``-norm over ``dim`` (None: every dim): (sum |x|^ord)^(1/ord), max |x| for
    inf, min |x| for -inf, the count of non-zeros for 0."""
    return _vector_norm(self, ord, dim, keepdim, dtype)


@aten_op("linalg_vector_norm.out")
def vector_norm_out(
    self: torch.Tensor, ord: float = 2, dim: Sequence[int] | None = None, keepdim: bool = False, *,
    dtype: torch.dtype | None = None, out: torch.Tensor,
) -> Any:
    return _vector_norm(self, ord, dim, keepdim, dtype, out)
