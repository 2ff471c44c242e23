"""index_select (any dim, int32/int64 index, out=), index.Tensor with one index tensor
(``x[idx]``, ``x[:, idx]``: any index shape, negative indices from the end), embedding and
embedding_dense_backward.

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

import functools
import math
from typing import Any

import torch
import triton
import triton.language as tl

from .. import compat, runtime, settings
from ..codegen.overlap import assert_no_internal_overlap, assert_no_overlap
from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..plan_cache import Launch, PlanCache, signature
from ..registry import aten_op
from ..tuning import Tunable
from .copying import copy_into, dense, flattened, plain
from .factory import zeros
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
    WRAP: tl.constexpr,  # a negative index counts from the end (index.Tensor)
    BLOCK_R: tl.constexpr,  # output rows per program
    BLOCK_C: tl.constexpr,  # columns per program
):
    # out[o, k, i] = src[o, index[k], i] (WRAP: index[k] + D where negative); program (r, c)
    # covers rows r*BLOCK_R.. and columns c*BLOCK_C.. of the (OUTER * K, INNER) output
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
    if WRAP:
        idx = tl.where(idx < 0, idx + D, idx)
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
    index_ptr,  # (N,) contiguous
    counts_ptr,  # (num_weights,) float32 occurrences (SCALE only)
    acc_ptr,  # (num_weights, D) float32/float64, zeroed
    D,
    padding_idx,
    num_weights,
    SCALE: tl.constexpr,
    COUNT_ONLY: tl.constexpr,
    CHECK: tl.constexpr,  # assert 0 <= index < num_weights on the device
    BLOCK_SIZE: tl.constexpr,
):
    # acc[index[n], :] += grad[n, :] (/ count[index[n]] with SCALE), rows at padding_idx skipped;
    # COUNT_ONLY: counts[index[n]] += 1 instead. An index out of range writes nothing.
    n = tl.program_id(0).to(tl.int64)
    row = tl.load(index_ptr + n).to(tl.int64)
    if CHECK:
        tl.device_assert((row >= 0) & (row < num_weights), "index out of range in self")
    lanes = tl.arange(0, BLOCK_SIZE)
    rows = tl.full((BLOCK_SIZE,), 0, tl.int64) + row
    valid = (rows >= 0) & (rows < num_weights)
    if COUNT_ONLY:
        tl.atomic_add(counts_ptr + rows, tl.full((BLOCK_SIZE,), 1.0, counts_ptr.dtype.element_ty),
                      mask=valid & (lanes == 0))
    else:
        cols = tl.program_id(1) * BLOCK_SIZE + lanes
        mask = (cols < D) & (rows != padding_idx) & valid
        grad = tl.load(grad_ptr + n * D + cols, mask=mask, other=0).to(acc_ptr.dtype.element_ty)
        if SCALE:
            grad = grad / tl.load(counts_ptr + rows, mask=valid, other=1)
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
    """Whether indices on ``device`` are checked on the host (see the module docstring).
    Compile-only execution holds CPU tensors but compiles for a chip: it checks as that chip
    does (the kernel variant the chip launches), and reads no index a kernel did not write."""
    if device.type == "cpu" and not runtime.current().compile_only:
        return True
    return settings.get("GEMS_CHECK_INDICES") == "host"


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


def index_range(index: torch.Tensor) -> tuple[int, int]:
    """The smallest and largest entry of the non-empty ``index``, read back to the host;
    (0, 0) in compile-only execution, where no kernel computed them (the host checks that
    read them then pass, and the kernels that follow compile)."""
    if runtime.current().compile_only:
        return 0, 0
    low, high = torch.aminmax(index)
    return int(low), int(high)


def check_indices(index: torch.Tensor, size: int) -> None:
    """Raise ATen's error unless every entry of ``index`` lies in [0, size)."""
    if index.numel() == 0:
        return
    low, high = index_range(index)
    if low < 0 or high >= size:
        raise IndexOutOfRangeError("index out of range in self")


def wrap_dim(dim: int, ndim: int) -> int:
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    return dim % rank


