"""softmax and log_softmax over any dim, forward (``_softmax``, ``_log_softmax``) and
backward (``_softmax_backward_data``, ``_log_softmax_backward_data``), with out= overloads.

The input is seen as (OUTER, N, INNER) with the softmax over N, so a dim that is not
innermost is read with stride INNER in place (a non-contiguous input is made contiguous
first, as ATen does). A row that fits one tile is read once; a longer one is read twice,
with the max and the sum of exponentials kept online in the first pass.

A call's signature (dtypes, shapes, strides, devices, dim, half_to_float) settles everything
but the data: a repeat call reuses a plan that only allocates and launches.
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
from ..plan_cache import Launch, PlanCache, signature
from ..registry import aten_op
from ..tuning import Tunable
from .reduction import acc_dtype, add_combine, bench_ms, max_nan_combine

SOFTMAX = Tunable(
    "softmax",
    params=("BLOCK_M", "BLOCK_N"),
    defaults=[KernelConfig({"BLOCK_M": 4, "BLOCK_N": 1024}, num_warps=4)],
    description="softmax/log_softmax and their backward: BLOCK_M rows per program, BLOCK_N "
    "elements of a row per step",
)

_INT32 = 2**31 - 1
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def _softmax_kernel(
    x_ptr,  # (OUTER, N, INNER) contiguous; row m = (m // INNER, :, m % INNER)
    y_ptr,  # (OUTER, N, INNER) contiguous
    M,
    N,
    INNER,
    LOG: tl.constexpr,
    ONE_TILE: tl.constexpr,  # N <= BLOCK_N
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 data, else float32
):
    # y = exp(x - max(x)) / sum(exp(x - max(x)))   or, for LOG,   x - max(x) - log(sum(...))
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    if INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    row_mask = rows < M
    base = (rows // INNER) * N * INNER + rows % INNER
    if ONE_TILE:
        mask = row_mask[:, None] & (cols < N)[None, :]
        offsets = base[:, None] + cols[None, :] * INNER
        x = tl.load(x_ptr + offsets, mask=mask, other=float("-inf")).to(ACC)
        z = x - tl.reduce(x, 1, max_nan_combine)[:, None]
        e = tl.exp(z)
        total = tl.reduce(e, 1, add_combine)[:, None]
        if LOG:
            y = z - tl.log(total)
        else:
            y = e / total
        tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # per lane: running max and sum of exp(x - running max); a lane that saw only -inf
        # keeps sum 0 instead of exp(-inf - -inf) = NaN
        run_max = tl.full((BLOCK_M, BLOCK_N), float("-inf"), ACC)
        run_sum = tl.full((BLOCK_M, BLOCK_N), 0.0, ACC)
        for start in range(0, N, BLOCK_N):
            mask = row_mask[:, None] & ((start + cols) < N)[None, :]
            offsets = base[:, None] + (start + cols)[None, :] * INNER
            x = tl.load(x_ptr + offsets, mask=mask, other=float("-inf")).to(ACC)
            new_max = max_nan_combine(run_max, x)
            empty = new_max == float("-inf")
            run_sum = tl.where(empty, 0.0, run_sum * tl.exp(run_max - new_max) + tl.exp(x - new_max))
            run_max = new_max
        row_max = tl.reduce(run_max, 1, max_nan_combine)[:, None]
        scaled = tl.where(run_max == float("-inf"), 0.0, run_sum * tl.exp(run_max - row_max))
        total = tl.reduce(scaled, 1, add_combine)[:, None]
        log_total = tl.log(total)
        for start in range(0, N, BLOCK_N):
            mask = row_mask[:, None] & ((start + cols) < N)[None, :]
            offsets = base[:, None] + (start + cols)[None, :] * INNER
            x = tl.load(x_ptr + offsets, mask=mask, other=float("-inf")).to(ACC)
            if LOG:
                y = x - row_max - log_total
            else:
                y = tl.exp(x - row_max) / total
            tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_backward_kernel(
    grad_ptr,  # (OUTER, N, INNER) contiguous: dL/dy
    y_ptr,  # (OUTER, N, INNER) contiguous: the forward's output
    dx_ptr,  # (OUTER, N, INNER) contiguous
    M,
    N,
    INNER,
    LOG: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 data, else float32
):
    # softmax:      dx = y * (g - sum(g * y))
    # log_softmax:  dx = g - exp(y) * sum(g)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    if INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    row_mask = rows < M
    base = (rows // INNER) * N * INNER + rows % INNER
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, ACC)
    for start in range(0, N, BLOCK_N):
        mask = row_mask[:, None] & ((start + cols) < N)[None, :]
        offsets = base[:, None] + (start + cols)[None, :] * INNER
        g = tl.load(grad_ptr + offsets, mask=mask, other=0.0).to(ACC)
        if LOG:
            acc += g
        else:
            acc += g * tl.load(y_ptr + offsets, mask=mask, other=0.0).to(ACC)
    dot = tl.reduce(acc, 1, add_combine)[:, None]
    for start in range(0, N, BLOCK_N):
        mask = row_mask[:, None] & ((start + cols) < N)[None, :]
        offsets = base[:, None] + (start + cols)[None, :] * INNER
        g = tl.load(grad_ptr + offsets, mask=mask, other=0.0).to(ACC)
        y = tl.load(y_ptr + offsets, mask=mask, other=0.0).to(ACC)
        if LOG:
            dx = g - tl.exp(y) * dot
        else:
            dx = y * (g - dot)
        tl.store(dx_ptr + offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


_forward = LaunchCache(_softmax_kernel, name="softmax")
_backward = LaunchCache(_softmax_backward_kernel, name="softmax_backward")


def _wrap_dim(dim: int, ndim: int) -> int:
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})"
        )
    return dim % rank


def _geometry(shape: torch.Size, dim: int) -> tuple[int, int, int]:
    """(M rows, N per row, INNER) of a contiguous tensor reduced over ``dim``."""
    if len(shape) == 0:
        return 1, 1, 1
    n = shape[dim]
    inner = math.prod(shape[dim + 1:])
    return math.prod(shape) // max(n, 1), n, inner


def _bind(kernel: LaunchCache, tensors: tuple[torch.Tensor, ...], dim: int, **constexprs: Any) -> Launch | None:
    """The launch of ``kernel`` over ``tensors`` (contiguous, all of one shape) with the
    config chosen for their shape bucket; None where there is nothing to compute."""
    m, n, inner = _geometry(tensors[0].shape, dim)
    if m * n == 0:
        return None

    def build(config: KernelConfig) -> Launch:
        block_m = min(config.params["BLOCK_M"], next_power_of_2(m))
        block_n = min(config.params["BLOCK_N"], next_power_of_2(n))
        if kernel is _forward:
            constexprs["ONE_TILE"] = n <= block_n
        return Launch(
            kernel, (cdiv(m, block_m),), len(tensors), (m, n, inner), tensors[0].device,
            config=config, options=SOFTMAX.options(), INT64=m * n > _INT32, BLOCK_M=block_m,
            BLOCK_N=block_n, ACC=TL_DTYPES[acc_dtype(tensors[0].dtype)],
            **constexprs,
        )

    def bench(config: KernelConfig) -> float:
        launch = build(config)
        return bench_ms(lambda: launch(*tensors))

    key = (kernel.name, str(tensors[0].dtype), m.bit_length(), n.bit_length(), inner == 1)
    return build(SOFTMAX.choose(key, bench))


class _Plan:
    """One call signature of a softmax (forward or backward) without ``out=``: make the
    inputs contiguous where their layout needs it, allocate the result, launch."""

    __slots__ = ("copy", "device", "dtype", "launch", "like", "shape", "strides")

    def __init__(self, copy: tuple[bool, ...], result: torch.Tensor, launch: Launch | None) -> None:
        self.copy = copy  # per input: not contiguous, so copied first
        self.shape = tuple(result.shape)
        self.strides = result.stride()
        self.dtype = result.dtype
        self.device = result.device
        self.launch = launch
        self.like: int | None = None  # an input the result can be allocated like (set by the caller)

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        if True in self.copy:
            inputs = tuple(t.contiguous() if c else t for t, c in zip(inputs, self.copy))
        # the cheapest allocation calls on a GPU's host: empty_like, then empty_strided
        # (torch.empty parses several signatures: 1.2-1.5 us more)
        if self.like is not None:
            result = torch.empty_like(inputs[self.like])
        else:
            result = torch.empty_strided(self.shape, self.strides, dtype=self.dtype, device=self.device)
        if self.launch is not None:
            self.launch(*inputs, result)
        return result


#: plans by (LOG, input signatures, dim, half_to_float or input_dtype, forward/backward)
_plans = PlanCache("softmax")


def _into(out: torch.Tensor | None, result: torch.Tensor) -> torch.Tensor:
    if out is None:
        return result
    if out.shape != result.shape:
        out.resize_(result.shape)
    return out.copy_(result)


def _check_out(out: torch.Tensor, dtype: torch.dtype, device: torch.device) -> None:
    """A structured op's ``out``: its dtype and device must be the result's (no cast)."""
    for what, want, got in (("dtype", dtype, out.dtype), ("device", device, out.device)):
        if want != got:
            raise RuntimeError(f"Expected out tensor to have {what} {_c10_name(want)}, but got "
                               f"{_c10_name(got)} instead")


def _c10_name(value: torch.dtype | torch.device) -> str:
    """How ATen's messages name a dtype (its C++ type) or a device."""
    if isinstance(value, torch.device):
        return str(value)
    return {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
            torch.bfloat16: "c10::BFloat16"}.get(value, str(value).removeprefix("torch."))


