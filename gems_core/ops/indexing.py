"""index_select (any dim, int32/int64 index, out=), embedding and embedding_dense_backward.

Indices are checked on the host before any kernel runs (one min/max read back), so a bad
index raises ATen's error instead of reading out of bounds. The source is seen as
(outer, dim, inner) through its strides; a layout that does not merge that way is copied
once first.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .kernel_lib import program_offsets
from .masked import write_out

GATHER = Tunable(
    "gather_rows",
    params=("BLOCK_SIZE",),
    defaults=[KernelConfig({"BLOCK_SIZE": 1024}, num_warps=4)],
    description="index_select/embedding (and its backward): BLOCK_SIZE elements per program",
)

_INT32 = 2**31 - 1


class IndexOutOfRangeError(IndexError, RuntimeError):
    """An index past the indexed dim. ATen raises IndexError or RuntimeError for this
    depending on the path its CPU kernel takes; this one is both."""


@triton.jit
def _index_select_kernel(
    src_ptr,  # (OUTER, D, INNER) through strides
    index_ptr,  # (K,) int32 or int64, every entry in [0, D)
    out_ptr,  # (OUTER, K, INNER) contiguous
    numel,
    K,
    INNER,
    stride_o,
    stride_d,
    stride_i,
    index_stride,
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # out[o, k, i] = src[o, index[k], i]
    offsets = program_offsets(BLOCK_SIZE, INT64)
    mask = offsets < numel
    i = offsets % INNER
    rest = offsets // INNER
    k = rest % K
    o = rest // K
    row = tl.load(index_ptr + k * index_stride, mask=mask, other=0)
    if INT64:
        row = row.to(tl.int64)
    value = tl.load(src_ptr + o * stride_o + row * stride_d + i * stride_i, mask=mask)
    tl.store(out_ptr + offsets, value, mask=mask)


@triton.jit
def _embedding_backward_kernel(
    grad_ptr,  # (N, D) contiguous
    index_ptr,  # (N,) contiguous, every entry in [0, num_weights)
    counts_ptr,  # (num_weights,) float32 occurrences (SCALE only)
    acc_ptr,  # (num_weights, D) float32/float64, zeroed
    D,
    padding_idx,
    SCALE: tl.constexpr,
    COUNT_ONLY: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # acc[index[n], :] += grad[n, :] (/ count[index[n]] with SCALE), rows at padding_idx skipped;
    # COUNT_ONLY: counts[index[n]] += 1 instead
    n = tl.program_id(0).to(tl.int64)
    row = tl.load(index_ptr + n).to(tl.int64)
    if COUNT_ONLY:
        tl.atomic_add(counts_ptr + row, 1.0)
    else:
        cols = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        rows = tl.full((BLOCK_SIZE,), 0, tl.int64) + row
        mask = (cols < D) & (rows != padding_idx)
        grad = tl.load(grad_ptr + n * D + cols, mask=mask, other=0).to(acc_ptr.dtype.element_ty)
        if SCALE:
            grad = grad / tl.load(counts_ptr + row)
        tl.atomic_add(acc_ptr + row * D + cols, grad, mask=mask)


_index_select_launch = LaunchCache(_index_select_kernel, name="index_select")
_embedding_backward = LaunchCache(_embedding_backward_kernel, name="embedding_backward")


def _merge(axes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for size, stride in axes:
        if size == 1:
            continue
        if merged and merged[-1][1] == stride * size:
            merged[-1] = (merged[-1][0] * size, stride)
        else:
            merged.append((size, stride))
    return merged


def three_axis_view(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, int, int, int, int]:
    """(tensor, outer, inner, stride_o, stride_i): ``x`` as (outer, x.size(dim), inner),
    read in place where the dims around ``dim`` merge, else from a contiguous copy; the
    stride of ``dim`` is the returned tensor's ``stride(dim)``."""
    before = _merge([(x.size(d), x.stride(d)) for d in range(dim)])
    after = _merge([(x.size(d), x.stride(d)) for d in range(dim + 1, x.dim())])
    if len(before) > 1 or len(after) > 1:
        x = x.contiguous()
        before = _merge([(x.size(d), x.stride(d)) for d in range(dim)])
        after = _merge([(x.size(d), x.stride(d)) for d in range(dim + 1, x.dim())])
    outer, stride_o = before[0] if before else (1, 0)
    inner, stride_i = after[0] if after else (1, 0)
    return x, outer, inner, stride_o, stride_i


def check_indices(index: torch.Tensor, size: int) -> None:
    """Raise ATen's error unless every entry of ``index`` lies in [0, size)."""
    if index.numel() == 0:
        return
    low, high = (int(v) for v in torch.aminmax(index))
    if low < 0 or high >= size:
        raise IndexOutOfRangeError("index out of range in self")


