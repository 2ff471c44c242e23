"""sum, mean and amax over any set of dims, with their out= overloads; the kernel (with its
MIN and PROD ops) and the layout helpers also serve prod, min, all and any elsewhere.

The reduced dims of any layout are seen as one strided axis of length N and the kept dims as
at most two strided axes (``outer``, ``inner``), so reducing a dim that is not innermost, a
transposed, sliced or expanded input, reads memory in place. Only a layout that does not
merge that way is copied once (kept dims first) before the kernel runs. Short outputs of long
reductions split each row over several programs and reduce the partials in a second pass.

Everything but the data is settled by a call's signature (dtype, shape, strides, device of
the input; dim, keepdim, result dtype): a repeat call of sum/mean/amax/prod/max/min reuses
a plan that only allocates the output and launches.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from .. import compat, runtime
from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..plan_cache import Launch, PlanCache
from ..registry import aten_op
from ..tuning import Tunable
from .copying import dense_copy

REDUCTION = Tunable(
    "reduction",
    params=("BLOCK_M", "BLOCK_N"),
    defaults=[KernelConfig({"BLOCK_M": 4, "BLOCK_N": 256}, num_warps=4)],
    description="sum/mean/amax/prod and the reductions built on them: BLOCK_M output rows per "
    "program, BLOCK_N reduced elements per step",
)

SUM, MAX, MIN, PROD = 0, 1, 2, 3  # the OP of _reduce_kernel
_INT32 = 2**31 - 1
_MAX_SPLITS = 1024


# Reductions go through tl.reduce with these combiners rather than tl.sum / tl.max: those
# are jit functions of Triton's standard library, which the CPU interpreter cannot run when
# Triton was imported before the interpreter was switched on.
@triton.jit
def add_combine(a, b):
    return a + b


@triton.jit
def max_nan_combine(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def min_nan_combine(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def mul_combine(a, b):
    return a * b


for _combine, _name in ((add_combine, "sum"), (max_nan_combine, "max"), (min_nan_combine, "min"), (mul_combine, "prod")):
    compat.reduce_in_numpy(_combine, _name)
del _combine, _name  # the module's kernels are what its tuned choices are keyed by (gems_core.shipped)


@triton.jit
def _reduce_kernel(
    x_ptr,  # (OUTER, INNER) kept x (N) reduced, read through strides; row m = o * INNER + i
    out_ptr,  # (M, splits) contiguous: one value per row and split
    M,
    N,
    INNER,
    stride_o,
    stride_i,
    stride_n,
    cols_per_split,
    splits,
    scale,
    OP: tl.constexpr,  # SUM, MAX, MIN or PROD
    MEAN: tl.constexpr,
    CAST: tl.constexpr,  # values are rounded to this dtype first (ATen's dtype= semantics)
    ACC: tl.constexpr,
    FILL: tl.constexpr,  # identity of OP, for masked lanes (a float for float inputs)
    ACC_FILL: tl.constexpr,  # the same identity, typed for ACC
    INT64: tl.constexpr,
    KEPT: tl.constexpr,  # 1: one kept axis (row m at m * stride_i); 2: rows at m * stride_o
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # out[m, s] = OP over n in split s of x[m, n]  (times scale for a mean's last pass);
    # max and min propagate NaN.
    pid = tl.program_id(0)
    split = tl.program_id(1)
    if INT64:  # before any product: a split's first column can pass 2^31 (pid * BLOCK_M too)
        pid = pid.to(tl.int64)
        split = split.to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    col_range = tl.arange(0, BLOCK_N)
    if INT64:
        rows = rows.to(tl.int64)
        col_range = col_range.to(tl.int64)
    row_mask = rows < M
    # with one kept axis the row offsets are plainly strided, which lets the compiler see
    # contiguous rows (a reduction over a leading dim) and read them in wide, coalesced loads
    if KEPT == 1:
        base = rows * stride_i
    elif KEPT == 2:
        base = rows * stride_o
    else:
        base = (rows // INNER) * stride_o + (rows % INNER) * stride_i
    start = split * cols_per_split
    acc = tl.full((BLOCK_M, BLOCK_N), ACC_FILL, ACC)
    for offset in range(0, cols_per_split, BLOCK_N):
        cols = start + offset + col_range
        mask = row_mask[:, None] & (cols < N)[None, :]
        x = tl.load(x_ptr + base[:, None] + cols[None, :] * stride_n, mask=mask, other=FILL)
        x = x.to(CAST).to(ACC)
        if OP == 0:
            acc += x
        elif OP == 1:
            acc = max_nan_combine(acc, x)
        elif OP == 2:
            acc = min_nan_combine(acc, x)
        else:
            acc *= x
    if OP == 0:
        result = tl.reduce(acc, 1, add_combine)
        if MEAN:
            result = result * scale
    elif OP == 1:
        result = tl.reduce(acc, 1, max_nan_combine)
    elif OP == 2:
        result = tl.reduce(acc, 1, min_nan_combine)
    else:
        result = tl.reduce(acc, 1, mul_combine)
    tl.store(out_ptr + rows * splits + split, result.to(out_ptr.dtype.element_ty), mask=row_mask)


_launch = LaunchCache(_reduce_kernel, name="reduction")


def wrap_dims(dims: Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """ATen's dim wrapping: a 0-d tensor takes dims -1 and 0; ``None`` or ``[]`` is every
    dim. Raises ATen's IndexError / RuntimeError for an out-of-range or repeated dim."""
    rank = max(ndim, 1)
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    wrapped: list[int] = []
    for d in dims:
        if not -rank <= d < rank:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {d})"
            )
        d = d % rank
        if d in wrapped:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        wrapped.append(d)
    if not wrapped:
        return tuple(range(ndim))
    return tuple(d for d in wrapped if d < ndim)


