"""index_select (any dim, int32/int64 index, out=), embedding and embedding_dense_backward.

The source is seen as (outer, dim, inner) through its strides; a layout that does not merge
that way is copied once first. The gather kernel is two-dimensional: a program takes a few
output rows (one index each, read once) and a block of their ``inner`` columns, so an
embedding row or an index_select over a leading dim is read and written with wide,
contiguous accesses (no per-element division).

Bad indices: on the CPU backend every index is checked on the host before any kernel runs
and ATen's IndexError is raised. On an accelerator that check would cost a device-to-host
read (a stall of the whole stream) per call, so by default the kernel checks instead, as
ATen's CUDA kernels do: a bad index trips a device-side assertion (the error surfaces at the
next synchronization) and is never read through (the load is masked). ``GEMS_CHECK_INDICES=host``
restores the synchronous host check there. embedding_dense_backward (training) always checks
on the host: its kernel adds into the indexed rows.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch
import triton
import triton.language as tl

from .. import compat, runtime
from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .masked import write_out

GATHER = Tunable(
    "gather_rows",
    params=("BLOCK_SIZE",),
    defaults=[KernelConfig({"BLOCK_SIZE": 4096}, num_warps=4)],
    description="index_select/embedding (and its backward): BLOCK_SIZE elements per program "
    "(whole rows of up to BLOCK_SIZE columns, or a BLOCK_SIZE-wide slice of a longer row)",
)

_INT32 = 2**31 - 1


class IndexOutOfRangeError(IndexError, RuntimeError):
    """An index past the indexed dim. ATen raises IndexError or RuntimeError for this
    depending on the path its CPU kernel takes; this one is both."""


@triton.jit
def _index_select_kernel(
    src_ptr,  # (OUTER, D, INNER) through strides
    index_ptr,  # (K,) int32 or int64
    out_ptr,  # (OUTER, K, INNER) contiguous
    rows,  # OUTER * K
    K,
    D,
    INNER,
    stride_o,
    stride_d,
    stride_i,
    index_stride,
    INT64: tl.constexpr,
    CHECK: tl.constexpr,  # assert 0 <= index < D on the device
    BLOCK_R: tl.constexpr,  # output rows per program
    BLOCK_C: tl.constexpr,  # columns per program
):
    # out[o, k, i] = src[o, index[k], i]; program (r, c) covers rows r*BLOCK_R.. and columns
    # c*BLOCK_C.. of the (OUTER * K, INNER) output
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    if INT64:
        r = r.to(tl.int64)
        c = c.to(tl.int64)
    row_ok = r < rows
    k = r % K
    o = r // K
    idx = tl.load(index_ptr + k * index_stride, mask=row_ok, other=0)
    if INT64:
        idx = idx.to(tl.int64)
    valid = (idx >= 0) & (idx < D)
    if CHECK:
        tl.device_assert(valid | ~row_ok, "index out of range in self")
    src_row = o * stride_o + idx * stride_d
    mask = (row_ok & valid)[:, None] & (c < INNER)[None, :]
    value = tl.load(src_ptr + src_row[:, None] + c[None, :] * stride_i, mask=mask)
    tl.store(out_ptr + r[:, None] * INNER + c[None, :], value, mask=row_ok[:, None] & (c < INNER)[None, :])


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


def host_checks_indices(device: torch.device) -> bool:
    """Whether indices on ``device`` are checked on the host (see the module docstring)."""
    return device.type == "cpu" or os.environ.get("GEMS_CHECK_INDICES", "device").lower() == "host"


def device_check_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with device assertions compiled in (Triton's ``debug``) but no
    integer-overflow instrumentation, where this Triton has those options: for kernels that
    check their indices on the device."""
    accepted = compat.accepted_options(runtime.current().selection.execution.triton_backend)
    options.update({k: v for k, v in (("debug", True), ("sanitize_overflow", False)) if k in accepted})
    return options


def _gather_options(device_check: bool) -> dict[str, Any]:
    options = GATHER.options()
    return device_check_options(options) if device_check else options


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
    host_check = host_checks_indices(self.device)
    if host_check:
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
        tile = config.params["BLOCK_SIZE"]
        block_c = min(tile, next_power_of_2(inner))
        block_r = max(tile // block_c, 1)
        _index_select_launch(
            (cdiv(outer * k, block_r), cdiv(inner, block_c)), src, index, result, outer * k, k, size,
            inner, stride_o, stride_d, stride_i, index.stride(0) if index.dim() else 0,
            config=KernelConfig({}, num_warps=config.num_warps, num_stages=config.num_stages),
            options=_gather_options(not host_check), INT64=max(reach, numel) > _INT32,
            CHECK=not host_check, BLOCK_R=block_r, BLOCK_C=block_c,
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
