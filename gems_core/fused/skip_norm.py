"""Residual add fused with the norm that follows it, as in pre-norm transformer blocks:

    h = x + residual                 (the new residual stream, in the input dtype)
    skip_rms_norm:   y = h / sqrt(mean(h^2) + eps) * w
    skip_layer_norm: y = (h - mean(h)) / sqrt(var(h) + eps) * w + b

over the last dim; both return ``(y, h)``. One program per row; statistics in fp32 (fp64
for fp64 inputs). The
backward recomputes mean and rstd from ``h`` (one extra read of a row, no saved statistics),
so the forward keeps nothing but its outputs.
"""

from typing import Any

import torch
import triton
import triton.language as tl

from ..host_math import next_power_of_2
from ..launch_cache import LaunchCache
from ..ops.norm import weight_and_bias_grad
from . import _device

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_BLOCK_N = 1024


@triton.jit
def _row_stats(h_ptr, N, eps, RMS: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_N: tl.constexpr):
    # (mean, rstd) of one row: mean = 0 for RMS; rstd = 1 / sqrt(mean((h - mean)^2) + eps)
    cols = tl.arange(0, BLOCK_N)
    mean = 0.0
    if not RMS:
        acc = tl.full((BLOCK_N,), 0.0, COMPUTE)
        for start in range(0, N, BLOCK_N):
            acc += tl.load(h_ptr + start + cols, mask=start + cols < N, other=0.0).to(COMPUTE)
        mean = tl.sum(acc, 0) / N
    acc = tl.full((BLOCK_N,), 0.0, COMPUTE)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        h = tl.load(h_ptr + start + cols, mask=mask, other=0.0).to(COMPUTE)
        centered = tl.where(mask, h - mean, 0.0)
        acc += centered * centered
    rstd = 1.0 / tl.sqrt(tl.sum(acc, 0) / N + eps)
    return mean, rstd


