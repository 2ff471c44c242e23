"""topk: the k largest (or smallest) entries along a dim, with their indices, and its out=.

One program sorts one row. Each entry becomes a 64-bit key, its value's order in the high 32
bits (floats through their bit pattern, made monotonic; NaN above +inf, as ATen orders it;
negated for ``largest``) and its index in the low 32, so one ascending ``tl.sort`` yields the
top k and their indices together, ties in index order. Results are always sorted. Rows
longer than ``MAX_ROW`` and 64-bit dtypes (whose order does not fit in 32 bits) go to ATen.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..contract import KernelConfig
from ..host_math import next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .indexing import three_axis_view, wrap_dim
from .masked import write_out

TOPK = Tunable(
    "topk",
    params=(),
    defaults=[KernelConfig({}, num_warps=4)],
    description="topk: one program sorts one whole row",
)

MAX_ROW = 8192
_KEYED = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int16, torch.int8, torch.uint8)


@triton.jit
def order_key(x, IS_FLOAT: tl.constexpr):
    """An int32 whose signed order is x's order (NaN greatest, -0.0 == 0.0)."""
    if IS_FLOAT:
        f = x.to(tl.float32)
        f = tl.where(f == 0, 0.0, f)
        bits = f.to(tl.int32, bitcast=True)
        bits = tl.where(f != f, 0x7FC00000, bits)  # noqa: PLR0124 (NaN test)
        key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    else:
        key = x.to(tl.int32)
    return key


@triton.jit
def _topk_kernel(
    x_ptr,  # (OUTER, N, INNER) through strides; row r = o * INNER + i
    values_ptr,  # (OUTER, K, INNER) contiguous
    indices_ptr,  # (OUTER, K, INNER) contiguous, int64
    N,
    K,
    INNER,
    stride_o,
    stride_n,
    stride_i,
    LARGEST: tl.constexpr,
    IS_FLOAT: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # values[o, :, i] = the K greatest (LARGEST) or least of x[o, :, i], sorted; indices where
    row = tl.program_id(0).to(tl.int64)
    o = row // INNER
    i = row % INNER
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    base = x_ptr + o * stride_o + i * stride_i
    key = order_key(tl.load(base + cols * stride_n, mask=mask, other=0), IS_FLOAT)
    if LARGEST:
        key = ~key
    packed = (key.to(tl.int64) << 32) | cols.to(tl.int64)
    packed = tl.where(mask, packed, 0x7FFFFFFFFFFFFFFF)
    packed = tl.sort(packed)
    index = packed & 0xFFFFFFFF
    keep = cols < K
    out = o * K * INNER + cols.to(tl.int64) * INNER + i
    tl.store(values_ptr + out, tl.load(base + index * stride_n, mask=keep), mask=keep)
    tl.store(indices_ptr + out, index, mask=keep)


_launch = LaunchCache(_topk_kernel, name="topk")


def _topk(
    self: torch.Tensor, k: int, dim: int, largest: bool, values: torch.Tensor | None = None,
    indices: torch.Tensor | None = None,
) -> Any:
    dim = wrap_dim(dim, self.dim())
    size = self.size(dim) if self.dim() else 1
    if not 0 <= k <= size:
        raise RuntimeError("selected index k out of range")
    if self.dtype not in _KEYED or size > MAX_ROW:
        return NotImplemented
    shape = list(self.shape)
    if shape:
        shape[dim] = k
    out_values = torch.empty(shape, dtype=self.dtype, device=self.device)
    out_indices = torch.empty(shape, dtype=torch.int64, device=self.device)
    rows = self.numel() // size if size else 0
    if k and rows:
        src, _, inner, stride_o, stride_i = three_axis_view(self if self.dim() else self.view(1), dim)
        config = TOPK.choose("topk")
        _launch(
            (rows,), src, out_values, out_indices, size, k, inner, stride_o, src.stride(dim), stride_i,
            config=config, options=TOPK.options(), LARGEST=largest,
            IS_FLOAT=self.dtype.is_floating_point, BLOCK_N=next_power_of_2(size),
        )
    if values is None or indices is None:
        return out_values, out_indices
    return write_out(values, out_values), write_out(indices, out_indices)


@aten_op("topk")
def topk(self: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    """(values, indices) of the ``k`` greatest (``largest``) or least entries along ``dim``;
    sorted whatever ``sorted`` says."""
    return _topk(self, k, dim, largest)


@aten_op("topk.values")
def topk_out(
    self: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, *,
    values: torch.Tensor, indices: torch.Tensor,
) -> Any:
    if values.dtype != self.dtype or indices.dtype != torch.int64:
        return NotImplemented  # ATen raises for mismatched out dtypes
    return _topk(self, k, dim, largest, values, indices)
