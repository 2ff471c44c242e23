"""cumprod (with ``dtype=``, out= and in-place), cummax and cummin (values and indices, with
out=) over one dim.

Rows are read in place through the layout of :mod:`.reduction` and written to a contiguous
output. Each program scans BLOCK_M rows a tile of BLOCK_N elements at a time and combines
each tile with the running result of the tiles before (the carry), so a row of any length
takes one pass. cumprod multiplies in float32 for 16-bit floats and in int64 for integer and
bool inputs, as ATen does. cummax/cummin follow ATen's CPU kernel: NaN wins and stays, and
an element equal to the running extreme takes its place, so ties (NaNs included) report the
last index.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from .argreduce import _acc, _fill
from .reduction import REDUCTION, acc_dtype, bench_ms, index_reach, reduction_view, wrap_dims, write_out

_INT32 = 2**31 - 1
PROD, MAX, MIN = 0, 1, 2  # the OP of _scan_kernel
_PROD_OP, _MIN_OP = tl.constexpr(PROD), tl.constexpr(MIN)  # the same, as kernels read them
_BITS = {1: tl.int8, 2: tl.int16, 4: tl.int32, 8: tl.int64}  # by itemsize


@triton.jit
def _later_wins(v1, i1, v2, i2, IS_MIN: tl.constexpr):
    """The running extreme of (v1, i1) and (v2, i2): NaN first, then the greater (IS_MIN:
    smaller) value, then on ties the greater index."""
    nan1 = v1 != v1  # noqa: PLR0124 (NaN test)
    nan2 = v2 != v2  # noqa: PLR0124 (NaN test)
    if IS_MIN:
        better = v2 < v1
    else:
        better = v2 > v1
    tie = (v1 == v2) | (nan1 & nan2)
    take2 = (nan2 & ~nan1) | (better & ~nan1) | (tie & (i2 > i1))
    return tl.where(take2, v2, v1), tl.where(take2, i2, i1)


@triton.jit
def _cummax_combine(v1, i1, v2, i2):
    return _later_wins(v1, i1, v2, i2, False)


@triton.jit
def _cummin_combine(v1, i1, v2, i2):
    return _later_wins(v1, i1, v2, i2, True)


@triton.jit
def _last(y, is_last, BITS: tl.constexpr):
    """The column of ``y`` where ``is_last``, bit for bit (as integers of the width BITS)."""
    picked = tl.where(is_last, y.to(BITS, bitcast=True), 0)
    return tl.sum(picked, 1, keep_dims=True).to(BITS).to(y.dtype, bitcast=True)


@triton.jit
def _scan_kernel(
    x_ptr,  # (OUTER, INNER) kept x (N) scanned, read through strides; row m = o * INNER + i
    y_ptr,  # (M // OUT_INNER, N, OUT_INNER) contiguous: the output in the input's dim order
    index_ptr,  # like y_ptr, int64: the running extreme's index (MAX / MIN only)
    M,
    N,
    INNER,
    stride_o,
    stride_i,
    stride_n,
    OUT_INNER,
    OP: tl.constexpr,
    CAST: tl.constexpr,  # elements are rounded to this dtype first (ATen's dtype=)
    ACC: tl.constexpr,
    BITS: tl.constexpr,  # the integer type of ACC's width
    FILL: tl.constexpr,  # padding of the last tile: 1 for PROD, else a value every entry beats
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # y[m, n] = the product (OP == PROD) or running extreme over k <= n of x[m, k]
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    if INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    row_mask = rows < M
    base = (rows // INNER) * stride_o + (rows % INNER) * stride_i
    out_base = (rows // OUT_INNER) * N * OUT_INNER + rows % OUT_INNER
    # the carry: the running result at the end of the tiles before, the last column of a
    # tile's result (padding past N only follows it)
    is_last = (cols == BLOCK_N - 1)[None, :]
    carry = tl.full((BLOCK_M, 1), FILL, ACC)
    carry_index = tl.full((BLOCK_M, 1), -1, tl.int64)
    for start in range(0, N, BLOCK_N):
        n = start + cols
        mask = row_mask[:, None] & (n < N)[None, :]
        x = tl.load(x_ptr + base[:, None] + n[None, :] * stride_n, mask=mask, other=FILL)
        x = x.to(CAST).to(ACC)
        out = out_base[:, None] + n[None, :] * OUT_INNER
        if OP == _PROD_OP:
            y = tl.cumprod(x, 1) * carry
        else:
            index = tl.broadcast_to(n[None, :].to(tl.int64), (BLOCK_M, BLOCK_N))
            if OP == _MIN_OP:
                y, index = tl.associative_scan((x, index), 1, _cummin_combine)
                y, index = _cummin_combine(carry, carry_index, y, index)
            else:
                y, index = tl.associative_scan((x, index), 1, _cummax_combine)
                y, index = _cummax_combine(carry, carry_index, y, index)
            tl.store(index_ptr + out, index, mask=mask)
            carry_index = tl.sum(tl.where(is_last, index, 0), 1, keep_dims=True)
        tl.store(y_ptr + out, y.to(y_ptr.dtype.element_ty), mask=mask)
        carry = _last(y, is_last, BITS)


_launch = LaunchCache(_scan_kernel, name="scan")


def _run(x: torch.Tensor, dim: int, y: torch.Tensor, indices: torch.Tensor | None, op: int) -> None:
    """Scan ``x`` (non-empty, at least 1-d) along ``dim`` into the contiguous ``y`` (and
    ``indices`` for MAX / MIN)."""
    n = x.size(dim)
    m = x.numel() // n
    out_inner = y.stride(dim)
    source, (inner, stride_o, stride_i, stride_n) = reduction_view(x, (dim,))
    if op == PROD:
        acc, cast, fill = acc_dtype(y.dtype), y.dtype, 1
    else:
        acc, cast = _acc(x.dtype), x.dtype
        fill = _fill(x.dtype, op == MIN)  # loses to every entry, so the carry starts empty
    if acc.is_floating_point:
        fill = float(fill)
    big = max(index_reach(m, n, inner, stride_o, stride_i, stride_n), y.numel()) > _INT32

    def launch(config: KernelConfig) -> None:
        block_m = min(config.params["BLOCK_M"], next_power_of_2(m))
        block_n = min(config.params["BLOCK_N"], next_power_of_2(n))
        _launch((cdiv(m, block_m),), source, y, y if indices is None else indices, m, n, inner, stride_o,
                stride_i, stride_n, out_inner, config=config, options=REDUCTION.options(), OP=op,
                CAST=TL_DTYPES[cast], ACC=TL_DTYPES[acc], BITS=_BITS[acc.itemsize], FILL=fill, INT64=big,
                BLOCK_M=block_m, BLOCK_N=block_n)

    key = ("scan", op, str(x.dtype), str(y.dtype), m.bit_length(), n.bit_length())
    launch(REDUCTION.choose(key, lambda config: bench_ms(lambda: launch(config))))


def _scan(x: torch.Tensor, dim: int, result: torch.dtype, op: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(values, indices: None for PROD) of the scan of ``x`` along ``dim``, in x's shape."""
    dims = wrap_dims([dim], x.dim())
    source = x if x.dim() else x.reshape(1)
    y = torch.empty(source.shape, dtype=result, device=x.device)
    indices = None if op == PROD else torch.empty(source.shape, dtype=torch.int64, device=x.device)
    if y.numel():
        _run(source, dims[0] if dims else 0, y, indices, op)
    return y.view(x.shape), None if indices is None else indices.view(x.shape)