def _softmax_forward(
    x: torch.Tensor, dim: int, half_to_float: bool, log: bool, out: torch.Tensor | None = None
) -> Any:
    if out is None:
        key = (log, x.dtype, x.shape, x.stride(), x.device, dim, half_to_float)
        plan = _plans.get(key)
        if plan is not None:
            return plan(x)
    if x.dtype not in _FLOATS:
        return NotImplemented  # ATen raises its own "not implemented for" error
    dtype = x.dtype
    if half_to_float:
        if x.device.type == "cpu" or x.dtype != torch.float16:
            return NotImplemented  # ATen decides (its CPU kernel refuses the conversion)
        dtype = torch.float32
    wrapped = _wrap_dim(dim, x.dim())
    if out is not None:
        _check_out(out, dtype, x.device)
    copy = not x.is_contiguous()
    x = x.contiguous()
    direct = out is not None and out.dtype == dtype and out.shape == x.shape and out.is_contiguous()
    y = out if direct else torch.empty(x.shape, dtype=dtype, device=x.device)
    launch = _bind(_forward, (x, y), wrapped, LOG=log)
    if launch is not None:
        launch(x, y)
    if out is None:
        plan = _Plan((copy,), y, launch)
        if not copy and x.dtype == y.dtype and x.stride() == y.stride():
            plan.like = 0
        _plans.store(key, plan)
    return y if direct else _into(out, y)