def wrap_dim(dim: int, ndim: int) -> int:
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    return dim % rank


def _index_select(self: torch.Tensor, dim: int, index: torch.Tensor, out: torch.Tensor | None) -> Any:
    dim = wrap_dim(dim, self.dim())
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if self.dtype not in TL_DTYPES or (out is not None and out.dtype != self.dtype):
        return NotImplemented  # ATen raises for a mismatched out dtype
    size = self.size(dim) if self.dim() else 1
    check_indices(index, size)
    shape = list(self.shape)
    if shape:
        shape[dim] = index.numel()
    direct = out is not None and list(out.shape) == shape and out.is_contiguous()
    result = out if direct else torch.empty(shape, dtype=self.dtype, device=self.device)
    numel = result.numel()
    if numel:
        view = self if self.dim() else self.view(1)
        src, outer, inner, stride_o, stride_i = three_axis_view(view, dim)
        stride_d = src.stride(dim)
        k = max(index.numel(), 1)
        reach = (outer - 1) * stride_o + (size - 1) * stride_d + (inner - 1) * stride_i
        config = GATHER.choose("index_select")
        _index_select_launch(
            (cdiv(numel, config.params["BLOCK_SIZE"]),), src, index, result, numel, k, inner,
            stride_o, stride_d, stride_i, index.stride(0) if index.dim() else 0,
            config=config, options=GATHER.options(), INT64=max(reach, numel) > _INT32,
        )
    if out is None or direct:
        return result
    return write_out(out, result)


@aten_op("index_select")
def index_select(self: torch.Tensor, dim: int, index: torch.Tensor) -> Any:
    """The entries ``index`` names along ``dim`` (index 1-d or 0-d, int32 or int64)."""
    return _index_select(self, dim, index, None)


@aten_op("index_select.out")
def index_select_out(self: torch.Tensor, dim: int, index: torch.Tensor, *, out: torch.Tensor) -> Any:
    return _index_select(self, dim, index, out)


@aten_op("embedding")
def embedding(
    weight: torch.Tensor, indices: torch.Tensor, padding_idx: int = -1,
    scale_grad_by_freq: bool = False, sparse: bool = False,
) -> Any:
    """``weight[indices]``: one row of the (num_weights, D) table per index."""
    if weight.dim() != 2 or indices.dtype not in (torch.int32, torch.int64):
        return NotImplemented  # ATen raises its argument errors
    flat = indices.reshape(-1)
    result = _index_select(weight, 0, flat, None)
    if result is NotImplemented:
        return result
    return result.view(*indices.shape, weight.size(1))


@aten_op("embedding_dense_backward")
def embedding_dense_backward(
    grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int, padding_idx: int,
    scale_grad_by_freq: bool,
) -> Any:
    """The gradient of the table: each row the sum of the gradients of its lookups (divided
    by its lookup count with ``scale_grad_by_freq``); the padding row stays zero."""
    if indices.dtype not in (torch.int32, torch.int64) or grad_output.dtype not in TL_DTYPES:
        return NotImplemented
    if not grad_output.dtype.is_floating_point or torch.are_deterministic_algorithms_enabled():
        return NotImplemented  # the kernel adds with atomics: the order is not fixed
    width = grad_output.size(-1) if grad_output.dim() else 1
    flat = indices.reshape(-1).contiguous()
    count = flat.numel()
    if grad_output.numel() != count * width:
        return NotImplemented
    check_indices(flat, num_weights)
    acc_dtype = torch.float64 if grad_output.dtype == torch.float64 else torch.float32
    acc = torch.zeros((num_weights, width), dtype=acc_dtype, device=grad_output.device)
    if count and width:
        grad = grad_output.reshape(count, width).contiguous()
        counts = torch.zeros(num_weights if scale_grad_by_freq else 1, dtype=acc_dtype, device=acc.device)
        block = min(GATHER.choose("embedding_backward").params["BLOCK_SIZE"], next_power_of_2(width))
        common: dict[str, Any] = {"options": GATHER.options(), "SCALE": scale_grad_by_freq, "BLOCK_SIZE": block}
        if scale_grad_by_freq:
            _embedding_backward((count, 1), grad, flat, counts, acc, width, padding_idx, COUNT_ONLY=True, **common)
        grid = (count, math.ceil(width / block))
        _embedding_backward(grid, grad, flat, counts, acc, width, padding_idx, COUNT_ONLY=False, **common)
    return acc if acc.dtype == grad_output.dtype else acc.to(grad_output.dtype)
