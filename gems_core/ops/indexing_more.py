"""gather, scatter (src, value, reduce=), scatter_add, scatter_reduce.two (sum, mean, amax,
amin), index_copy, index_add and index_put_ with one index tensor: functional, in-place and
out= forms.

All of them are one elementwise kernel over the positions of the index: a position ``p``
names an element ``self[p with p[dim] = index(p)]`` and an element ``other[p]`` (the
gather's result, or the scatter's source), and the kernel copies one to the other, or adds
(maxes, mins) the source into ``self`` with atomics. index_copy and index_add are scatters
whose index is the 1-d index expanded along ``dim`` (stride 0 elsewhere); index_put_ with
one index tensor on dim ``d`` is a scatter over ``self.shape[:d] + index.shape +
self.shape[d+1:]``. The operands' dims are merged (:func:`iteration_layout`) into at most
four, read through strides, so no operand is copied; a layout that does not merge that far
goes to ATen. Where the innermost merged dim is a contiguous run of ``self`` (and of the
source, or one value for the run) along which the index does not change (whole rows:
index_add of an embedding's gradient, ``x[idx] += v``, a gather of rows), a tiled kernel
reads one index per row and moves the run in vector loads. The functional forms scatter into
a contiguous copy of ``self``; out= forms write that copy to ``out``.

Dtypes: gather and the plain scatters move every dtype Triton stores; the atomic forms add
float16/32/64 and int32/64 and take the max/min of float32/64 and int32/64 (Triton's
atomics on every target); scatter_reduce's "prod", integer "mean" and scatter's
reduce="multiply" go to ATen.

Where an index repeats, a plain scatter writes one of its sources (which one is not
defined, as in ATen); the atomic forms combine all of them in no fixed order, so they are
left to ATen while deterministic algorithms are requested.

Bad indices follow :mod:`.indexing`: checked on the host where
:func:`host_checks_indices` says so (ATen's message), else by a device-side assertion, and
never read or written through. Shape and dtype errors are ATen's own: such calls go to it.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.layout import broadcast_strides, iteration_layout, max_offset
from ..codegen.overlap import assert_no_internal_overlap, assert_no_overlap, assert_no_partial_overlap
from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .factory import converted_value, f64_bits
from .indexing import IndexOutOfRangeError, device_check_options, host_checks_indices, index_range, wrap_dim
from .kernel_lib import program_offsets
from .masked import write_out

SCATTER = Tunable(
    "scatter_gather",
    params=("BLOCK_SIZE",),
    defaults=[KernelConfig({"BLOCK_SIZE": 1024}, num_warps=4)],
    description="gather/scatter/index_copy/index_add/index_put_: BLOCK_SIZE index positions per program",
)

_INT32 = 2**31 - 1
_RANK = 4  # merged dims the kernel walks
GATHER, STORE, ADD, MAX, MIN = range(5)
#: dtypes each atomic mode serves (Triton's atomics, on every target gems compiles for)
_ATOMIC_DTYPES = {
    ADD: (torch.float16, torch.float32, torch.float64, torch.int32, torch.int64),
    MAX: (torch.float32, torch.float64, torch.int32, torch.int64),
    MIN: (torch.float32, torch.float64, torch.int32, torch.int64),
}
_INDEX_DTYPES = (torch.int32, torch.int64)


@triton.jit
def _scatter_gather_kernel(
    self_ptr,  # the indexed tensor, through strides a* (0 on the indexed dim)
    index_ptr,  # through strides i*
    other_ptr,  # the gather's result or the scatter's source, through strides o*
    numel,  # positions: S0 * S1 * S2 * S3
    S1, S2, S3,
    a0, a1, a2, a3,
    i0, i1, i2, i3,
    o0, o1, o2, o3,
    stride_dim,
    size_dim,
    alpha,  # the source's scale (HAS_ALPHA), or the value itself (SCALAR)
    MODE: tl.constexpr,  # GATHER, STORE, ADD, MAX, MIN
    HAS_ALPHA: tl.constexpr,  # the source is scaled by alpha
    SCALAR: tl.constexpr,  # the source is alpha at every position (float64: its bits)
    F64_BITS: tl.constexpr,
    WRAP: tl.constexpr,  # a negative index counts from the end
    CHECK: tl.constexpr,  # assert 0 <= index < size_dim on the device
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # position p = (c0, c1, c2, c3); target = self[base(p) + index(p) * stride_dim]
    # GATHER: other[p] = target; STORE: target = other[p]; ADD/MAX/MIN: target op= other[p]
    p = program_offsets(BLOCK_SIZE, INT64)
    live = p < numel
    c3 = p % S3
    rest = p // S3
    c2 = rest % S2
    rest = rest // S2
    c1 = rest % S1
    c0 = rest // S1
    idx, valid = _target_index(index_ptr + c0 * i0 + c1 * i1 + c2 * i2 + c3 * i3, live, size_dim, WRAP, CHECK, INT64)
    mask = live & valid
    target = self_ptr + c0 * a0 + c1 * a1 + c2 * a2 + c3 * a3 + idx * stride_dim
    other = other_ptr + c0 * o0 + c1 * o1 + c2 * o2 + c3 * o3
    _move(target, other, mask, alpha, MODE, HAS_ALPHA, SCALAR, F64_BITS)


@triton.jit
def _target_index(index, live, size_dim, WRAP: tl.constexpr, CHECK: tl.constexpr, INT64: tl.constexpr):
    """The index at ``index`` (pointers) where ``live``, negative ones counted from the end
    with WRAP, and whether it lies in [0, size_dim) (asserted on the device with CHECK)."""
    idx = tl.load(index, mask=live, other=0)
    if INT64:
        idx = idx.to(tl.int64)
    if WRAP:
        idx = tl.where(idx < 0, idx + size_dim, idx)
    valid = (idx >= 0) & (idx < size_dim)
    if CHECK:
        tl.device_assert(valid | ~live, "index out of bounds")
    return idx, valid


@triton.jit
def _move(target, other, mask, alpha, MODE: tl.constexpr, HAS_ALPHA: tl.constexpr, SCALAR: tl.constexpr,
          F64_BITS: tl.constexpr):
    """GATHER: ``other = target``; else ``target`` op= ``other`` (or ``alpha`` itself with
    SCALAR), scaled by ``alpha`` with HAS_ALPHA (pointer blocks of one shape)."""
    if MODE == 0:
        tl.store(other, tl.load(target, mask=mask), mask=mask)
    else:
        dtype = target.dtype.element_ty
        if SCALAR:
            if F64_BITS:
                alpha = tl.cast(alpha, tl.int64).to(tl.float64, bitcast=True)
            value = tl.full(mask.shape, alpha, dtype)
        else:
            value = tl.load(other, mask=mask)
        if HAS_ALPHA:
            value = (value * alpha).to(dtype)
        _update(target, value, mask, MODE)


@triton.jit
def _update(target, value, mask, MODE: tl.constexpr):
    """``target`` (pointers) op= ``value``: a store or a relaxed atomic; no other thread
    reads these elements before the kernel ends, so no ordering is needed."""
    if MODE == 1:
        tl.store(target, value, mask=mask)
    elif MODE == 2:
        tl.atomic_add(target, value, mask=mask, sem="relaxed")
    elif MODE == 3:
        tl.atomic_max(target, value, mask=mask, sem="relaxed")
    else:
        tl.atomic_min(target, value, mask=mask, sem="relaxed")


@triton.jit
def _scatter_gather_rows_kernel(
    self_ptr, index_ptr, other_ptr,
    rows,  # S0 * S1 * S2: positions with the innermost coordinate dropped
    S1, S2, S3,
    a0, a1, a2,
    i0, i1, i2,
    o0, o1, o2, o3,  # o3: 1, or 0 where one value stands for the whole run
    stride_dim,
    size_dim,
    alpha,
    MODE: tl.constexpr,
    HAS_ALPHA: tl.constexpr,
    SCALAR: tl.constexpr,
    F64_BITS: tl.constexpr,
    WRAP: tl.constexpr,
    CHECK: tl.constexpr,
    INT64: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # _scatter_gather_kernel where the innermost merged dim is contiguous in self and other
    # and the index is constant along it (index_add/index_copy/index_put_ of whole rows,
    # gathers of rows): a ROWS x BLOCK_N tile reads ROWS indices and moves contiguous runs.
    pid = tl.program_id(0)
    if INT64:
        pid = pid.to(tl.int64)
    r = pid * ROWS + tl.arange(0, ROWS)
    c = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # < 2^31: at most _GRID_Y programs
    live_r = r < rows
    c2 = r % S2
    rest = r // S2
    c1 = rest % S1
    c0 = rest // S1
    idx, valid = _target_index(index_ptr + c0 * i0 + c1 * i1 + c2 * i2, live_r, size_dim, WRAP, CHECK, INT64)
    mask = (live_r & valid)[:, None] & (c < S3)[None, :]
    target = self_ptr + (c0 * a0 + c1 * a1 + c2 * a2 + idx * stride_dim)[:, None] + c[None, :]
    other = other_ptr + (c0 * o0 + c1 * o1 + c2 * o2)[:, None] + c[None, :] * o3
    _move(target, other, mask, alpha, MODE, HAS_ALPHA, SCALAR, F64_BITS)


_scatter_gather = LaunchCache(_scatter_gather_kernel, name="scatter_gather")
_scatter_gather_rows = LaunchCache(_scatter_gather_rows_kernel, name="scatter_gather_rows")
#: the shortest contiguous run the row kernel takes; the tile's elements, and its widest run
_MIN_RUN, _TILE, _MAX_RUN = 32, 4096, 1024
_GRID_Y = 65535


def _check(index: torch.Tensor, size: int, dim: int, wrap: bool, prefix: str = "") -> None:
    """ATen's error for the first index outside [0, size) ([-size, size) with ``wrap``)."""
    if not index.numel():
        return
    low, high = index_range(index)
    lowest = -size if wrap else 0
    if low < lowest or high >= size:
        bad = next(v for v in index.reshape(-1).tolist() if not lowest <= v < size)
        raise IndexOutOfRangeError(f"{prefix}index {bad} is out of bounds for dimension {dim} with size {size}")