def _gather_launch(
    x: torch.Tensor, dim: int, count: int, index_stride: int, device_check: bool, wrap: bool
) -> tuple[torch.Tensor, Launch]:
    """(source, launch): the gather of ``count`` indices (``index_stride`` apart) along
    ``dim`` of ``x`` (at least 1-d) into a contiguous (outer, count, inner) result, launched
    as ``launch(source, index, result)``. The source is ``x`` itself where its layout merges
    into three axes, else a contiguous copy of it."""
    src, outer, inner, stride_o, stride_i = three_axis_view(x, dim)
    size, stride_d = src.size(dim), src.stride(dim)
    k = max(count, 1)
    reach = (outer - 1) * stride_o + (size - 1) * stride_d + (inner - 1) * stride_i
    config = GATHER.choose("index_select")
    tile = config.params["BLOCK_SIZE"]
    block_c = min(tile, next_power_of_2(inner))
    block_r = max(tile // block_c, 1)
    launch = Launch(
        _index_select_launch, (cdiv(outer * k, block_r), cdiv(inner, block_c)), 3,
        (outer * k, k, size, inner, stride_o, stride_d, stride_i, index_stride), x.device,
        config=KernelConfig({}, num_warps=config.num_warps, num_stages=config.num_stages),
        options=_gather_options(device_check), INT64=max(reach, outer * k * inner) > _INT32,
        CHECK=device_check, WRAP=wrap, BLOCK_R=block_r, BLOCK_C=block_c,
    )
    return src, launch


def _index_select(
    self: torch.Tensor, dim: int, index: torch.Tensor, out: torch.Tensor | None, wrap: bool = False
) -> Any:
    """index_select's gather (``wrap``: negative indices count from the end, and the caller
    has checked the indices on the host where that is the rule)."""
    dim = wrap_dim(dim, self.dim())
    if index.dim() > 1 or index.dtype not in (torch.int32, torch.int64):
        return NotImplemented  # ATen's CPU and CUDA kernels raise different errors: its own
    if self.dim() == 0 and index.numel() != 1:
        raise RuntimeError(
            f"index_select(): Index to scalar can have only 1 value, got {index.numel()} value(s)"
        )
    if self.dtype not in TL_DTYPES or (out is not None and out.dtype != self.dtype):
        return NotImplemented  # ATen raises for a mismatched out dtype
    if out is not None:
        assert_no_internal_overlap(out)
        assert_no_overlap(out, (self, index))
    size = self.size(dim) if self.dim() else 1
    host_check = host_checks_indices(self.device)
    if host_check and not wrap:
        check_indices(index, size)
    shape = list(self.shape)
    if shape:
        shape[dim] = index.numel()
    direct = out is not None and list(out.shape) == shape and out.is_contiguous()
    result = out if direct else torch.empty(shape, dtype=self.dtype, device=self.device)
    numel = result.numel()
    if numel:
        view = self if self.dim() else self.view(1)
        index_stride = index.stride(0) if index.dim() else 0
        src, launch = _gather_launch(view, dim, index.numel(), index_stride, not host_check, wrap)
        launch(src, index, result)
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


def check_wrapped_indices(index: torch.Tensor, size: int) -> None:
    """Raise ATen's IndexError (and message) unless every entry of ``index`` lies in
    [-size, size): index.Tensor's rule."""
    if index.numel() == 0:
        return
    low, high = index_range(index)
    if low < -size or high >= size:
        bad = next(v for v in index.reshape(-1).tolist() if not -size <= v < size)
        # ATen numbers the dim by the index tensor's position among the indices: 0 here
        raise IndexError(f"index {bad} is out of bounds for dimension 0 with size {size}")


def _single_index(self: torch.Tensor, indices: list[torch.Tensor | None]) -> tuple[int, torch.Tensor] | None:
    """(dim, index) where ``indices`` holds one int32/int64 index tensor on ``self``'s
    device and None elsewhere; None for any other indexing (bool masks, several tensors)."""
    found = [(d, t) for d, t in enumerate(indices) if t is not None]
    if len(found) != 1 or len(indices) > self.dim():
        return None
    dim, index = found[0]
    if index.dtype not in (torch.int32, torch.int64) or index.device != self.device:
        return None
    return dim, index


@functools.lru_cache(maxsize=1024)
def _result_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], dim: int, index_shape: tuple[int, ...],
    index_strides: tuple[int, ...],
) -> tuple[int, ...] | None:
    """The strides ATen gives ``x[..., index]`` for ``x`` of ``shape``/``strides`` indexed
    on ``dim``; None where they are the contiguous ones.

    ATen's TensorIterator lays the result out in the memory order of its two inputs: ``x``
    with ``dim`` replaced by the index's dims at stride 0, and the index viewed with size-1
    dims around it (stride 0 where broadcast). It orders dims innermost first by an
    insertion sort that compares strides input by input, skips a pair where either stride is
    0, breaks a tie of equal strides by putting the smaller dim first, and stops at the first
    pair already in order. The same sort runs here."""
    after = len(shape) - dim - 1
    full = shape[:dim] + index_shape + shape[dim + 1:]
    viewed = torch.empty_strided(index_shape, index_strides, device="meta").reshape(
        (1,) * dim + index_shape + (1,) * after
    )
    operands = (
        strides[:dim] + (0,) * len(index_shape) + strides[dim + 1:],
        tuple(0 if v == 1 and f != 1 else st for v, st, f in zip(viewed.shape, viewed.stride(), full)),
    )

    def order(d0: int, d1: int) -> int:  # 1: d0 goes inside d1; -1: it stays outside
        for s in operands:
            if s[d0] == 0 or s[d1] == 0:
                continue
            if s[d0] != s[d1]:
                return 1 if s[d0] > s[d1] else -1
            if full[d0] > full[d1]:
                return 1
        return 0

    rank = len(full)
    perm = list(range(rank - 1, -1, -1))  # innermost first
    for i in range(1, rank):
        moving = i
        for j in range(i - 1, -1, -1):
            answer = order(perm[j], perm[moving])
            if answer > 0:
                perm[j], perm[moving] = perm[moving], perm[j]
                moving = j
            elif answer < 0:
                break
    if perm == list(range(rank - 1, -1, -1)):
        return None
    result = [0] * rank
    step = 1
    for d in perm:
        result[d] = step
        step *= full[d]
    return tuple(result)


