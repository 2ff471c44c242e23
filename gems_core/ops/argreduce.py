"""argmax, and max/min over every dim (the value) or one dim (values and indices), with
their out= overloads.

One kernel keeps, per lane, the best (value, index) pair seen so far, then takes the best
value over the lanes and the smallest index holding it: the larger (for min the smaller)
value wins, NaN beats any number, and equal values (NaNs included) go to the smaller index,
so ties return the first index as in ATen. A short output of a long row splits the row
over several programs; a second pass reduces their (value, index) partials by the same
rule. max()/min() of every element take the plain reduction kernel of :mod:`.reduction`.
"""

from __future__ import annotations

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
    MAX,
    MIN,
    REDUCTION,
    bench_ms,
    index_reach,
    reduce_dims,
    reduction_view,
    split_plan,
    wrap_dims,
    write_out,
)

_INT32 = 2**31 - 1
_NO_INDEX = tl.constexpr(2**63 - 1)  # index of a masked lane: loses every tie


@triton.jit
def _pick(v1, i1, v2, i2, first_wins):
    nan1 = v1 != v1  # noqa: PLR0124 (NaN test)
    nan2 = v2 != v2  # noqa: PLR0124 (NaN test)
    tie = (v1 == v2) | (nan1 & nan2)
    take_first = first_wins | (nan1 & ~nan2) | (tie & (i1 < i2))
    return tl.where(take_first, v1, v2), tl.where(take_first, i1, i2)


@triton.jit
def argmax_combine(v1, i1, v2, i2):
    return _pick(v1, i1, v2, i2, v1 > v2)


@triton.jit
def argmin_combine(v1, i1, v2, i2):
    return _pick(v1, i1, v2, i2, v1 < v2)