def _merge(axes: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """(size, stride) axes, outermost first, with size-1 axes dropped and axes that step
    through memory as one merged."""
    merged: list[tuple[int, int]] = []
    for size, stride in axes:
        if size == 1:
            continue
        if merged and merged[-1][1] == stride * size:
            merged[-1] = (merged[-1][0] * size, stride)
        else:
            merged.append((size, stride))
    return merged


def view_layout(x: torch.Tensor, dims: tuple[int, ...]) -> tuple[list[int] | None, list[int]]:
    """(permutation, [inner, stride_o, stride_i, stride_n]) describing ``x`` as rows x
    reduced: the permutation is None where ``x`` is read in place, else the order in which
    ``x`` is copied (kept dims first) so that the parameters describe the dense copy."""
    kept = [d for d in range(x.dim()) if d not in dims]
    kept_axes = _merge([(x.size(d), x.stride(d)) for d in kept])
    reduced = sorted(dims, key=lambda d: -abs(x.stride(d)))
    reduced_axes = _merge([(x.size(d), x.stride(d)) for d in reduced])
    if len(kept_axes) <= 2 and len(reduced_axes) <= 1:
        kept_axes = [(1, 0)] * (2 - len(kept_axes)) + kept_axes
        stride_n = reduced_axes[0][1] if reduced_axes else 0
        return None, [kept_axes[1][0], kept_axes[0][1], kept_axes[1][1], stride_n]
    n = math.prod(x.size(d) for d in dims)
    return kept + list(dims), [1, n, 0, 1]


def reduction_view(x: torch.Tensor, dims: tuple[int, ...]) -> tuple[torch.Tensor, list[int]]:
    """(tensor, [inner, stride_o, stride_i, stride_n]) describing ``x`` as rows x reduced."""
    permutation, params = view_layout(x, dims)
    # copied by gems' kernel, not .contiguous(): a copy the native layer can record
    return (x if permutation is None else dense_copy(x.permute(permutation))), params


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_floating_point:
        return torch.float64 if dtype == torch.float64 else torch.float32
    return torch.int64


def _fill(op: int, dtype: torch.dtype) -> Any:
    """The identity of ``op`` in ``dtype``."""
    if op in (SUM, PROD):
        value = 0 if op == SUM else 1
        return float(value) if dtype.is_floating_point else value
    if dtype.is_floating_point:
        return float("-inf") if op == MAX else float("inf")
    if dtype == torch.bool:
        return 0 if op == MAX else 1
    return torch.iinfo(dtype).min if op == MAX else torch.iinfo(dtype).max


def index_reach(m: int, n: int, inner: int, stride_o: int, stride_i: int, stride_n: int) -> int:
    """An upper bound of the element offsets a kernel reading rows x reduced computes."""
    return m + n + (m - 1) * abs(stride_o) + (inner - 1) * abs(stride_i) + (n - 1) * abs(stride_n)


def split_plan(
    m: int, n: int, block_m: int, block_n: int, device: torch.device | None = None
) -> tuple[int, int, int, int, int]:
    """(block_m, block_n, programs, splits, cols_per_split) for ``m`` rows of ``n``: when the
    rows alone give fewer programs than it takes to fill the chip (eight per compute unit of
    ``device``), each long row is split over several programs (at most ``_MAX_SPLITS``, and
    each split reads at least four blocks)."""
    block_m = min(block_m, next_power_of_2(m))
    block_n = min(block_n, next_power_of_2(n))
    programs = cdiv(m, block_m)
    units = runtime.compute_units(device.type, device.index) if device is not None else 8
    target = 8 * units
    splits = 1
    if programs < target and n > 4 * block_n:
        splits = min(_MAX_SPLITS, cdiv(n, 4 * block_n), cdiv(target, programs))
    cols_per_split = cdiv(cdiv(n, splits), block_n) * block_n
    return block_m, block_n, programs, cdiv(n, cols_per_split), cols_per_split


class RowReduction:
    """The launches that reduce one input layout over its reduced dims into a contiguous
    output of ``m`` values, settled by the input's signature and a config."""

    __slots__ = ("acc", "device", "first", "partials", "permutation", "second")
    # partials: (shape, strides) of the contiguous (rows, splits) buffer of a split reduction

    def __init__(
        self, x: torch.Tensor, dims: tuple[int, ...], m: int, op: int, mean: bool,
        cast: torch.dtype, acc: torch.dtype, config: KernelConfig,
    ) -> None:
        n = math.prod(x.size(d) for d in dims)
        self.permutation, (inner, stride_o, stride_i, stride_n) = view_layout(x, dims)
        reach = index_reach(m, n, inner, stride_o, stride_i, stride_n)
        fill = _fill(op, acc if op in (SUM, PROD) else cast)
        if x.dtype.is_floating_point:
            fill = float(fill)  # an int ``other=`` of a bf16 load reads as raw bits in the interpreter
        scale = 1.0 / n
        block_m, block_n, programs, splits, cols_per_split = split_plan(
            m, n, config.params["BLOCK_M"], config.params["BLOCK_N"], x.device
        )
        common: dict[str, Any] = {
            "config": config, "options": REDUCTION.options(), "OP": op, "ACC": TL_DTYPES[acc],
            "FILL": fill, "ACC_FILL": float(fill) if acc.is_floating_point else int(fill), "INT64": reach > _INT32 or m * splits > _INT32, "BLOCK_M": block_m,
        }
        self.first = Launch(
            _launch, (programs, splits), 2,
            (m, n, inner, stride_o, stride_i, stride_n, cols_per_split, splits, scale), x.device,
            MEAN=mean and splits == 1, CAST=TL_DTYPES[cast], BLOCK_N=block_n,
            KEPT=1 if inner == m else 2 if inner == 1 else 0, **common,
        )
        self.partials = ((m, splits), (splits, 1)) if splits > 1 else None
        self.second = None
        if splits > 1:  # reduce the partials of each row
            width = next_power_of_2(splits)
            self.second = Launch(
                _launch, (programs, 1), 2, (m, splits, 1, splits, 0, 1, width, 1, scale), x.device,
                MEAN=mean, CAST=TL_DTYPES[acc], BLOCK_N=width, KEPT=2, **common,
            )
        self.acc = acc
        self.device = x.device

    def run(self, x: torch.Tensor, out: torch.Tensor) -> None:
        """Reduce ``x`` (of the signature this was built for) into ``out``."""
        source = x if self.permutation is None else dense_copy(x.permute(self.permutation))
        if self.second is None:
            self.first(source, out)
            return
        partials = torch.empty_strided(*self.partials, dtype=self.acc, device=self.device)
        self.first(source, partials)
        self.second(partials, out)


def row_reduction(
    x: torch.Tensor, dims: tuple[int, ...], out: torch.Tensor, op: int, mean: bool,
    cast: torch.dtype, acc: torch.dtype,
) -> RowReduction:
    """The :class:`RowReduction` of ``x`` into ``out`` with the config chosen for its shape
    bucket (benchmarking on ``x`` and ``out`` where several configs compete)."""
    n = math.prod(x.size(d) for d in dims)
    m = out.numel()

    def build(config: KernelConfig) -> RowReduction:
        return RowReduction(x, dims, m, op, mean, cast, acc, config)

    def bench(config: KernelConfig) -> float:
        rows = build(config)
        return bench_ms(lambda: rows.run(x, out))

    # rows read along memory (the reduced axis contiguous) want wide BLOCK_N; rows whose
    # kept axis is the contiguous one (a reduction over a leading dim) want tall BLOCK_M
    _, (_, _, _, stride_n) = view_layout(x, dims)
    key = (op, str(x.dtype), str(acc), m.bit_length(), n.bit_length(), stride_n == 1)
    return build(REDUCTION.choose(key, bench))


def reduce_into(
    x: torch.Tensor, dims: tuple[int, ...], out: torch.Tensor, op: int, mean: bool,
    cast: torch.dtype, acc: torch.dtype,
) -> None:
    """Reduce ``x`` over ``dims`` into the contiguous ``out`` (kept dims in order): values
    are rounded to ``cast``, then combined by ``op`` in ``acc``."""
    row_reduction(x, dims, out, op, mean, cast, acc).run(x, out)


def bench_ms(fn: Any) -> float:
    """Milliseconds per call of ``fn`` on the device (for choosing among configs)."""
    from triton.testing import do_bench

    return float(do_bench(fn))


def out_shape(x: torch.Tensor, dims: tuple[int, ...], keepdim: bool) -> list[int]:
    if keepdim:
        return [1 if d in dims else s for d, s in enumerate(x.shape)]
    return [s for d, s in enumerate(x.shape) if d not in dims]


class _ReducePlan:
    """A reduction without ``out=`` for one call signature: allocate, then launch."""

    __slots__ = ("device", "direct", "dtype", "rows", "shape", "strides")

    def __init__(self, target: torch.Tensor, rows: RowReduction | None) -> None:
        self.shape = tuple(target.shape)
        self.strides = target.stride()
        self.dtype = target.dtype
        self.device = target.device
        self.rows = rows  # None: the output is empty
        # the common case, one pass over the input in place: launched without rows.run
        simple = rows is not None and rows.permutation is None and rows.second is None
        self.direct = rows.first if simple else None

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        # empty_strided: one argument signature to parse, where torch.empty has several
        # (1.2 us less per call on an H200's host); an out= plan exists only for an output
        # the result is written into directly
        if out is not None:
            target = out
        else:
            target = torch.empty_strided(self.shape, self.strides, dtype=self.dtype, device=self.device)
        if self.direct is not None:
            self.direct(x, target)
        elif self.rows is not None:
            self.rows.run(x, target)
        return target


#: plans of reduce_dims by (input dtype, shape, strides, device, dim, keepdim, op, mean,
#: result dtype); ``empty_value`` follows from op and mean, and empty inputs get no plan
_plans = PlanCache("reduction")


def reduce_dims(
    x: torch.Tensor, dim: Sequence[int] | None, keepdim: bool, op: int, mean: bool,
    result: torch.dtype, out: torch.Tensor | None, empty_value: float | None,
) -> Any:
    key = (
        x.dtype, x.shape, x.stride(), x.device,
        dim if dim is None or isinstance(dim, int) else tuple(dim), keepdim, op, mean, result,
    )
    if out is not None:  # out= repeats too: keyed by the output's layout as well
        key = (key, out.dtype, out.shape, out.stride(), out.device)
    plan = _plans.get(key)
    if plan is not None:
        return plan(x, out)
    if x.dtype.is_complex or result.is_complex or x.dtype not in TL_DTYPES:
        return NotImplemented
    dims = wrap_dims(dim, x.dim())
    shape = out_shape(x, dims, keepdim)
    direct = out is not None and out.dtype == result and list(out.shape) == shape and out.is_contiguous()
    target = out if direct else torch.empty(shape, dtype=result, device=x.device)
    rows = None
    if target.numel():
        if x.numel() == 0:
            if empty_value is None:
                return NotImplemented  # ATen raises its own error for an empty max
            target.fill_(empty_value)
        else:
            if op in (SUM, PROD):
                rows = row_reduction(x, dims, target, op, mean, result, acc_dtype(result))
            else:
                rows = row_reduction(x, dims, target, op, mean, x.dtype, _max_acc(x.dtype))
            rows.run(x, target)
    if out is None or direct:
        if x.numel() or not target.numel():
            _plans.store(key, _ReducePlan(target, rows))
        return target
    return write_out(out, target)


def _max_acc(dtype: torch.dtype) -> torch.dtype:
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return torch.int8 if dtype == torch.bool else dtype


def write_out(out: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    if out.shape != result.shape:
        if out.numel():
            warnings.warn(
                f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
                f"which does not match the required output shape {list(result.shape)}.",
                UserWarning, stacklevel=3,
            )
        out.resize_(result.shape)
    return out.copy_(result)


def _sum_dtype(x: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is not None:
        return dtype
    return x.dtype if x.dtype.is_floating_point or x.dtype.is_complex else torch.int64


def _check_out_dtype(out: torch.Tensor, dtype: torch.dtype | None) -> bool:
    return dtype is None or dtype == out.dtype


@aten_op("sum")
def sum_all(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum of every element; bool and integer inputs sum in int64."""
    return reduce_dims(self, None, False, SUM, False, _sum_dtype(self, dtype), None, 0)


@aten_op("sum.dim_IntList")
def sum_dim(
    self: torch.Tensor, dim: Sequence[int] | None, keepdim: bool = False, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """Sum over ``dim`` (``None`` or ``[]``: every dim)."""
    return reduce_dims(self, dim, keepdim, SUM, False, _sum_dtype(self, dtype), None, 0)


@aten_op("sum.IntList_out")
def sum_out(
    self: torch.Tensor, dim: Sequence[int] | None, keepdim: bool = False, *,
    dtype: torch.dtype | None = None, out: torch.Tensor,
) -> torch.Tensor:
    if not _check_out_dtype(out, dtype):
        return NotImplemented
    return reduce_dims(self, dim, keepdim, SUM, False, out.dtype, out, 0)


def _mean_dtype(x: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype | None:
    result = dtype if dtype is not None else x.dtype
    return result if result.is_floating_point else None


@aten_op("mean")
def mean_all(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Mean of every element (floating results only; ATen raises for integers)."""
    return mean_dim(self, None, False, dtype=dtype)


@aten_op("mean.dim")
def mean_dim(
    self: torch.Tensor, dim: Sequence[int] | None, keepdim: bool = False, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    result = _mean_dtype(self, dtype)
    if result is None:
        return NotImplemented
    return reduce_dims(self, dim, keepdim, SUM, True, result, None, float("nan"))


@aten_op("mean.out")
def mean_out(
    self: torch.Tensor, dim: Sequence[int] | None, keepdim: bool = False, *,
    dtype: torch.dtype | None = None, out: torch.Tensor,
) -> torch.Tensor:
    if not _check_out_dtype(out, dtype) or _mean_dtype(self, out.dtype) is None:
        return NotImplemented
    return reduce_dims(self, dim, keepdim, SUM, True, out.dtype, out, float("nan"))


@aten_op("amax")
def amax(self: torch.Tensor, dim: Sequence[int] = (), keepdim: bool = False) -> torch.Tensor:
    """Maximum over ``dim`` (``[]``: every dim); NaN wins, as in ATen."""
    return reduce_dims(self, dim, keepdim, MAX, False, self.dtype, None, None)


@aten_op("amax.out")
def amax_out(
    self: torch.Tensor, dim: Sequence[int] = (), keepdim: bool = False, *, out: torch.Tensor
) -> torch.Tensor:
    if out.dtype != self.dtype:
        return NotImplemented
    return reduce_dims(self, dim, keepdim, MAX, False, self.dtype, out, None)