def _cumprod(x: torch.Tensor, dim: int, dtype: torch.dtype | None, out: torch.Tensor | None = None) -> Any:
    result = dtype if dtype is not None else (x.dtype if x.dtype.is_floating_point else torch.int64)
    if x.dtype not in TL_DTYPES or result not in TL_DTYPES or result == torch.bool:
        return NotImplemented
    if out is not None and out.dtype != result:
        return NotImplemented
    y = _scan(x, dim, result, PROD)[0]
    return y if out is None else write_out(out, y)


@aten_op("cumprod")
def cumprod(self: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> Any:
    """Running product along ``dim``; bool and integer inputs multiply in int64."""
    return _cumprod(self, dim, dtype)


@aten_op("cumprod.out")
def cumprod_out(self: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None, out: torch.Tensor) -> Any:
    return _cumprod(self, dim, dtype, out)


@aten_op("cumprod_")
def cumprod_inplace(self: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> Any:
    if dtype is not None and dtype != self.dtype:
        return NotImplemented  # ATen's in-place form keeps self's dtype
    result = _cumprod(self, dim, self.dtype)
    return result if result is NotImplemented else self.copy_(result)


def _cum_extreme(x: torch.Tensor, dim: int, is_min: bool, outs: tuple[Any, Any] = (None, None)) -> Any:
    values_out, indices_out = outs
    if values_out is not None and (values_out.dtype != x.dtype or indices_out.dtype != torch.int64):
        return NotImplemented  # ATen raises for mismatched out dtypes
    if x.dtype not in TL_DTYPES:
        return NotImplemented
    if x.dim() == 0 and dim not in (-1, 0):
        name = "cummin" if is_min else "cummax"
        raise IndexError(f"{name}(): Expected reduction dim -1 or 0 for scalar but got {dim}")
    values, indices = _scan(x, dim, x.dtype, MIN if is_min else MAX)
    if values_out is None:
        return values, indices
    return write_out(values_out, values), write_out(indices_out, indices)


@aten_op("cummax")
def cummax(self: torch.Tensor, dim: int) -> Any:
    """(values, indices) of the running maximum along ``dim``; NaN wins, ties take the
    last index."""
    return _cum_extreme(self, dim, False)


@aten_op("cummax.out")
def cummax_out(self: torch.Tensor, dim: int, *, values: torch.Tensor, indices: torch.Tensor) -> Any:
    return _cum_extreme(self, dim, False, (values, indices))


@aten_op("cummin")
def cummin(self: torch.Tensor, dim: int) -> Any:
    """(values, indices) of the running minimum along ``dim``; NaN wins, ties take the
    last index."""
    return _cum_extreme(self, dim, True)


@aten_op("cummin.out")
def cummin_out(self: torch.Tensor, dim: int, *, values: torch.Tensor, indices: torch.Tensor) -> Any:
    return _cum_extreme(self, dim, True, (values, indices))