@triton.jit
def _arg_reduce_kernel(
    x_ptr,  # (OUTER, INNER) kept x (N) reduced, read through strides; row m = o * INNER + i
    index_in_ptr,  # (M, N) contiguous int64 when GATHER: the index each value of x stands for
    values_ptr,  # (M, splits) contiguous
    indices_ptr,  # (M, splits) contiguous int64
    M,
    N,
    INNER,
    stride_o,
    stride_i,
    stride_n,
    cols_per_split,
    splits,
    IS_MIN: tl.constexpr,
    GATHER: tl.constexpr,  # second pass: indices come from index_in_ptr
    ACC: tl.constexpr,
    FILL: tl.constexpr,  # loses to every value (NaN aside)
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # (values, indices)[m, s] = best (value, first index) over n in split s of x[m, n]
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
    best_v = tl.full((BLOCK_M, BLOCK_N), FILL, ACC)
    best_i = tl.full((BLOCK_M, BLOCK_N), _NO_INDEX, tl.int64)
    for offset in range(0, cols_per_split, BLOCK_N):
        cols = start + offset + col_range
        mask = row_mask[:, None] & (cols < N)[None, :]
        x = tl.load(x_ptr + base[:, None] + cols[None, :] * stride_n, mask=mask, other=FILL).to(ACC)
        if GATHER:
            idx = tl.load(index_in_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=_NO_INDEX)
        else:
            idx = tl.where(mask, cols[None, :].to(tl.int64), _NO_INDEX)
        if IS_MIN:
            best_v, best_i = argmin_combine(best_v, best_i, x, idx)
        else:
            best_v, best_i = argmax_combine(best_v, best_i, x, idx)
    # across lanes: the best value (NaN where a lane holds one), then the smallest index
    # of the lanes holding it; tl.max / tl.min leave NaN out, so NaN is handled apart
    lane_nan = best_v != best_v  # noqa: PLR0124 (NaN test)
    row_nan = tl.max(lane_nan.to(tl.int32), 1) > 0
    if IS_MIN:
        value = tl.min(tl.where(lane_nan, FILL, best_v), 1)
    else:
        value = tl.max(tl.where(lane_nan, FILL, best_v), 1)
    holds = tl.where(row_nan[:, None], lane_nan, best_v == value[:, None])
    index = tl.min(tl.where(holds, best_i, _NO_INDEX), 1)
    if best_v.dtype.is_floating():
        value = tl.where(row_nan, float("nan"), value)
    tl.store(values_ptr + rows * splits + split, value.to(values_ptr.dtype.element_ty), mask=row_mask)
    tl.store(indices_ptr + rows * splits + split, index, mask=row_mask)


_launch = LaunchCache(_arg_reduce_kernel, name="arg_reduce")


def _acc(dtype: torch.dtype) -> torch.dtype:
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return torch.int8 if dtype == torch.bool else dtype


def _fill(dtype: torch.dtype, is_min: bool) -> Any:
    if dtype.is_floating_point:
        return float("inf") if is_min else float("-inf")
    if dtype == torch.bool:
        return int(is_min)
    info = torch.iinfo(dtype)
    return info.max if is_min else info.min


def _arg_reduce(x: torch.Tensor, dim: int, values: torch.Tensor, indices: torch.Tensor, is_min: bool) -> None:
    """Reduce ``x`` (N > 0) over ``dim`` into the contiguous ``values`` and ``indices``."""
    n = x.size(dim)
    m = indices.numel()
    source, (inner, stride_o, stride_i, stride_n) = reduction_view(x, (dim,))
    acc = _acc(x.dtype)
    constexprs = {"IS_MIN": is_min, "ACC": TL_DTYPES[acc], "FILL": _fill(x.dtype, is_min)}
    big = index_reach(m, n, inner, stride_o, stride_i, stride_n) > _INT32

    def launch(config: KernelConfig) -> None:
        block_m, block_n, programs, splits, cols_per_split = split_plan(
            m, n, config.params["BLOCK_M"], config.params["BLOCK_N"], x.device
        )
        common = {"config": config, "options": REDUCTION.options(), "BLOCK_M": block_m, **constexprs}
        if splits == 1:
            _launch((programs, 1), source, indices, values, indices, m, n, inner, stride_o, stride_i,
                    stride_n, cols_per_split, 1, GATHER=False, INT64=big, BLOCK_N=block_n, **common)
            return
        part_v = torch.empty((m, splits), dtype=acc, device=x.device)
        part_i = torch.empty((m, splits), dtype=torch.int64, device=x.device)
        _launch((programs, splits), source, part_i, part_v, part_i, m, n, inner, stride_o, stride_i,
                stride_n, cols_per_split, splits, GATHER=False, INT64=big or m * splits > _INT32,
                BLOCK_N=block_n, **common)
        width = next_power_of_2(splits)
        _launch((programs, 1), part_v, part_i, values, indices, m, splits, 1, splits, 0, 1, width, 1,
                GATHER=True, INT64=m * splits > _INT32, BLOCK_N=width, **common)

    key = ("arg", is_min, str(x.dtype), m.bit_length(), n.bit_length(), stride_n == 1)
    launch(REDUCTION.choose(key, lambda config: bench_ms(lambda: launch(config))))


def _with_indices(
    x: torch.Tensor, dim: int | None, keepdim: bool, is_min: bool, want_values: bool
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(values, indices) over ``dim`` (None: the flattened input); None where ATen must
    answer (an unsupported dtype, or a reduction over nothing, which raises there)."""
    if x.dtype not in TL_DTYPES:
        return None
    if dim is None:
        shape = [1] * x.dim() if keepdim else []
        source, reduced = x.reshape(-1), 0
    else:
        dims = wrap_dims([dim], x.dim())
        reduced = dims[0] if dims else 0
        shape = [1 if d == reduced and keepdim else s for d, s in enumerate(x.shape) if d != reduced or keepdim]
        source = x if x.dim() else x.reshape(1)
    if source.size(reduced) == 0:
        return None
    values = torch.empty(shape if want_values else (0,), dtype=x.dtype, device=x.device)
    indices = torch.empty(shape, dtype=torch.int64, device=x.device)
    if indices.numel():
        _arg_reduce(source, reduced, values if want_values else indices, indices, is_min)
    return values, indices


@aten_op("argmax")
def argmax(self: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    """Index of the largest value over ``dim`` (None: of the flattened input); the first
    one on ties, the first NaN where there is one."""
    if self.dtype == torch.bool:
        return NotImplemented  # ATen raises: argmax does not support bool
    result = _with_indices(self, dim, keepdim, False, want_values=False)
    return NotImplemented if result is None else result[1]


@aten_op("argmax.out")
def argmax_out(self: torch.Tensor, dim: int | None = None, keepdim: bool = False, *, out: torch.Tensor) -> Any:
    if out.dtype != torch.int64:
        return NotImplemented
    result = argmax(self, dim, keepdim)
    return result if result is NotImplemented else write_out(out, result)


def _dim_op(x: torch.Tensor, dim: int, keepdim: bool, is_min: bool, outs: tuple[Any, Any] = (None, None)) -> Any:
    values_out, indices_out = outs
    if values_out is not None and (values_out.dtype != x.dtype or indices_out.dtype != torch.int64):
        return NotImplemented
    result = _with_indices(x, dim, keepdim, is_min, want_values=True)
    if result is None:
        return NotImplemented
    if values_out is None:
        return result
    return write_out(values_out, result[0]), write_out(indices_out, result[1])


@aten_op("max.dim")
def max_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
    """(values, indices) of the maximum over ``dim``; NaN wins, ties take the first index."""
    return _dim_op(self, dim, keepdim, False)


@aten_op("max.dim_max")
def max_dim_out(self: torch.Tensor, dim: int, keepdim: bool = False, *, max: torch.Tensor,
                max_values: torch.Tensor) -> Any:
    return _dim_op(self, dim, keepdim, False, (max, max_values))


@aten_op("min.dim")
def min_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
    """(values, indices) of the minimum over ``dim``; NaN wins, ties take the first index."""
    return _dim_op(self, dim, keepdim, True)


@aten_op("min.dim_min")
def min_dim_out(self: torch.Tensor, dim: int, keepdim: bool = False, *, min: torch.Tensor,
                min_indices: torch.Tensor) -> Any:
    return _dim_op(self, dim, keepdim, True, (min, min_indices))


@aten_op("max")
def max_all(self: torch.Tensor) -> Any:
    """The largest element (NaN if any); ATen raises for an empty input."""
    return reduce_dims(self, None, False, MAX, False, self.dtype, None, None)


@aten_op("max.unary_out")
def max_all_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    if out.dtype != self.dtype:
        return NotImplemented
    return reduce_dims(self, None, False, MAX, False, self.dtype, out, None)


@aten_op("min")
def min_all(self: torch.Tensor) -> Any:
    """The smallest element (NaN if any); ATen raises for an empty input."""
    return reduce_dims(self, None, False, MIN, False, self.dtype, None, None)


@aten_op("min.unary_out")
def min_all_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    if out.dtype != self.dtype:
        return NotImplemented
    return reduce_dims(self, None, False, MIN, False, self.dtype, out, None)