class _IndexPlan:
    """One call signature of index.Tensor whose source is read in place, whose index needs
    no copy and whose result is contiguous: check the indices where that is done on the
    host, allocate the result, launch the gather."""

    __slots__ = ("check", "device", "dtype", "launch", "shape", "size")

    def __init__(self, x: torch.Tensor, dim: int, shape: list[int], check: bool, launch: Launch | None) -> None:
        self.shape = shape
        self.dtype = x.dtype
        self.device = x.device
        self.size = x.size(dim)
        self.check = check
        self.launch = launch

    def __call__(self, x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        if self.check:
            check_wrapped_indices(index, self.size)
        result = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        if self.launch is not None:
            self.launch(x, index, result)
        return result


#: index.Tensor plans by (source signature, dim, index signature, host check)
_index_plans = PlanCache("index")


@aten_op("index.Tensor")
def index(self: torch.Tensor, indices: list[torch.Tensor | None]) -> Any:
    """``self[..., index]`` for one int32/int64 index tensor on dim ``d`` (the other entries
    None): shape ``self.shape[:d] + index.shape + self.shape[d+1:]``, negative indices
    counting from the end, laid out as ATen lays it out."""
    found = _single_index(self, indices)
    if found is None or not plain(self):
        return NotImplemented
    dim, index = found
    host_check = host_checks_indices(self.device)
    key = (signature(self), dim, index.dtype, index.shape, index.stride(), host_check)
    plan = _index_plans.get(key)
    if plan is not None:
        return plan(self, index)
    size = self.size(dim)
    shape = [*self.shape[:dim], *index.shape, *self.shape[dim + 1:]]
    numel = math.prod(shape)
    if size == 0 and index.numel():
        raise IndexError("index is out of bounds for dimension with size 0")
    check = bool(numel) and host_check  # ATen checks only the indices it reads
    if check:
        check_wrapped_indices(index, size)
    flat = index.reshape(-1)
    strides = _result_strides(tuple(self.shape), self.stride(), dim, tuple(index.shape), index.stride())
    if strides is None:
        src, launch = self, None
        if numel:
            src, launch = _gather_launch(self, dim, flat.numel(), flat.stride(0), not host_check, True)
        if src is self and flat.data_ptr() == index.data_ptr():
            _index_plans.store(key, _IndexPlan(self, dim, shape, check, launch))
        result = torch.empty(shape, dtype=self.dtype, device=self.device)
        if launch is not None:
            launch(src, flat, result)
        return result
    result = torch.empty_strided(shape, strides, dtype=self.dtype, device=self.device)
    if numel:
        copy_into(result, _index_select(self, dim, flat, None, wrap=True).view(shape))
    return result


@aten_op("embedding")
def embedding(
    weight: torch.Tensor, indices: torch.Tensor, padding_idx: int = -1,
    scale_grad_by_freq: bool = False, sparse: bool = False,
) -> Any:
    """``weight[indices]``: one row of the (num_weights, D) table per index."""
    if weight.dim() != 2 or indices.dtype not in (torch.int32, torch.int64):
        return NotImplemented  # ATen raises its argument errors
    flat = flattened(indices)  # a training batch's inputs, tokens[:, :-1], copy here
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
    count = indices.numel()
    if grad_output.numel() != count * width:
        return NotImplemented
    # the kernels' operands, zeroed or copied by gems' kernels, so the native layer replays a
    # training step's embedding gradient (an ATen call here would keep it on the Python path)
    flat = dense(indices).view(-1)
    host_check = host_checks_indices(grad_output.device)
    if host_check:
        check_indices(flat, num_weights)
    acc_dtype = torch.float64 if grad_output.dtype == torch.float64 else torch.float32
    acc = zeros((num_weights, width), dtype=acc_dtype, device=grad_output.device)
    if count and width:
        grad = dense(grad_output).view(count, width)
        counts = zeros((num_weights if scale_grad_by_freq else 1,), dtype=acc_dtype, device=acc.device)
        block = min(GATHER.choose("embedding_backward").params["BLOCK_SIZE"], next_power_of_2(width))
        common: dict[str, Any] = {"options": _gather_options(not host_check), "SCALE": scale_grad_by_freq,
                                  "CHECK": not host_check, "BLOCK_SIZE": block}
        if scale_grad_by_freq:
            _embedding_backward((count, 1), grad, flat, counts, acc, width, padding_idx, num_weights,
                                COUNT_ONLY=True, **common)
        grid = (count, math.ceil(width / block))
        _embedding_backward(grid, grad, flat, counts, acc, width, padding_idx, num_weights, COUNT_ONLY=False,
                            **common)
    if acc.dtype == grad_output.dtype:
        return acc
    result = torch.empty(acc.shape, dtype=grad_output.dtype, device=acc.device)
    copy_into(result, acc)
    return result
