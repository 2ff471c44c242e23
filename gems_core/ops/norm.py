"""layer_norm (``native_layer_norm`` and its backward) and rms_norm, with their gradients.

Both normalize each row of the input seen as (M, N), N the product of ``normalized_shape``;
one program per row, in fp32. The forward reads the rows where they lie when each is one
contiguous block and the leading dims step through them by one stride (a contiguous input,
the last position of a sequence ``x[:, -1]``, rows broadcast by ``expand``: :func:`row_stride`);
other layouts are copied first. The output is contiguous. ``rms_norm`` is a composite in ATen (it would decompose before
reaching a backend kernel), so it is registered on the Autograd key and brings its own
backward through an autograd.Function.

The forward of either is planned per call signature (dtypes, shapes, strides, devices of
input, weight and bias; normalized_shape; the type of eps): a repeat call only allocates and
launches, eps passed as it comes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from .. import runtime
from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..plan_cache import Launch, PlanCache, optional_signature, signature
from ..registry import aten_op
from ..tuning import Tunable
from .reduction import acc_dtype, add_combine, bench_ms

NORM = Tunable(
    "norm",
    params=("BLOCK_N",),
    defaults=[KernelConfig({"BLOCK_N": 1024}, num_warps=4)],
    description="layer_norm/rms_norm forward and backward: BLOCK_N elements of a row per step",
)

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_ROWS_PER_STEP = 16  # rows summed per step by the weight-gradient kernel
_WEIGHT_GRAD_COLUMNS = 128  # columns per program of the weight-gradient kernels
_PARTIAL_ROWS = 8  # slices' sums added per step by the second weight-gradient launch


@triton.jit
def _norm_forward_kernel(
    x_ptr,  # (M, N): rows of N contiguous elements, stride_x apart
    y_ptr,  # (M, N) contiguous
    w_ptr,  # (N,) when HAS_W
    b_ptr,  # (N,) when HAS_B
    mean_ptr,  # (M,) unless RMS
    rstd_ptr,  # (M,)
    stride_x,  # elements from one row of x to the next (N where x is contiguous)
    N,
    eps,
    RMS: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 inputs, else float32
    INF_NAN: tl.constexpr,  # rms: a row whose sum of squares is inf normalizes to NaN
):
    # layer:  mean = sum(x) / N,  rstd = 1 / sqrt(sum((x - mean)^2) / N + eps)
    # rms:    mean = 0,           rstd = 1 / sqrt(sum(x^2) / N + eps)
    # y = (x - mean) * rstd * w + b
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * N
    cols = tl.arange(0, BLOCK_N)
    mean = 0.0
    if not RMS:
        acc = tl.full((BLOCK_N,), 0.0, ACC)
        for start in range(0, N, BLOCK_N):
            acc += tl.load(x_row + start + cols, mask=start + cols < N, other=0.0).to(ACC)
        mean = tl.reduce(acc, 0, add_combine) / N
    acc = tl.full((BLOCK_N,), 0.0, ACC)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(ACC)
        centered = tl.where(mask, x - mean, 0.0)
        acc += centered * centered
    squares = tl.reduce(acc, 0, add_combine)
    rstd = 1.0 / tl.sqrt(squares / N + eps)
    if INF_NAN:
        rstd = tl.where(squares == float("inf"), float("nan"), rstd)
    if not RMS:
        tl.store(mean_ptr + row, mean.to(mean_ptr.dtype.element_ty))
    tl.store(rstd_ptr + row, rstd.to(rstd_ptr.dtype.element_ty))
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        y = (tl.load(x_row + start + cols, mask=mask, other=0.0).to(ACC) - mean) * rstd
        if HAS_W:
            y = y * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(ACC)
        if HAS_B:
            y = y + tl.load(b_ptr + start + cols, mask=mask, other=0.0).to(ACC)
        tl.store(y_row + start + cols, y.to(y_row.dtype.element_ty), mask=mask)


@triton.jit
def _norm_backward_kernel(
    grad_ptr,  # (M, N) contiguous: dL/dy
    x_ptr,  # (M, N) contiguous
    w_ptr,  # (N,) when HAS_W
    mean_ptr,  # (M,) unless RMS
    rstd_ptr,  # (M,)
    dx_ptr,  # (M, N) contiguous
    N,
    RMS: tl.constexpr,
    HAS_W: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 inputs, else float32
):
    # with n = (x - mean) * rstd and h = g * w:
    # layer:  dx = rstd * (h - mean(h) - n * mean(h * n))
    # rms:    dx = rstd * (h - n * mean(h * n))
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mean = 0.0
    if not RMS:
        mean = tl.load(mean_ptr + row).to(ACC)
    rstd = tl.load(rstd_ptr + row).to(ACC)
    sum_h = tl.full((BLOCK_N,), 0.0, ACC)
    sum_hn = tl.full((BLOCK_N,), 0.0, ACC)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        h = tl.load(grad_ptr + row * N + start + cols, mask=mask, other=0.0).to(ACC)
        if HAS_W:
            h = h * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(ACC)
        n = (tl.load(x_ptr + row * N + start + cols, mask=mask, other=0.0).to(ACC) - mean) * rstd
        sum_h += h
        sum_hn += tl.where(mask, h * n, 0.0)
    mean_h = tl.reduce(sum_h, 0, add_combine) / N
    mean_hn = tl.reduce(sum_hn, 0, add_combine) / N
    if RMS:
        mean_h = 0.0
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        h = tl.load(grad_ptr + row * N + start + cols, mask=mask, other=0.0).to(ACC)
        if HAS_W:
            h = h * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(ACC)
        n = (tl.load(x_ptr + row * N + start + cols, mask=mask, other=0.0).to(ACC) - mean) * rstd
        dx = rstd * (h - mean_h - n * mean_hn)
        tl.store(dx_ptr + row * N + start + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _norm_weight_grad_kernel(
    grad_ptr,  # (M, N) contiguous: dL/dy
    x_ptr,  # (M, N) contiguous
    mean_ptr,  # (M,) unless RMS
    rstd_ptr,  # (M,)
    dw_ptr,  # (R, N) when HAS_DW: a partial sum per slice of rows (R = 1: the gradient itself)
    db_ptr,  # (R, N) when HAS_DB
    M,
    N,
    rows_per_slice,  # a multiple of BLOCK_M
    RMS: tl.constexpr,
    HAS_DW: tl.constexpr,
    HAS_DB: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 inputs, else float32
):
    # over the rows of slice r: dw[r] = sum of g * (x - mean) * rstd,   db[r] = sum of g
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    first = tl.program_id(1).to(tl.int64) * rows_per_slice
    acc_w = tl.full((BLOCK_M, BLOCK_N), 0.0, ACC)
    acc_b = tl.full((BLOCK_M, BLOCK_N), 0.0, ACC)
    for step in range(0, rows_per_slice, BLOCK_M):
        rows = first + step + tl.arange(0, BLOCK_M)
        row_mask = rows < M
        mask = row_mask[:, None] & col_mask[None, :]
        offsets = rows[:, None] * N + cols[None, :]
        g = tl.load(grad_ptr + offsets, mask=mask, other=0.0).to(ACC)
        acc_b += g
        if HAS_DW:
            x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(ACC)
            rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0).to(ACC)
            if not RMS:
                x = x - tl.load(mean_ptr + rows, mask=row_mask, other=0.0).to(ACC)[:, None]
            acc_w += g * x * rstd[:, None]
    out = tl.program_id(1).to(tl.int64) * N + cols
    if HAS_DW:
        tl.store(dw_ptr + out, tl.reduce(acc_w, 0, add_combine).to(dw_ptr.dtype.element_ty), mask=col_mask)
    if HAS_DB:
        tl.store(db_ptr + out, tl.reduce(acc_b, 0, add_combine).to(db_ptr.dtype.element_ty), mask=col_mask)


@triton.jit
def _norm_partials_kernel(
    pw_ptr,  # (R, N) ACC when HAS_DW: the weight kernel's partial sums
    pb_ptr,  # (R, N) ACC when HAS_DB
    dw_ptr,  # (N,)
    db_ptr,  # (N,)
    R,
    N,
    HAS_DW: tl.constexpr,
    HAS_DB: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,
):
    # dw = sum over r of pw[r],   db = sum over r of pb[r]
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc_w = tl.full((BLOCK_R, BLOCK_N), 0.0, ACC)
    acc_b = tl.full((BLOCK_R, BLOCK_N), 0.0, ACC)
    for start in range(0, R, BLOCK_R):
        rows = start + tl.arange(0, BLOCK_R)
        mask = (rows < R)[:, None] & col_mask[None, :]
        offsets = rows[:, None] * N + cols[None, :]
        if HAS_DW:
            acc_w += tl.load(pw_ptr + offsets, mask=mask, other=0.0)
        if HAS_DB:
            acc_b += tl.load(pb_ptr + offsets, mask=mask, other=0.0)
    if HAS_DW:
        tl.store(dw_ptr + cols, tl.reduce(acc_w, 0, add_combine).to(dw_ptr.dtype.element_ty), mask=col_mask)
    if HAS_DB:
        tl.store(db_ptr + cols, tl.reduce(acc_b, 0, add_combine).to(db_ptr.dtype.element_ty), mask=col_mask)


_forward = LaunchCache(_norm_forward_kernel, name="norm")
_backward = LaunchCache(_norm_backward_kernel, name="norm_backward")
_weight_grad = LaunchCache(_norm_weight_grad_kernel, name="norm_weight_grad")
_partials = LaunchCache(_norm_partials_kernel, name="norm_weight_grad_partials")


def _launch(kernel: LaunchCache, grid_rows: int, n: int, args: Sequence[Any], **constexprs: Any) -> None:
    """Launch ``kernel`` with one program per row (``grid_rows``)."""

    acc = acc_dtype(args[0].dtype)

    def launch(config: KernelConfig) -> None:
        block_n = min(config.params["BLOCK_N"], next_power_of_2(n))
        kernel((grid_rows,), *args, config=config, options=NORM.options(), BLOCK_N=block_n, ACC=TL_DTYPES[acc], **constexprs)

    key = (kernel.name, str(args[0].dtype), n.bit_length())
    launch(NORM.choose(key, lambda config: bench_ms(lambda: launch(config))))


def _bind_forward(m: int, n: int, stride_x: int | None, tensors: tuple[torch.Tensor, ...], eps: float,
                  **constexprs: Any) -> Launch:
    """The forward kernel's launch over ``tensors`` (x, y, w, b, mean, rstd: the runtime
    arguments before the row stride and N), one program per row of x (``stride_x``
    elements apart; None: x is a contiguous copy), with the config chosen for the row
    length; a call passes the six tensors and eps."""
    stride_x = n if stride_x is None else stride_x

    def build(config: KernelConfig) -> Launch:
        block_n = min(config.params["BLOCK_N"], next_power_of_2(n))
        return Launch(_forward, (m,), 6, (stride_x, n), tensors[0].device, config=config,
                      options=NORM.options(), trailing=1, BLOCK_N=block_n, ACC=TL_DTYPES[acc_dtype(tensors[0].dtype)],
                      **constexprs)

    def bench(config: KernelConfig) -> float:
        launch = build(config)
        return bench_ms(lambda: launch.with_trailing(tensors, (eps,)))

    key = (_forward.name, str(tensors[0].dtype), n.bit_length())
    return build(NORM.choose(key, bench))


def row_stride(x: torch.Tensor, dims: int) -> int | None:
    """Elements from one row of ``x`` to the next, where its last ``dims`` dims are one
    contiguous block (a row) and its leading dims step through rows by one stride: N for a
    contiguous tensor, more for a slice of rows such as ``x[:, -1]`` of a (B, S, H) tensor,
    0 for rows broadcast by ``expand``; None where the rows must be copied first."""
    sizes, strides = x.shape, x.stride()
    lead = x.dim() - dims
    expected = 1
    for i in range(x.dim() - 1, lead - 1, -1):
        if sizes[i] != 1 and strides[i] != expected:
            return None
        expected *= sizes[i]
    stepping = [(sizes[i], strides[i]) for i in range(lead) if sizes[i] != 1]
    for (_, outer), (size, inner) in zip(stepping, stepping[1:]):
        if outer != inner * size:
            return None
    return stepping[-1][1] if stepping else expected


def _rows(x: torch.Tensor, normalized_shape: Sequence[int], *params: torch.Tensor | None) -> tuple[int, int] | None:
    """(M, N) of ``x`` normalized over its trailing ``normalized_shape``; None where ATen
    must raise its own error (a shape that does not match) or gems does not serve it."""
    shape = tuple(normalized_shape)
    if x.dtype not in _FLOATS or not shape or tuple(x.shape[x.dim() - len(shape):]) != shape:
        return None
    if any(p is not None and (tuple(p.shape) != shape or p.dtype not in _FLOATS) for p in params):
        return None
    n = math.prod(shape)
    return (x.numel() // n if n else 0), n


def _stats_dtype(x: torch.Tensor) -> torch.dtype:
    # ATen's CPU kernel keeps mean/rstd in the input dtype; its GPU kernels in the
    # accumulation type (float32 for half types)
    if x.device.type == "cpu" or x.dtype == torch.float64:
        return x.dtype
    return torch.float32


def _flat(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return t.contiguous() if t is not None else like  # a placeholder pointer the kernel never reads


class _LayerNormPlan:
    """native_layer_norm for one call signature: copy what is not contiguous, allocate the
    output and the statistics, launch with this call's eps."""

    __slots__ = ("copy", "device", "launch", "stats_dtype", "stats_shape", "stats_strides")

    def __init__(self, copy: tuple[bool, bool, bool], stats: torch.Tensor, launch: Launch | None) -> None:
        self.copy = copy  # input (rows not strided alike), weight, bias (not contiguous): copied first
        self.stats_shape = tuple(stats.shape)
        self.stats_strides = stats.stride()
        self.stats_dtype = stats.dtype
        self.device = stats.device
        self.launch = launch  # None: no rows

    def __call__(self, input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        copy_x, copy_w, copy_b = self.copy
        x = input.contiguous() if copy_x else input
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        mean = torch.empty_strided(self.stats_shape, self.stats_strides, dtype=self.stats_dtype, device=self.device)
        rstd = torch.empty_strided(self.stats_shape, self.stats_strides, dtype=self.stats_dtype, device=self.device)
        if self.launch is not None:
            w = x if weight is None else weight.contiguous() if copy_w else weight
            b = x if bias is None else bias.contiguous() if copy_b else bias
            self.launch.with_trailing((x, out, w, b, mean, rstd), (float(eps),))
        return out, mean, rstd


#: plans by (input, normalized_shape, weight, bias, type of eps)
_layer_norm_plans = PlanCache("layer_norm")


def _not_contiguous(t: torch.Tensor | None) -> bool:
    return t is not None and not t.is_contiguous()


@aten_op("native_layer_norm")
def native_layer_norm(
    input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
    bias: torch.Tensor | None, eps: float,
) -> Any:
    """(out, mean, rstd): layer norm over the trailing ``normalized_shape``; mean and rstd
    have the input's leading dims and a 1 per normalized dim."""
    key = (signature(input), tuple(normalized_shape), optional_signature(weight),
           optional_signature(bias), type(eps))
    plan = _layer_norm_plans.get(key)
    if plan is not None:
        return plan(input, weight, bias, eps)
    rows = _rows(input, normalized_shape, weight, bias)
    if rows is None or rows[1] == 0 or any(p is not None and p.dtype != input.dtype for p in (weight, bias)):
        # parameters of another dtype: ATen's CPU kernel takes them (mixed types), its GPU
        # kernels raise; ATen answers on every device
        return NotImplemented
    m, n = rows
    stride = row_stride(input, len(normalized_shape))
    copy = (stride is None, _not_contiguous(weight), _not_contiguous(bias))
    x = input.contiguous() if stride is None else input
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    stats_shape = tuple(input.shape[: input.dim() - len(normalized_shape)]) + (1,) * len(normalized_shape)
    mean = torch.empty(stats_shape, dtype=_stats_dtype(input), device=input.device)
    rstd = torch.empty(stats_shape, dtype=_stats_dtype(input), device=input.device)
    launch = None
    if m:
        tensors = (x, out, _flat(weight, x), _flat(bias, x), mean, rstd)
        launch = _bind_forward(m, n, stride, tensors, float(eps), RMS=False, HAS_W=weight is not None,
                               HAS_B=bias is not None, INF_NAN=False)
        launch.with_trailing(tensors, (float(eps),))
    _layer_norm_plans.store(key, _LayerNormPlan(copy, mean, launch))
    return out, mean, rstd


def _norm_backward(
    grad: torch.Tensor, x: torch.Tensor, mean: torch.Tensor | None, rstd: torch.Tensor,
    weight: torch.Tensor | None, m: int, n: int, mask: Sequence[bool], bias_dtype: torch.dtype | None,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """(dx, dw, db) of a layer norm (``mean`` given) or an rms norm (``mean`` None); dw and
    db flat (N,)."""
    rms = mean is None
    grad, x, rstd = grad.contiguous(), x.contiguous(), rstd.contiguous()
    mean = rstd if mean is None else mean.contiguous()
    dx = dw = db = None
    if mask[0]:
        dx = torch.empty_like(x)
        if m:
            _launch(_backward, m, n, (grad, x, _flat(weight, x), mean, rstd, dx, n),
                    RMS=rms, HAS_W=weight is not None)
    want_dw = bool(mask[1]) and weight is not None
    want_db = bool(mask[2]) and bias_dtype is not None
    if want_dw:
        dw = torch.empty((n,), dtype=weight.dtype, device=x.device)
    if want_db:
        db = torch.empty((n,), dtype=bias_dtype, device=x.device)
    if want_dw or want_db:
        if m:
            weight_and_bias_grad(grad, x, mean, rstd, dw, db, m, n, rms)
        else:
            for t in (dw, db):
                if t is not None:
                    t.zero_()
    return dx, dw, db


def weight_and_bias_grad(grad: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                          dw: torch.Tensor | None, db: torch.Tensor | None, m: int, n: int, rms: bool) -> None:
    """dw and db (where not None): sums over the m rows, split into slices of rows so that
    the programs fill the chip (one program per column block would sum thousands of rows
    alone), each slice's sum in float32 (float64 for float64) and then the slices' sums
    added in a second launch; one slice (few rows) writes the result at once."""
    acc = acc_dtype(x.dtype)
    block_n = min(_WEIGHT_GRAD_COLUMNS, next_power_of_2(n))
    columns = cdiv(n, block_n)
    wanted = max(1, 4 * runtime.compute_units(x.device.type, x.device.index) // columns)
    rows_per_slice = cdiv(cdiv(m, min(wanted, cdiv(m, _ROWS_PER_STEP))), _ROWS_PER_STEP) * _ROWS_PER_STEP
    slices = cdiv(m, rows_per_slice)
    config = KernelConfig({"BLOCK_N": block_n}, num_warps=4)
    flags = {"HAS_DW": dw is not None, "HAS_DB": db is not None, "ACC": TL_DTYPES[acc]}
    if slices == 1:
        _weight_grad((columns, 1), grad, x, mean, rstd, _flat(dw, x), _flat(db, x), m, n, rows_per_slice,
                     config=config, options=NORM.options(), RMS=rms, BLOCK_M=_ROWS_PER_STEP, BLOCK_N=block_n,
                     **flags)
        return
    pw = torch.empty((slices, n), dtype=acc, device=x.device) if dw is not None else None
    pb = torch.empty((slices, n), dtype=acc, device=x.device) if db is not None else None
    _weight_grad((columns, slices), grad, x, mean, rstd, _flat(pw, x), _flat(pb, x), m, n, rows_per_slice,
                 config=config, options=NORM.options(), RMS=rms, BLOCK_M=_ROWS_PER_STEP, BLOCK_N=block_n, **flags)
    _partials((columns,), _flat(pw, x), _flat(pb, x), _flat(dw, x), _flat(db, x), slices, n,
              config=config, options=NORM.options(), BLOCK_R=_PARTIAL_ROWS, BLOCK_N=block_n, **flags)


@aten_op("native_layer_norm_backward")
def native_layer_norm_backward(
    grad_out: torch.Tensor, input: torch.Tensor, normalized_shape: Sequence[int], mean: torch.Tensor,
    rstd: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, output_mask: Sequence[bool],
) -> Any:
    """(grad_input, grad_weight, grad_bias), each None where ``output_mask`` says so."""
    rows = _rows(input, normalized_shape, weight, bias)
    if rows is None or rows[1] == 0 or grad_out.shape != input.shape:
        return NotImplemented
    m, n = rows
    bias_dtype = bias.dtype if bias is not None else None
    dx, dw, db = _norm_backward(grad_out, input, mean, rstd, weight, m, n, output_mask, bias_dtype)
    return (
        dx.view(input.shape) if dx is not None else None,
        dw.view(weight.shape) if dw is not None and weight is not None else None,
        db.view(bias.shape) if db is not None and bias is not None else None,
    )


class _RMSNormPlan:
    """rms_norm's forward for one call signature (the launch is bound on the first
    forward, which allocates the tensors it benchmarks on)."""

    __slots__ = ("copy_w", "default_eps", "launch", "m", "n", "stride_x")

    def __init__(self, m: int, n: int, stride_x: int | None, copy_w: bool, default_eps: float) -> None:
        self.m = m
        self.n = n
        self.stride_x = stride_x  # rows of the input this far apart; None: copied first
        self.copy_w = copy_w
        self.default_eps = default_eps
        self.launch: Launch | None = None


def _rms_norm_forward(
    x: torch.Tensor, weight: torch.Tensor | None, plan: _RMSNormPlan, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, the input as rows (strided, or copied where its rows are not), rstd) of an RMSNorm."""
    m, n = plan.m, plan.n
    flat = x.contiguous() if plan.stride_x is None else x
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty_strided((m,), (1,), dtype=acc_dtype(x.dtype), device=x.device)
    if m:
        w = flat if weight is None else weight.contiguous() if plan.copy_w else weight
        tensors = (flat, y, w, flat, rstd, rstd)
        launch = plan.launch
        if launch is None:
            # ATen's GPU kernel accumulates the squares as a running mean, which an inf turns
            # into NaN for the whole row; its CPU composite scales the row's finite values to 0
            launch = plan.launch = _bind_forward(m, n, plan.stride_x, tensors, eps, RMS=True,
                                                 HAS_W=weight is not None, HAS_B=False,
                                                 INF_NAN=x.device.type != "cpu")
        launch.with_trailing(tensors, (eps,))
    return y, flat, rstd


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, plan: _RMSNormPlan, eps: float) -> torch.Tensor:
        y, flat, rstd = _rms_norm_forward(x, weight, plan, eps)
        ctx.save_for_backward(flat, weight, rstd)
        ctx.rows = (plan.m, plan.n)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight, rstd = ctx.saved_tensors
        m, n = ctx.rows
        mask = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], False)
        dx, dw, _ = _norm_backward(grad, x, None, rstd, weight, m, n, mask, None)
        return (
            dx.view(grad.shape) if dx is not None else None,
            dw.view(weight.shape) if dw is not None else None,
            None, None,
        )


#: plans by (input, normalized_shape, weight, type of eps)
_rms_norm_plans = PlanCache("rms_norm")


@aten_op("rms_norm", autograd=True)
def rms_norm(
    input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
    eps: float | None = None,
) -> Any:
    """x / sqrt(mean(x^2) + eps) * weight over the trailing ``normalized_shape``; ``eps``
    defaults to the machine epsilon of the computation type (float32 for half types)."""
    key = (signature(input), tuple(normalized_shape), optional_signature(weight), type(eps))
    plan = _rms_norm_plans.get(key)
    if plan is None:
        rows = _rows(input, normalized_shape, weight)
        if rows is None or rows[1] == 0:
            return NotImplemented
        default_eps = torch.finfo(torch.float64 if input.dtype == torch.float64 else torch.float32).eps
        plan = _RMSNormPlan(rows[0], rows[1], row_stride(input, len(normalized_shape)), _not_contiguous(weight),
                            default_eps)
        _rms_norm_plans.store(key, plan)
    value = float(plan.default_eps if eps is None else eps)
    if torch.is_grad_enabled() and (input.requires_grad or (weight is not None and weight.requires_grad)):
        return _RMSNorm.apply(input, weight, plan, value)
    return _rms_norm_forward(input, weight, plan, value)[0]  # nothing to differentiate: no node
