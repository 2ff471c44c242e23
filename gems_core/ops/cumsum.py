"""cumsum over one dim, with ``dtype=`` and out=.

Rows along ``dim`` are read through the layout of :mod:`.reduction` (so a transposed or
sliced input is scanned in place) and written to a contiguous output. Each program scans
BLOCK_M rows a tile of BLOCK_N elements at a time, adding the running total of the tiles
before (the carry), so a row of any length takes one pass. Floating inputs accumulate in
float32 (float64 for float64); integer and bool inputs default to int64, as in ATen.
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
from .reduction import (
    REDUCTION,
    acc_dtype,
    bench_ms,
    index_reach,
    reduction_view,
    wrap_dims,
    write_out,
)

_INT32 = 2**31 - 1


@triton.jit
def _cumsum_kernel(
    x_ptr,  # (OUTER, INNER) kept x (N) scanned, read through strides; row m = o * INNER + i
    y_ptr,  # (M // OUT_INNER, N, OUT_INNER) contiguous: the output in the input's dim order
    M,
    N,
    INNER,
    stride_o,
    stride_i,
    stride_n,
    OUT_INNER,
    CAST: tl.constexpr,  # elements are rounded to this dtype first (ATen's dtype=)
    ACC: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # y[m, n] = sum over k <= n of x[m, k]
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    if INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    row_mask = rows < M
    base = (rows // INNER) * stride_o + (rows % INNER) * stride_i
    out_base = (rows // OUT_INNER) * N * OUT_INNER + rows % OUT_INNER
    carry = tl.full((BLOCK_M,), 0, ACC)
    for start in range(0, N, BLOCK_N):
        mask = row_mask[:, None] & ((start + cols) < N)[None, :]
        x = tl.load(x_ptr + base[:, None] + (start + cols)[None, :] * stride_n, mask=mask, other=0)
        x = x.to(CAST).to(ACC)
        y = tl.cumsum(x, 1) + carry[:, None]
        tl.store(y_ptr + out_base[:, None] + (start + cols)[None, :] * OUT_INNER,
                 y.to(y_ptr.dtype.element_ty), mask=mask)
        # a select, not a bare `carry += sum`: Triton 3.6's thread-locality pass asserts on a
        # loop-carried sum whose final value is never used
        carry = tl.where(row_mask, carry + tl.sum(x, 1), carry)


_launch = LaunchCache(_cumsum_kernel, name="cumsum")


def _run(x: torch.Tensor, dim: int, y: torch.Tensor) -> None:
    n = x.size(dim)
    m = x.numel() // n
    out_inner = y.stride(dim) if y.dim() else 1
    source, (inner, stride_o, stride_i, stride_n) = reduction_view(x, (dim,))
    acc = acc_dtype(y.dtype)
    big = max(index_reach(m, n, inner, stride_o, stride_i, stride_n), y.numel()) > _INT32

    def launch(config: KernelConfig) -> None:
        block_m = min(config.params["BLOCK_M"], next_power_of_2(m))
        block_n = min(config.params["BLOCK_N"], next_power_of_2(n))
        _launch((cdiv(m, block_m),), source, y, m, n, inner, stride_o, stride_i, stride_n, out_inner,
                config=config, options=REDUCTION.options(), CAST=TL_DTYPES[y.dtype], ACC=TL_DTYPES[acc],
                INT64=big, BLOCK_M=block_m, BLOCK_N=block_n)

    key = ("cumsum", str(x.dtype), str(y.dtype), m.bit_length(), n.bit_length())
    launch(REDUCTION.choose(key, lambda config: bench_ms(lambda: launch(config))))


def _cumsum(x: torch.Tensor, dim: int, dtype: torch.dtype | None, out: torch.Tensor | None = None) -> Any:
    result = dtype if dtype is not None else (
        x.dtype if x.dtype.is_floating_point or x.dtype.is_complex else torch.int64
    )
    if x.dtype not in TL_DTYPES or result not in TL_DTYPES or result == torch.bool:
        return NotImplemented
    if out is not None and out.dtype != result:
        return NotImplemented
    dims = wrap_dims([dim], x.dim())
    source = x if x.dim() else x.reshape(1)
    y = torch.empty(source.shape, dtype=result, device=x.device)
    if y.numel():
        _run(source, dims[0] if dims else 0, y)
    y = y.view(x.shape)
    return y if out is None else write_out(out, y)


@aten_op("cumsum")
def cumsum(self: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> Any:
    """Running sum along ``dim``; bool and integer inputs sum in int64."""
    return _cumsum(self, dim, dtype)


@aten_op("cumsum.out")
def cumsum_out(self: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None, out: torch.Tensor) -> Any:
    return _cumsum(self, dim, dtype, out)