@triton.jit
def _skip_norm_forward_kernel(
    x_ptr,  # (M, N) contiguous
    r_ptr,  # (M, N) contiguous: the residual
    h_ptr,  # (M, N) contiguous: x + residual
    y_ptr,  # (M, N) contiguous
    w_ptr,  # (N,) when HAS_W
    b_ptr,  # (N,) when HAS_B
    N,
    eps,
    RMS: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    COMPUTE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_ptr + row * N + start + cols, mask=mask, other=0.0).to(COMPUTE)
        r = tl.load(r_ptr + row * N + start + cols, mask=mask, other=0.0).to(COMPUTE)
        tl.store(h_ptr + row * N + start + cols, (x + r).to(h_ptr.dtype.element_ty), mask=mask)
    # statistics of h as stored (rounded to its dtype), as the unfused ops see it
    mean, rstd = _row_stats(h_ptr + row * N, N, eps, RMS, COMPUTE, BLOCK_N)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        y = (tl.load(h_ptr + row * N + start + cols, mask=mask, other=0.0).to(COMPUTE) - mean) * rstd
        if HAS_W:
            y = y * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(COMPUTE)
        if HAS_B:
            y = y + tl.load(b_ptr + start + cols, mask=mask, other=0.0).to(COMPUTE)
        tl.store(y_ptr + row * N + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _skip_norm_backward_kernel(
    dy_ptr,  # (M, N) contiguous: dL/dy
    dh_in_ptr,  # (M, N) contiguous: dL/dh from h's other uses
    h_ptr,  # (M, N) contiguous
    w_ptr,  # (N,) when HAS_W
    dh_ptr,  # (M, N) contiguous: dL/dh in all, which is dL/dx and dL/dresidual
    mean_ptr,  # (M,) in COMPUTE
    rstd_ptr,  # (M,) in COMPUTE
    N,
    eps,
    RMS: tl.constexpr,
    HAS_W: tl.constexpr,
    COMPUTE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # with n = (h - mean) rstd and g = dy w:
    # layer: dh = rstd (g - mean(g) - n mean(g n)) + dh_in;  rms: dh = rstd (g - n mean(g n)) + dh_in
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mean, rstd = _row_stats(h_ptr + row * N, N, eps, RMS, COMPUTE, BLOCK_N)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    sum_g = tl.full((BLOCK_N,), 0.0, COMPUTE)
    sum_gn = tl.full((BLOCK_N,), 0.0, COMPUTE)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        g = tl.load(dy_ptr + row * N + start + cols, mask=mask, other=0.0).to(COMPUTE)
        if HAS_W:
            g = g * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(COMPUTE)
        n = (tl.load(h_ptr + row * N + start + cols, mask=mask, other=0.0).to(COMPUTE) - mean) * rstd
        sum_g += g
        sum_gn += tl.where(mask, g * n, 0.0)
    mean_g = tl.sum(sum_g, 0) / N
    mean_gn = tl.sum(sum_gn, 0) / N
    if RMS:
        mean_g = 0.0
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        g = tl.load(dy_ptr + row * N + start + cols, mask=mask, other=0.0).to(COMPUTE)
        if HAS_W:
            g = g * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(COMPUTE)
        n = (tl.load(h_ptr + row * N + start + cols, mask=mask, other=0.0).to(COMPUTE) - mean) * rstd
        dh = rstd * (g - mean_g - n * mean_gn)
        dh += tl.load(dh_in_ptr + row * N + start + cols, mask=mask, other=0.0).to(COMPUTE)
        tl.store(dh_ptr + row * N + start + cols, dh.to(dh_ptr.dtype.element_ty), mask=mask)


_forward = LaunchCache(_skip_norm_forward_kernel, name="skip_norm")
_backward = LaunchCache(_skip_norm_backward_kernel, name="skip_norm_backward")


def _check(name: str, x: torch.Tensor, residual: torch.Tensor, *params: torch.Tensor | None) -> None:
    _device.check(name, x, residual, *params)
    if x.dtype not in _FLOATS or x.dim() == 0:
        raise TypeError(f"{name}: expected a floating tensor of rank >= 1, got {x.dtype} {list(x.shape)}")
    if residual.shape != x.shape or residual.dtype != x.dtype:
        raise ValueError(f"{name}: residual must match x, got {list(residual.shape)} {residual.dtype}")
    for p in params:
        if p is not None and tuple(p.shape) != (x.shape[-1],):
            raise ValueError(f"{name}: weight and bias must have shape [{x.shape[-1]}], got {list(p.shape)}")


def _compute(x: torch.Tensor) -> Any:
    return tl.float64 if x.dtype == torch.float64 else tl.float32


def _block(n: int) -> int:
    return min(_BLOCK_N, next_power_of_2(max(n, 1)))


def _forward_impl(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                  bias: torch.Tensor | None, eps: float, rms: bool) -> tuple[torch.Tensor, torch.Tensor]:
    x, residual = x.contiguous(), residual.contiguous()
    h, y = torch.empty_like(x), torch.empty_like(x)
    n = x.shape[-1]
    m = x.numel() // n if n else 0
    if m and n:
        _forward((m,), x, residual, h, y, x if weight is None else weight.contiguous(),
                 x if bias is None else bias.contiguous(), n, float(eps),
                 RMS=rms, HAS_W=weight is not None, HAS_B=bias is not None, COMPUTE=_compute(x),
                 BLOCK_N=_block(n))
    return y, h


@torch.library.custom_op("gems::skip_norm_backward", mutates_args=())
def _skip_norm_backward_op(grad_y: torch.Tensor, grad_h: torch.Tensor | None, h: torch.Tensor,
                           weight: torch.Tensor | None, eps: float, rms: bool
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dh, dw, db) of skip_rms_norm (``rms``) or skip_layer_norm; dw and db have shape (N,)."""
    n = h.shape[-1]
    m = h.numel() // n if n else 0
    grad_y, h = grad_y.contiguous(), h.contiguous()
    grad_h = torch.zeros_like(h) if grad_h is None else grad_h.contiguous()
    dh = torch.empty_like(h)
    param_dtype = weight.dtype if weight is not None else h.dtype
    dw = torch.zeros((n,), dtype=param_dtype, device=h.device)
    db = torch.zeros((n,), dtype=param_dtype, device=h.device)
    if m and n:
        stats_dtype = torch.float64 if h.dtype == torch.float64 else torch.float32
        mean = torch.empty((m,), dtype=stats_dtype, device=h.device)
        rstd = torch.empty((m,), dtype=stats_dtype, device=h.device)
        _backward((m,), grad_y, grad_h, h, h if weight is None else weight.contiguous(), dh, mean, rstd,
                  n, float(eps), RMS=rms, HAS_W=weight is not None, COMPUTE=_compute(h),
                  BLOCK_N=_block(n))
        # sums over the rows, split over the chip: layer_norm's and rms_norm's own
        weight_and_bias_grad(grad_y, h, mean, rstd, dw, db, m, n, rms)
    return dh, dw, db


@_skip_norm_backward_op.register_fake
def _(grad_y: torch.Tensor, grad_h: torch.Tensor | None, h: torch.Tensor,
      weight: torch.Tensor | None, eps: float, rms: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dtype = weight.dtype if weight is not None else h.dtype
    params = h.new_empty((h.shape[-1],), dtype=dtype)
    return torch.empty_like(h, memory_format=torch.contiguous_format), params, params.clone()


def _fake_forward(x: torch.Tensor, *rest: Any) -> tuple[torch.Tensor, torch.Tensor]:
    like = torch.empty_like(x, memory_format=torch.contiguous_format)
    return like, like.clone()


# -- skip_rms_norm ---------------------------------------------------------------------------


@torch.library.custom_op("gems::skip_rms_norm", mutates_args=())
def _skip_rms_norm_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                      eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    _check("skip_rms_norm", x, residual, weight)
    return _forward_impl(x, residual, weight, None, eps, rms=True)


_skip_rms_norm_op.register_fake(_fake_forward)


def _save_rms(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(output[1], inputs[2])
    ctx.eps = inputs[3]


def _skip_rms_norm_grad(ctx: Any, grad_y: torch.Tensor, grad_h: torch.Tensor | None) -> tuple[Any, ...]:
    h, weight = ctx.saved_tensors
    dh, dw, _ = torch.ops.gems.skip_norm_backward(grad_y, grad_h, h, weight, ctx.eps, True)
    return dh, dh, (dw if weight is not None else None), None


_skip_rms_norm_op.register_autograd(_skip_rms_norm_grad, setup_context=_save_rms)


def skip_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = x + residual``; returns ``(rms_norm(h) * weight, h)`` over the last dim.

    Differentiable in x, residual and weight; traceable as ``torch.ops.gems.skip_rms_norm``."""
    if _device.foreign(x, residual, weight):
        return skip_rms_norm_reference(x, residual, weight, eps)
    return torch.ops.gems.skip_rms_norm(x, residual, weight, eps)


def skip_rms_norm_reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                            eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Pure-PyTorch :func:`skip_rms_norm`."""
    h = x + residual
    return torch.nn.functional.rms_norm(h, (h.shape[-1],), weight, eps), h


# -- skip_layer_norm -------------------------------------------------------------------------


@torch.library.custom_op("gems::skip_layer_norm", mutates_args=())
def _skip_layer_norm_op(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                        bias: torch.Tensor | None, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    _check("skip_layer_norm", x, residual, weight, bias)
    return _forward_impl(x, residual, weight, bias, eps, rms=False)


_skip_layer_norm_op.register_fake(_fake_forward)


def _save_layer(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(output[1], inputs[2])
    ctx.has_bias = inputs[3] is not None
    ctx.eps = inputs[4]


def _skip_layer_norm_grad(ctx: Any, grad_y: torch.Tensor, grad_h: torch.Tensor | None) -> tuple[Any, ...]:
    h, weight = ctx.saved_tensors
    dh, dw, db = torch.ops.gems.skip_norm_backward(grad_y, grad_h, h, weight, ctx.eps, False)
    return dh, dh, (dw if weight is not None else None), (db if ctx.has_bias else None), None


_skip_layer_norm_op.register_autograd(_skip_layer_norm_grad, setup_context=_save_layer)


def skip_layer_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                    bias: torch.Tensor | None = None, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """``h = x + residual``; returns ``(layer_norm(h) * weight + bias, h)`` over the last dim.

    Differentiable in x, residual, weight and bias; traceable as
    ``torch.ops.gems.skip_layer_norm``."""
    if _device.foreign(x, residual, weight, bias):
        return skip_layer_norm_reference(x, residual, weight, bias, eps)
    return torch.ops.gems.skip_layer_norm(x, residual, weight, bias, eps)


def skip_layer_norm_reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None = None,
                              bias: torch.Tensor | None = None, eps: float = 1e-5
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Pure-PyTorch :func:`skip_layer_norm`."""
    h = x + residual
    return torch.nn.functional.layer_norm(h, (h.shape[-1],), weight, bias, eps), h