def _softmax_backward(
    grad: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype, log: bool,
    out: torch.Tensor | None = None,
) -> Any:
    if out is None:
        key = (log, signature(grad), signature(output), dim, input_dtype)
        plan = _plans.get(key)
        if plan is not None:
            return plan(grad, output)
    if grad.dtype not in _FLOATS or input_dtype not in _FLOATS or grad.shape != output.shape:
        return NotImplemented
    wrapped = _wrap_dim(dim, output.dim())
    copy = (not grad.is_contiguous(), not output.is_contiguous())
    grad, output = grad.contiguous(), output.contiguous()
    dx = torch.empty(output.shape, dtype=input_dtype, device=output.device)
    launch = _bind(_backward, (grad, output, dx), wrapped, LOG=log)
    if launch is not None:
        launch(grad, output, dx)
    if out is None:
        plan = _Plan(copy, dx, launch)
        if not copy[1] and output.dtype == dx.dtype and output.stride() == dx.stride():
            plan.like = 1
        _plans.store(key, plan)
    return _into(out, dx)


@aten_op("_softmax")
def softmax(self: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    """Numerically stable softmax over ``dim``, computed in fp32 for half types."""
    return _softmax_forward(self, dim, half_to_float, log=False)


@aten_op("_softmax.out")
def softmax_out(self: torch.Tensor, dim: int, half_to_float: bool, *, out: torch.Tensor) -> torch.Tensor:
    return _softmax_forward(self, dim, half_to_float, log=False, out=out)


@aten_op("_log_softmax")
def log_softmax(self: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    """log(softmax(x)) over ``dim``, as ``x - max - log(sum(exp(x - max)))``."""
    return _softmax_forward(self, dim, half_to_float, log=True)


@aten_op("_log_softmax.out")
def log_softmax_out(self: torch.Tensor, dim: int, half_to_float: bool, *, out: torch.Tensor) -> torch.Tensor:
    return _softmax_forward(self, dim, half_to_float, log=True, out=out)


@aten_op("_softmax_backward_data")
def softmax_backward(
    grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype
) -> torch.Tensor:
    """Gradient of softmax from its output: ``y * (g - sum(g * y))``."""
    return _softmax_backward(grad_output, output, dim, input_dtype, log=False)


@aten_op("_log_softmax_backward_data")
def log_softmax_backward(
    grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype
) -> torch.Tensor:
    """Gradient of log_softmax from its output: ``g - exp(y) * sum(g)``."""
    return _softmax_backward(grad_output, output, dim, input_dtype, log=True)
