"""group_norm: ``native_group_norm`` and ``native_group_norm_backward``.

The input (N, C, *) is seen as N * G rows, each the C / G channels of one group times HxW
positions, contiguous. Forward: one program per row computes its mean and rstd in fp32 (two
passes: mean, then squared deviations) and writes ``(x - mean) * rstd * w[c] + b[c]``;
mean and rstd are (N, G). Backward: one program per row for the input gradient (the layer
norm formula with ``h = g * w[c]``), one per channel for the weight and bias gradients.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import TL_DTYPES
from ..host_math import next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from .norm import NORM
from .reduction import acc_dtype

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def _group_norm_kernel(
    x_ptr,  # (N * G, D) contiguous, D = CPG * HW
    y_ptr,  # (N * G, D) contiguous
    w_ptr,  # (C,) when HAS_W
    b_ptr,  # (C,) when HAS_B
    mean_ptr,  # (N * G,)
    rstd_ptr,  # (N * G,)
    G,
    CPG,
    HW,
    eps,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 data, else float32
):
    # mean = sum(x) / D,  rstd = 1 / sqrt(sum((x - mean)^2) / D + eps)
    # y[j] = (x[j] - mean) * rstd * w[c] + b[c],  c = (row % G) * CPG + j // HW
    row = tl.program_id(0).to(tl.int64)
    D = CPG * HW
    cols = tl.arange(0, BLOCK_N)
    acc = tl.full((BLOCK_N,), 0.0, ACC)
    for start in range(0, D, BLOCK_N):
        acc += tl.load(x_ptr + row * D + start + cols, mask=start + cols < D, other=0.0).to(ACC)
    mean = tl.sum(acc, 0) / D
    acc = tl.full((BLOCK_N,), 0.0, ACC)
    for start in range(0, D, BLOCK_N):
        mask = start + cols < D
        x = tl.load(x_ptr + row * D + start + cols, mask=mask, other=0.0).to(ACC)
        centered = tl.where(mask, x - mean, 0.0)
        acc += centered * centered
    rstd = 1.0 / tl.sqrt(tl.sum(acc, 0) / D + eps)
    tl.store(mean_ptr + row, mean.to(mean_ptr.dtype.element_ty))
    tl.store(rstd_ptr + row, rstd.to(rstd_ptr.dtype.element_ty))
    first_channel = (row % G) * CPG
    for start in range(0, D, BLOCK_N):
        mask = start + cols < D
        channel = first_channel + (start + cols) // HW
        y = (tl.load(x_ptr + row * D + start + cols, mask=mask, other=0.0).to(ACC) - mean) * rstd
        if HAS_W:
            y = y * tl.load(w_ptr + channel, mask=mask, other=0.0).to(ACC)
        if HAS_B:
            y = y + tl.load(b_ptr + channel, mask=mask, other=0.0).to(ACC)
        tl.store(y_ptr + row * D + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _group_norm_backward_kernel(
    grad_ptr,  # (N * G, D) contiguous: dL/dy
    x_ptr,  # (N * G, D) contiguous
    w_ptr,  # (C,) when HAS_W
    mean_ptr,  # (N * G,)
    rstd_ptr,  # (N * G,)
    dx_ptr,  # (N * G, D) contiguous
    G,
    CPG,
    HW,
    HAS_W: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 data, else float32
):
    # with n = (x - mean) * rstd and h = g * w[c]:  dx = rstd * (h - mean(h) - n * mean(h * n))
    row = tl.program_id(0).to(tl.int64)
    D = CPG * HW
    cols = tl.arange(0, BLOCK_N)
    first_channel = (row % G) * CPG
    mean = tl.load(mean_ptr + row).to(ACC)
    rstd = tl.load(rstd_ptr + row).to(ACC)
    sum_h = tl.full((BLOCK_N,), 0.0, ACC)
    sum_hn = tl.full((BLOCK_N,), 0.0, ACC)
    for start in range(0, D, BLOCK_N):
        mask = start + cols < D
        h = tl.load(grad_ptr + row * D + start + cols, mask=mask, other=0.0).to(ACC)
        if HAS_W:
            h = h * tl.load(w_ptr + first_channel + (start + cols) // HW, mask=mask, other=0.0).to(ACC)
        n = (tl.load(x_ptr + row * D + start + cols, mask=mask, other=0.0).to(ACC) - mean) * rstd
        sum_h += h
        sum_hn += tl.where(mask, h * n, 0.0)
    mean_h = tl.sum(sum_h, 0) / D
    mean_hn = tl.sum(sum_hn, 0) / D
    for start in range(0, D, BLOCK_N):
        mask = start + cols < D
        h = tl.load(grad_ptr + row * D + start + cols, mask=mask, other=0.0).to(ACC)
        if HAS_W:
            h = h * tl.load(w_ptr + first_channel + (start + cols) // HW, mask=mask, other=0.0).to(ACC)
        n = (tl.load(x_ptr + row * D + start + cols, mask=mask, other=0.0).to(ACC) - mean) * rstd
        dx = rstd * (h - mean_h - n * mean_hn)
        tl.store(dx_ptr + row * D + start + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _group_norm_weight_grad_kernel(
    grad_ptr,  # (N, C, HW) contiguous: dL/dy
    x_ptr,  # (N, C, HW) contiguous
    mean_ptr,  # (N, G)
    rstd_ptr,  # (N, G)
    dw_ptr,  # (C,) when HAS_DW
    db_ptr,  # (C,) when HAS_DB
    N,
    C,
    G,
    CPG,
    HW,
    HAS_DW: tl.constexpr,
    HAS_DB: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 data, else float32
):
    # dw[c] = sum over n, hw of g * (x - mean) * rstd,   db[c] = sum over n, hw of g
    channel = tl.program_id(0).to(tl.int64)
    group = channel // CPG
    cols = tl.arange(0, BLOCK_N)
    acc_w = tl.full((BLOCK_N,), 0.0, ACC)
    acc_b = tl.full((BLOCK_N,), 0.0, ACC)
    for n in range(N):
        offset = (n * C + channel) * HW
        mean = tl.load(mean_ptr + n * G + group).to(ACC)
        rstd = tl.load(rstd_ptr + n * G + group).to(ACC)
        for start in range(0, HW, BLOCK_N):
            mask = start + cols < HW
            g = tl.load(grad_ptr + offset + start + cols, mask=mask, other=0.0).to(ACC)
            acc_b += g
            if HAS_DW:
                x = tl.load(x_ptr + offset + start + cols, mask=mask, other=0.0).to(ACC)
                acc_w += tl.where(mask, g * (x - mean) * rstd, 0.0)
    if HAS_DW:
        tl.store(dw_ptr + channel, tl.sum(acc_w, 0).to(dw_ptr.dtype.element_ty))
    if HAS_DB:
        tl.store(db_ptr + channel, tl.sum(acc_b, 0).to(db_ptr.dtype.element_ty))


_forward = LaunchCache(_group_norm_kernel, name="group_norm")
_backward = LaunchCache(_group_norm_backward_kernel, name="group_norm_backward")
_weight_grad = LaunchCache(_group_norm_weight_grad_kernel, name="group_norm_weight_grad")


def _block(n: int, dtype: torch.dtype) -> dict[str, Any]:
    config = NORM.choose(("group_norm", n.bit_length()))
    return {"config": config, "options": NORM.options(),
            "BLOCK_N": min(config.params["BLOCK_N"], next_power_of_2(max(n, 1))),
            "ACC": TL_DTYPES[acc_dtype(dtype)]}


def _serves(x: torch.Tensor, n: int, c: int, hw: int, group: int, *params: torch.Tensor | None) -> bool:
    """Whether gems serves these arguments; ATen answers (and raises) otherwise."""
    if x.dtype not in _FLOATS or group <= 0 or c % group or hw <= 0 or x.numel() != n * c * hw:
        return False
    return all(p is None or (p.dtype == x.dtype and p.numel() == c) for p in params)


@aten_op("native_group_norm")
def native_group_norm(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, N: int, C: int, HxW: int,
    group: int, eps: float,
) -> Any:
    """(out, mean, rstd): group norm of (N, C, *) over G groups of C / G channels; mean and
    rstd are (N, G) in the input dtype."""
    if not _serves(input, N, C, HxW, group, weight, bias):
        return NotImplemented
    x = input.contiguous()
    out = torch.empty_like(x)
    mean = torch.empty((N, group), dtype=x.dtype, device=x.device)
    rstd = torch.empty((N, group), dtype=x.dtype, device=x.device)
    if N:
        cpg = C // group
        _forward((N * group,), x, out, weight if weight is not None else x, bias if bias is not None else x,
                 mean, rstd, group, cpg, HxW, float(eps), HAS_W=weight is not None, HAS_B=bias is not None,
                 **_block(cpg * HxW, x.dtype))
    return out, mean, rstd


@aten_op("native_group_norm_backward")
def native_group_norm_backward(
    grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
    weight: torch.Tensor | None, N: int, C: int, HxW: int, group: int, output_mask: Sequence[bool],
) -> Any:
    """(grad_input, grad_weight, grad_bias), each None where ``output_mask`` says so."""
    if not _serves(input, N, C, HxW, group, weight) or grad_out.shape != input.shape:
        return NotImplemented
    if mean.numel() != N * group or rstd.numel() != N * group:
        return NotImplemented
    grad, x = grad_out.contiguous(), input.contiguous()
    mean, rstd = mean.contiguous(), rstd.contiguous()
    cpg = C // group
    dx = dw = db = None
    if output_mask[0]:
        dx = torch.empty_like(x)
        if N:
            _backward((N * group,), grad, x, weight if weight is not None else x, mean, rstd, dx, group, cpg,
                      HxW, HAS_W=weight is not None, **_block(cpg * HxW, x.dtype))
    if output_mask[1] or output_mask[2]:
        dw = torch.empty((C,), dtype=x.dtype, device=x.device) if output_mask[1] else None
        db = torch.empty((C,), dtype=x.dtype, device=x.device) if output_mask[2] else None
        if N:
            _weight_grad((C,), grad, x, mean, rstd, dw if dw is not None else x, db if db is not None else x,
                         N, C, group, cpg, HxW, HAS_DW=dw is not None, HAS_DB=db is not None, **_block(HxW, x.dtype))
        else:
            for t in (dw, db):
                if t is not None:
                    t.zero_()
    return dx, dw, db
