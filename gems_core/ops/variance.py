"""var_mean, var and std over any set of dims, with Bessel-style ``correction``.

Rows are read through the layout of :mod:`.reduction` (reduced dims as one strided axis).
Each row, or each split of a long row, is read twice: once for its mean, once for the sum
of squared deviations from it (more accurate than a running sum of squares). Split
partials are merged exactly: ``mean = sum(n_s mean_s) / N``,
``m2 = sum(m2_s + n_s (mean_s - mean)^2)``. ``var = m2 / max(N - correction, 0)``.
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
    out_shape,
    reduction_view,
    split_plan,
    wrap_dims,
)

_INT32 = 2**31 - 1
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def _moments_kernel(
    x_ptr,  # (OUTER, INNER) kept x (N) reduced, read through strides; row m = o * INNER + i
    first_ptr,  # (M, splits) contiguous: var when FINAL, else the split's mean
    second_ptr,  # (M, splits) contiguous: mean when FINAL, else the split's m2
    M,
    N,
    INNER,
    stride_o,
    stride_i,
    stride_n,
    cols_per_split,
    splits,
    divisor,
    FINAL: tl.constexpr,
    ACC: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # over n in split s of row m: mean_s = sum(x) / n_s,  m2_s = sum((x - mean_s)^2)
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
    count = tl.minimum(cols_per_split, N - start).to(ACC)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, ACC)
    for offset in range(0, cols_per_split, BLOCK_N):
        cols = start + offset + col_range
        mask = row_mask[:, None] & (cols < N)[None, :]
        acc += tl.load(x_ptr + base[:, None] + cols[None, :] * stride_n, mask=mask, other=0.0).to(ACC)
    mean = tl.sum(acc, 1) / count
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, ACC)
    for offset in range(0, cols_per_split, BLOCK_N):
        cols = start + offset + col_range
        mask = row_mask[:, None] & (cols < N)[None, :]
        x = tl.load(x_ptr + base[:, None] + cols[None, :] * stride_n, mask=mask, other=0.0).to(ACC)
        centered = tl.where(mask, x - mean[:, None], 0.0)
        acc += centered * centered
    m2 = tl.sum(acc, 1)
    out = rows * splits + split
    if FINAL:
        tl.store(first_ptr + out, (m2 / divisor).to(first_ptr.dtype.element_ty), mask=row_mask)
        tl.store(second_ptr + out, mean.to(second_ptr.dtype.element_ty), mask=row_mask)
    else:
        tl.store(first_ptr + out, mean, mask=row_mask)
        tl.store(second_ptr + out, m2, mask=row_mask)


@triton.jit
def _merge_moments_kernel(
    mean_ptr,  # (M, S) contiguous: each split's mean
    m2_ptr,  # (M, S) contiguous: each split's m2
    var_ptr,  # (M,)
    out_mean_ptr,  # (M,)
    M,
    N,
    S,
    cols_per_split,
    divisor,
    ACC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    # mean = sum(n_s mean_s) / N,   m2 = sum(m2_s + n_s (mean_s - mean)^2)
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    row_mask = rows < M
    mask = row_mask[:, None] & (s < S)[None, :]
    offsets = rows[:, None] * S + s[None, :]
    n_s = tl.where(mask, tl.minimum(cols_per_split, N - s * cols_per_split)[None, :], 0).to(ACC)
    means = tl.load(mean_ptr + offsets, mask=mask, other=0.0)
    mean = tl.sum(n_s * means, 1) / N
    deviation = tl.where(mask, means - mean[:, None], 0.0)
    m2 = tl.sum(tl.load(m2_ptr + offsets, mask=mask, other=0.0) + n_s * deviation * deviation, 1)
    tl.store(var_ptr + rows, (m2 / divisor).to(var_ptr.dtype.element_ty), mask=row_mask)
    tl.store(out_mean_ptr + rows, mean.to(out_mean_ptr.dtype.element_ty), mask=row_mask)


_moments = LaunchCache(_moments_kernel, name="moments")
_merge = LaunchCache(_merge_moments_kernel, name="merge_moments")


def _run(x: torch.Tensor, dims: tuple[int, ...], var: torch.Tensor, mean: torch.Tensor, divisor: float) -> None:
    n = math.prod(x.size(d) for d in dims)
    m = var.numel()
    source, (inner, stride_o, stride_i, stride_n) = reduction_view(x, dims)
    acc = acc_dtype(x.dtype)
    big = index_reach(m, n, inner, stride_o, stride_i, stride_n) > _INT32

    def launch(config: KernelConfig) -> None:
        block_m, block_n, programs, splits, cols_per_split = split_plan(
            m, n, config.params["BLOCK_M"], config.params["BLOCK_N"], x.device
        )
        common = {"config": config, "options": REDUCTION.options(), "ACC": TL_DTYPES[acc], "BLOCK_M": block_m}
        if splits == 1:
            _moments((programs, 1), source, var, mean, m, n, inner, stride_o, stride_i, stride_n,
                     cols_per_split, 1, divisor, FINAL=True, INT64=big, BLOCK_N=block_n, **common)
            return
        part_mean = torch.empty((m, splits), dtype=acc, device=x.device)
        part_m2 = torch.empty((m, splits), dtype=acc, device=x.device)
        _moments((programs, splits), source, part_mean, part_m2, m, n, inner, stride_o, stride_i, stride_n,
                 cols_per_split, splits, divisor, FINAL=False, INT64=big or m * splits > _INT32,
                 BLOCK_N=block_n, **common)
        _merge((programs,), part_mean, part_m2, var, mean, m, n, splits, cols_per_split, divisor,
               options=common["options"], ACC=common["ACC"], BLOCK_M=block_m,
               BLOCK_S=next_power_of_2(splits))

    key = ("moments", str(x.dtype), m.bit_length(), n.bit_length(), stride_n == 1)
    launch(REDUCTION.choose(key, lambda config: bench_ms(lambda: launch(config))))


def _var_mean(
    x: torch.Tensor, dim: Sequence[int] | None, correction: float | None, keepdim: bool
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(var, mean) in the input dtype; None where ATen must answer (non-float inputs)."""
    if x.dtype not in _FLOATS:
        return None
    dims = wrap_dims(dim, x.dim())
    shape = out_shape(x, dims, keepdim)
    var = torch.empty(shape, dtype=x.dtype, device=x.device)
    mean = torch.empty(shape, dtype=x.dtype, device=x.device)
    if var.numel():
        if x.numel() == 0:
            var.fill_(float("nan"))
            mean.fill_(float("nan"))
        else:
            n = math.prod(x.size(d) for d in dims)
            divisor = max(n - (1.0 if correction is None else float(correction)), 0.0)
            _run(x, dims, var, mean, divisor)
    return var, mean


@aten_op("var_mean.correction")
def var_mean(
    self: torch.Tensor, dim: Sequence[int] | None = None, *, correction: float | None = None,
    keepdim: bool = False,
) -> Any:
    """(var, mean) over ``dim`` (None or []: every dim); ``correction`` defaults to 1."""
    result = _var_mean(self, dim, correction, keepdim)
    return NotImplemented if result is None else result


@aten_op("var.correction")
def var(
    self: torch.Tensor, dim: Sequence[int] | None = None, *, correction: float | None = None,
    keepdim: bool = False,
) -> Any:
    result = _var_mean(self, dim, correction, keepdim)
    return NotImplemented if result is None else result[0]


@aten_op("std.correction")
def std(
    self: torch.Tensor, dim: Sequence[int] | None = None, *, correction: float | None = None,
    keepdim: bool = False,
) -> Any:
    result = _var_mean(self, dim, correction, keepdim)
    return NotImplemented if result is None else result[0].sqrt_()