def _layout(shape: tuple[int, ...], other: tuple[int, ...], index: tuple[int, ...],
            base: tuple[int, ...]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The merged iteration over ``shape``, innermost last as ``other`` is laid out; where
    ``other`` is broadcast (a stride 0 on a dim of size > 1: one row of values put into many
    rows), its dims are ordered as the target, else the index, is laid out, if that merges as
    far."""
    merged, strides = iteration_layout(shape, [other, index, base])
    if any(st == 0 and n > 1 for st, n in zip(other, shape)):
        order = tuple(o or b or i for o, i, b in zip(other, index, base))
        again, (_, *rest) = iteration_layout(shape, [order, other, index, base])
        if len(again) <= len(merged):
            return again, rest
    return merged, strides


def _launch(
    mode: int, target: torch.Tensor, dim: int, shape: tuple[int, ...], base: tuple[int, ...],
    index: torch.Tensor, index_strides: tuple[int, ...], other: torch.Tensor, other_strides: tuple[int, ...],
    *, wrap: bool = False, alpha: Any = None, value: Any = None, prefix: str = "", error_dim: int | None = None,
) -> bool:
    """Run the kernel over positions of ``shape`` (``base``: ``target``'s strides there, 0
    on the indexed dim; ``value``: a number written in place of ``other``, converted to
    ``target``'s dtype; ``error_dim``: the dim a bad index's error names, if not ``dim``);
    False where the layout does not merge into the kernel's dims."""
    size = target.size(dim) if target.dim() else 1
    host = host_checks_indices(target.device)
    numel = math.prod(shape)
    if host and numel:
        _check(index, size, dim if error_dim is None else error_dim, wrap, prefix)
    if not numel:
        return True
    merged, (o, i, a) = _layout(shape, other_strides, index_strides, base)
    if len(merged) > _RANK:
        return False
    pad = _RANK - len(merged)
    merged, o, i, a = (1,) * pad + merged, (0,) * pad + o, (0,) * pad + i, (0,) * pad + a
    stride_dim = target.stride(dim) if target.dim() else 0
    reach = max(max_offset(merged, a) + (size - 1) * abs(stride_dim), max_offset(merged, o), max_offset(merged, i))
    options = SCATTER.options()
    f64 = value is not None and target.dtype == torch.float64
    scalar = f64_bits(value) if f64 else int(value) if isinstance(value, bool) else value
    common = dict(
        options=options if host else device_check_options(options), MODE=mode, HAS_ALPHA=alpha is not None,
        SCALAR=value is not None, F64_BITS=f64, WRAP=wrap, CHECK=not host, INT64=max(reach, numel) > _INT32,
    )
    number = scalar if value is not None else 1 if alpha is None else alpha
    run = merged[-1]
    if run >= _MIN_RUN and a[-1] == 1 and i[-1] == 0 and (o[-1] in (0, 1) or value is not None):
        block_n = min(next_power_of_2(run), _MAX_RUN)
        rows_per = max(1, _TILE // block_n)
        if cdiv(run, block_n) <= _GRID_Y:
            rows = numel // run
            _scatter_gather_rows(
                (cdiv(rows, rows_per), cdiv(run, block_n)), target, index, other, rows, *merged[1:],
                *a[:-1], *i[:-1], *o[:-1], 0 if value is not None else o[-1], stride_dim, size, number,
                config=KernelConfig({}, num_warps=4), ROWS=rows_per, BLOCK_N=block_n, **common,
            )
            return True
    config = SCATTER.choose("scatter_gather")
    block = config.params["BLOCK_SIZE"]
    _scatter_gather(
        (cdiv(numel, block),), target, index, other, numel, *merged[1:], *a, *i, *o, stride_dim, size, number,
        config=KernelConfig({}, num_warps=config.num_warps, num_stages=config.num_stages), BLOCK_SIZE=block,
        **common,
    )
    return True


def _without(strides: tuple[int, ...], dim: int) -> tuple[int, ...]:
    return strides[:dim] + (0,) + strides[dim + 1:]


def _as_1d(t: torch.Tensor) -> torch.Tensor:
    return t.view(1) if t.dim() == 0 else t


def _shapes_fit(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor | None) -> bool:
    """ATen's shape rule for gather/scatter: index of self's rank, no larger than self
    (but along ``dim``) and than src."""
    if max(index.dim(), 1) != max(self.dim(), 1):
        return False
    i, s = _as_1d(index), _as_1d(self)
    if any(i.size(d) > s.size(d) for d in range(i.dim()) if d != dim):
        return False
    return src is None or (max(src.dim(), 1) == i.dim() and all(i.size(d) <= _as_1d(src).size(d) for d in range(i.dim())))


def _atomic_ok(mode: int, dtype: torch.dtype) -> bool:
    if mode in (GATHER, STORE):
        return dtype in TL_DTYPES
    return dtype in _ATOMIC_DTYPES[mode] and not torch.are_deterministic_algorithms_enabled()


def _scatter_(self: torch.Tensor, dim: int, index: torch.Tensor, src: Any, mode: int) -> bool:
    """``self`` op= ``src`` at ``index`` along ``dim`` (src a tensor of self's dtype on its
    device, or a number); False for a call gems leaves to ATen."""
    is_tensor = isinstance(src, torch.Tensor)
    if index.dtype not in _INDEX_DTYPES or not _atomic_ok(mode, self.dtype):
        return False
    if is_tensor and (src.dtype != self.dtype or src.device != self.device):
        return False
    value = None if is_tensor else converted_value(src, self.dtype)
    if not _shapes_fit(self, dim, index, src if is_tensor else None) or (value is None and not is_tensor):
        return False  # ATen raises its argument errors
    assert_no_internal_overlap(self)
    assert_no_overlap(self, (index, src))
    target, idx = _as_1d(self), _as_1d(index)
    other = src if is_tensor else target
    strides = _as_1d(src).stride() if is_tensor else (0,) * idx.dim()
    return _launch(mode, target, dim, tuple(idx.shape), _without(target.stride(), dim), idx, idx.stride(),
                   other, strides, value=value)


def _served(done: bool, result: torch.Tensor) -> Any:
    return result if done else NotImplemented


def _on_copy(self: torch.Tensor, fill: Any) -> Any:
    """Run ``fill`` (a scatter into its argument) on a contiguous copy of ``self``."""
    result = self.clone(memory_format=torch.contiguous_format)
    return _served(fill(result), result)


def _into_out(out: torch.Tensor, self: torch.Tensor, inputs: tuple[Any, ...], fill: Any) -> Any:
    """The out= form: ``fill`` on a copy of ``self``, written to ``out``."""
    if out.dtype != self.dtype or out is self:
        return NotImplemented  # ATen raises for a mismatched out dtype; out=self is in place
    assert_no_internal_overlap(out)
    assert_no_overlap(out, inputs)
    result = _on_copy(self, fill)
    return result if result is NotImplemented else write_out(out, result)


# --- gather ------------------------------------------------------------------------------


def _gather(self: torch.Tensor, dim: int, index: torch.Tensor, out: torch.Tensor | None) -> Any:
    dim = wrap_dim(dim, self.dim())
    if index.dtype not in _INDEX_DTYPES or self.dtype not in TL_DTYPES or not _shapes_fit(self, dim, index, None):
        return NotImplemented  # ATen raises its argument errors
    if out is not None:
        if out.dtype != self.dtype:
            return NotImplemented
        assert_no_internal_overlap(out)
        assert_no_overlap(out, (self,))
        assert_no_partial_overlap(out, (index,))
    result = torch.empty(index.shape, dtype=self.dtype, device=self.device)
    src, idx, res = _as_1d(self), _as_1d(index), _as_1d(result)
    if not _launch(GATHER, src, dim, tuple(idx.shape), _without(src.stride(), dim), idx, idx.stride(), res, res.stride()):
        return NotImplemented
    return result if out is None else write_out(out, result)


@aten_op("gather")
def gather(self: torch.Tensor, dim: int, index: torch.Tensor, sparse_grad: bool = False) -> Any:
    """``out[p] = self[p with p[dim] = index[p]]``."""
    return _gather(self, dim, index, None)


@aten_op("gather.out")
def gather_out(self: torch.Tensor, dim: int, index: torch.Tensor, sparse_grad: bool = False, *, out: torch.Tensor) -> Any:
    return _gather(self, dim, index, out)


# --- scatter, scatter_add ----------------------------------------------------------------

_REDUCE_MODES = {None: STORE, "add": ADD}


def _scatter_mode(reduce: str | None) -> int | None:
    return _REDUCE_MODES.get(reduce)  # "multiply" goes to ATen


def _scatter_fill(dim: int, index: torch.Tensor, src: Any, reduce: str | None) -> Any:
    mode = _scatter_mode(reduce)

    def fill(target: torch.Tensor) -> bool:
        if mode is None:
            return False
        return _scatter_(target, wrap_dim(dim, target.dim()), index, src, mode)

    return fill


def _warn_reduce(src: Any, reduce: str | None) -> None:
    if reduce is not None and isinstance(src, torch.Tensor):
        warnings.warn(
            "The reduce argument of torch.scatter with Tensor src is deprecated and will be removed in a future "
            "PyTorch release. Use torch.scatter_reduce instead for more reduction options.",
            UserWarning, stacklevel=3,
        )


@aten_op("scatter_.src", "scatter_.value", "scatter_.reduce", "scatter_.value_reduce")
def scatter_(self: torch.Tensor, dim: int, index: torch.Tensor, src: Any, *, reduce: str | None = None) -> Any:
    """``self[p with p[dim] = index[p]] = src[p]`` (or a value; ``reduce="add"`` adds)."""
    _warn_reduce(src, reduce)
    return _served(_scatter_fill(dim, index, src, reduce)(self), self)


@aten_op("scatter.src", "scatter.value", "scatter.reduce", "scatter.value_reduce")
def scatter(self: torch.Tensor, dim: int, index: torch.Tensor, src: Any, *, reduce: str | None = None) -> Any:
    _warn_reduce(src, reduce)
    return _on_copy(self, _scatter_fill(dim, index, src, reduce))


@aten_op("scatter.src_out", "scatter.value_out")
def scatter_out(self: torch.Tensor, dim: int, index: torch.Tensor, src: Any, *, out: torch.Tensor) -> Any:
    return _into_out(out, self, (self, index, src), _scatter_fill(dim, index, src, None))


@aten_op("scatter_add_")
def scatter_add_(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> Any:
    """``self[p with p[dim] = index[p]] += src[p]``, repeated indices summed."""
    return _served(_scatter_fill(dim, index, src, "add")(self), self)


@aten_op("scatter_add")
def scatter_add(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> Any:
    return _on_copy(self, _scatter_fill(dim, index, src, "add"))


@aten_op("scatter_add.out")
def scatter_add_out(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, *, out: torch.Tensor) -> Any:
    return _into_out(out, self, (self, index, src), _scatter_fill(dim, index, src, "add"))


# --- index_copy, index_add ---------------------------------------------------------------


def _index_fill(dim: int, index: torch.Tensor, source: torch.Tensor, mode: int, alpha: Any = None,
                index_dtypes: tuple[torch.dtype, ...] = _INDEX_DTYPES, prefix: str = "") -> Any:
    """``target[..., index[k], ...] (op)= source[..., k, ...]`` along ``dim``: a scatter
    whose index is ``index`` expanded over ``source``."""

    def fill(target: torch.Tensor) -> bool:
        d = wrap_dim(dim, target.dim())
        if (index.dtype not in index_dtypes or index.dim() > 1 or source.dtype != target.dtype
                or not _atomic_ok(mode, target.dtype) or max(source.dim(), 1) != max(target.dim(), 1)):
            return False  # ATen raises its argument errors
        src, tgt = _as_1d(source), _as_1d(target)
        if src.size(d) != index.numel() or any(src.size(k) != tgt.size(k) for k in range(tgt.dim()) if k != d):
            return False
        assert_no_internal_overlap(target)
        assert_no_overlap(target, (index, source))
        strides = [0] * tgt.dim()
        strides[d] = index.stride(0) if index.dim() else 0
        return _launch(mode, tgt, d, tuple(src.shape), _without(tgt.stride(), d), index, tuple(strides),
                       src, src.stride(), alpha=None if alpha is None else converted_value(alpha, tgt.dtype),
                       prefix=prefix)

    return fill


def _copy_fill(dim: int, index: torch.Tensor, source: torch.Tensor) -> Any:
    return _index_fill(dim, index, source, STORE, index_dtypes=(torch.int64,), prefix="index_copy_(): ")


@aten_op("index_copy_")
def index_copy_(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor) -> Any:
    """``self[..., index[k], ...] = source[..., k, ...]`` along ``dim`` (int64 index)."""
    return _served(_copy_fill(dim, index, source)(self), self)


@aten_op("index_copy")
def index_copy(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor) -> Any:
    return _on_copy(self, _copy_fill(dim, index, source))


@aten_op("index_copy.out")
def index_copy_out(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *, out: torch.Tensor) -> Any:
    return _into_out(out, self, (self, index, source), _copy_fill(dim, index, source))


def _add_fill(dim: int, index: torch.Tensor, source: torch.Tensor, alpha: Any) -> Any:
    return _index_fill(dim, index, source, ADD, alpha=None if alpha == 1 else alpha)


@aten_op("index_add_")
def index_add_(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *, alpha: Any = 1) -> Any:
    """``self[..., index[k], ...] += alpha * source[..., k, ...]`` along ``dim``."""
    return _served(_add_fill(dim, index, source, alpha)(self), self)


@aten_op("index_add")
def index_add(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *, alpha: Any = 1) -> Any:
    return _on_copy(self, _add_fill(dim, index, source, alpha))


@aten_op("index_add.out")
def index_add_out(
    self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *, alpha: Any = 1, out: torch.Tensor
) -> Any:
    return _into_out(out, self, (self, index, source), _add_fill(dim, index, source, alpha))


# --- index_put_ --------------------------------------------------------------------------


@aten_op("index_put_", "_index_put_impl_")
def index_put_(
    self: torch.Tensor, indices: list[torch.Tensor | None], values: torch.Tensor, accumulate: bool = False,
    unsafe: bool = False,
) -> Any:
    """``self[..., index] = values`` (``+=`` with accumulate) for one int32/int64 index
    tensor on dim ``d`` (the other entries None: ``x[idx]``, ``x[:, :, idx]``), negative
    entries counting from the end, values broadcast to
    ``self.shape[:d] + index.shape + self.shape[d+1:]``."""
    found = [(d, t) for d, t in enumerate(indices) if t is not None]
    if len(found) != 1 or len(indices) > self.dim():
        return NotImplemented  # bool masks, several index tensors: ATen
    dim, index = found[0]
    mode = ADD if accumulate else STORE
    if (index.dtype not in _INDEX_DTYPES or index.device != self.device or values.dtype != self.dtype
            or values.device != self.device or not _atomic_ok(mode, self.dtype)):
        return NotImplemented
    before, after = tuple(self.shape[:dim]), tuple(self.shape[dim + 1:])
    shape = before + tuple(index.shape) + after
    if values.dim() > len(shape) or any(v not in (1, s) for v, s in zip(values.shape[::-1], shape[::-1])):
        return NotImplemented  # ATen raises: shape mismatch
    if torch._debug_has_internal_overlap(self) == 1:  # ATen writes an expanded tensor, with this warning
        warnings.warn(
            "Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor before performing "
            "this operation. This also applies to advanced indexing e.g. tensor[indices] = tensor",
            UserWarning, stacklevel=2,
        )
    assert_no_overlap(self, (index, values))
    strides = self.stride()
    base = strides[:dim] + (0,) * index.dim() + strides[dim + 1:]
    index_strides = (0,) * len(before) + index.stride() + (0,) * len(after)
    value_strides = broadcast_strides(tuple(values.shape), values.stride(), shape)
    # ATen's error names the index tensor's position among the index tensors: 0
    done = _launch(mode, self, dim, shape, base, index, index_strides, values, value_strides, wrap=True, error_dim=0)
    return _served(done, self)


# --- scatter_reduce ----------------------------------------------------------------------

_IDENTITY = {"sum": 0, "mean": 0, "amax": -math.inf, "amin": math.inf}
_REDUCE = {"sum": ADD, "mean": ADD, "amax": MAX, "amin": MIN}


def _reduce_fill(dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, include_self: bool) -> Any:
    """scatter_reduce's update of ``target``: without ``include_self`` the targets start at
    the reduction's identity; "mean" divides the sums by the counts (1 more with self)."""

    def fill(target: torch.Tensor) -> bool:
        mode = _REDUCE.get(reduce)
        if mode is None or not _atomic_ok(mode, target.dtype) or (reduce == "mean" and not target.is_floating_point()):
            return False  # prod, and integer means (floor-divided), go to ATen
        d = wrap_dim(dim, target.dim())
        if (src.dtype != target.dtype or src.device != target.device or index.dim() > _RANK
                or not _shapes_fit(target, d, index, src)):
            return False  # decided before the first write: ATen must see self as it was
        if not include_self:
            identity = _IDENTITY[reduce]
            if not target.is_floating_point() and math.isinf(identity):
                info = torch.iinfo(target.dtype)
                identity = info.min if identity < 0 else info.max
            if not _scatter_(target, d, index, identity, STORE):
                return False
        if not _scatter_(target, d, index, src, mode):
            return False
        if reduce == "mean":
            counts = torch.full(target.shape, int(include_self), dtype=torch.int64, device=target.device)
            _scatter_(counts, d, index, 1, ADD)
            target.div_(counts.clamp_(min=1))
        return True

    return fill


@aten_op("scatter_reduce_.two")
def scatter_reduce_(
    self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, *, include_self: bool = True
) -> Any:
    """``self[p with p[dim] = index[p]]`` reduced with ``src[p]`` (sum, mean, amax, amin)."""
    return _served(_reduce_fill(dim, index, src, reduce, include_self)(self), self)


@aten_op("scatter_reduce.two")
def scatter_reduce(
    self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, *, include_self: bool = True
) -> Any:
    return _on_copy(self, _reduce_fill(dim, index, src, reduce, include_self))


@aten_op("scatter_reduce.two_out")
def scatter_reduce_out(
    self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, *,
    include_self: bool = True, out: torch.Tensor,
) -> Any:
    return _into_out(out, self, (self, index, src), _reduce_fill(dim, index, src, reduce, include_self))
