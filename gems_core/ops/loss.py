"""nll_loss and nll_loss2d, forward and backward: with the log_softmax of
:mod:`.softmax` this is the whole of ``F.cross_entropy`` (ATen's ``cross_entropy_loss`` is
a composite of log_softmax and nll_loss; its label smoothing adds sums gems also serves).

The input is seen as (N, C, S) — S = 1 for nll_loss, H*W for nll_loss2d — and the target
as (N, S). Each (n, s) position contributes ``-w[t] * x[n, t, s]`` with ``t`` its target,
nothing where ``t == ignore_index``. ``mean`` divides the summed loss by the summed weights
(NaN when every target is ignored, as in ATen). The backward zeroes the gradient with the
fill kernel (aligned vector stores whatever C is) and writes each position's one nonzero
entry. A target outside [0, C) raises ATen's IndexError on a host device and trips a
device-side assert in the kernel elsewhere (no ATen call outside the kernels: the native
layer replays a training step's loss).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import TL_DTYPES
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from .factory import zeros
from .indexing import device_check_options, host_checks_indices
from .masked import read_back
from .reduction import acc_dtype

_BLOCK = 1024  # positions per program
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_NONE, _MEAN, _SUM = 0, 1, 2


@triton.jit
def _nll_forward_kernel(
    x_ptr,  # (N, C, S) contiguous: log-probabilities
    target_ptr,  # (N * S,) contiguous int64
    weight_ptr,  # (C,) when HAS_W
    loss_ptr,  # (N * S,) when REDUCE is false, else (programs,) partial sums
    weight_sum_ptr,  # (programs,) partial sums of the weights taken
    bad_ptr,  # (1,) int32: set when a target is out of range (not CHECK)
    P,
    C,
    S,
    ignore_index,
    HAS_W: tl.constexpr,
    REDUCE: tl.constexpr,
    CHECK: tl.constexpr,  # assert 0 <= target < C on the device instead of setting bad
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 data, else float32
):
    # loss[p] = -w[t] * x[n, t, s]  for p = n * S + s, t = target[p] != ignore_index
    pos = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = pos < P
    t = tl.load(target_ptr + pos, mask=mask, other=ignore_index)
    take = mask & (t != ignore_index)
    valid = (t >= 0) & (t < C)
    if CHECK:
        tl.device_assert(valid | ~take, "nll_loss: a target is out of bounds")
    else:
        tl.store(bad_ptr, 1, mask=tl.sum((take & ~valid).to(tl.int32), 0) > 0)
    take = take & valid
    w = tl.full((BLOCK,), 1.0, ACC)
    if HAS_W:
        w = tl.load(weight_ptr + t, mask=take, other=0.0).to(ACC)
    w = tl.where(take, w, 0.0)
    x = tl.load(x_ptr + (pos // S) * C * S + t * S + pos % S, mask=take, other=0.0).to(ACC)
    loss = -w * x
    if REDUCE:
        pid = tl.program_id(0)
        tl.store(loss_ptr + pid, tl.sum(loss, 0))
        tl.store(weight_sum_ptr + pid, tl.sum(w, 0))
    else:
        tl.store(loss_ptr + pos, loss.to(loss_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _nll_total_kernel(
    loss_ptr,  # (R,) float32 partial sums
    weight_sum_ptr,  # (R,) float32 partial sums
    out_ptr,  # () the loss
    total_weight_ptr,  # () the summed weights
    R,
    MEAN: tl.constexpr,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 data, else float32
):
    # out = sum(loss) (/ sum(w) for MEAN)
    idx = tl.arange(0, BLOCK)
    loss = tl.full((BLOCK,), 0.0, ACC)
    weight = tl.full((BLOCK,), 0.0, ACC)
    for start in range(0, R, BLOCK):
        loss += tl.load(loss_ptr + start + idx, mask=start + idx < R, other=0.0)
        weight += tl.load(weight_sum_ptr + start + idx, mask=start + idx < R, other=0.0)
    total = tl.sum(loss, 0)
    total_weight = tl.sum(weight, 0)
    if MEAN:
        total = total / total_weight
    tl.store(out_ptr, total.to(out_ptr.dtype.element_ty))
    tl.store(total_weight_ptr, total_weight.to(total_weight_ptr.dtype.element_ty))


@triton.jit
def _nll_grad_at(pos, live, grad_ptr, target_ptr, weight_ptr, total_weight_ptr, C, ignore_index,
                 HAS_W: tl.constexpr, PER_POSITION: tl.constexpr, MEAN: tl.constexpr, ACC: tl.constexpr):
    """(target, gradient there) at positions ``pos``: -w[t] * g (/ total_weight for MEAN),
    0 where t is ignore_index (or no class)."""
    t = tl.load(target_ptr + pos, mask=live, other=ignore_index)
    take = live & (t != ignore_index) & (t >= 0) & (t < C)
    if PER_POSITION:
        g = tl.load(grad_ptr + pos, mask=live, other=0.0).to(ACC)
    else:
        g = tl.load(grad_ptr).to(ACC)
    if MEAN:
        g = g / tl.load(total_weight_ptr).to(ACC)
    if HAS_W:
        g = g * tl.load(weight_ptr + t, mask=take, other=0.0).to(ACC)
    return t, tl.where(take, -g, 0.0)


@triton.jit
def _nll_backward_kernel(
    grad_ptr,  # (N * S,) contiguous when PER_POSITION, else ()
    target_ptr,  # (N * S,) contiguous int64
    weight_ptr,  # (C,) when HAS_W
    total_weight_ptr,  # () used when MEAN
    dx_ptr,  # (N, C, S) contiguous, zeroed
    P,
    C,
    S,
    ignore_index,
    HAS_W: tl.constexpr,
    PER_POSITION: tl.constexpr,
    MEAN: tl.constexpr,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 data, else float32
):
    # dx[n, t, s] = the gradient at (n, s), t its target; the rest of dx is zero already
    # (written by the fill kernel in aligned vectors whatever C is)
    pos = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = pos < P
    t, value = _nll_grad_at(pos, live, grad_ptr, target_ptr, weight_ptr, total_weight_ptr, C, ignore_index,
                            HAS_W, PER_POSITION, MEAN, ACC)
    at = (pos // S) * C * S + pos % S + t * S
    tl.store(dx_ptr + at, value.to(dx_ptr.dtype.element_ty), mask=live & (t >= 0) & (t < C))


_forward = LaunchCache(_nll_forward_kernel, name="nll_loss")
_total = LaunchCache(_nll_total_kernel, name="nll_loss_total")
_backward = LaunchCache(_nll_backward_kernel, name="nll_loss_backward")


def _geometry(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
              image: bool) -> tuple[int, int, int] | None:
    """(N, C, S), or None where ATen must answer (its shape and dtype errors included)."""
    if x.dtype not in _FLOATS or target.dtype != torch.int64 or reduction not in (_NONE, _MEAN, _SUM):
        return None
    if image:
        if x.dim() != 4 or target.shape != (x.shape[0], *x.shape[2:]):
            return None
        n, c, s = x.shape[0], x.shape[1], x.shape[2] * x.shape[3]
    elif x.dim() == 2 and target.shape == x.shape[:1]:
        n, c, s = x.shape[0], x.shape[1], 1
    elif x.dim() == 1 and target.dim() == 0:
        n, c, s = 1, x.shape[0], 1
    else:
        return None
    if weight is not None and (weight.shape != (c,) or weight.dtype != x.dtype):
        return None
    return n, c, s


def _check_targets(bad: torch.Tensor | None, target: torch.Tensor, ignore_index: int, classes: int) -> None:
    """On a host device (the host already waits for the kernel), ATen's CPU error for the
    first bad target; elsewhere the kernel asserted on the device (``bad`` is None)."""
    if bad is not None and read_back(bad, 0):  # (compile-only execution ran no kernel: no bad target)
        wrong = target[(target != ignore_index) & ((target < 0) | (target >= classes))]
        raise IndexError(f"Target {int(wrong.flatten()[0])} is out of bounds.")


def _nll_forward(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
                 ignore_index: int, image: bool) -> Any:
    geometry = _geometry(x, target, weight, reduction, image)
    if geometry is None:
        return NotImplemented
    n, c, s = geometry
    p = n * s
    x, target = x.contiguous(), target.contiguous()
    w = weight.contiguous() if weight is not None else x
    host_check = host_checks_indices(x.device)
    bad = zeros((1,), dtype=torch.int32, device=x.device) if host_check else None
    flag = x if bad is None else bad  # (CHECK compiles no store to the flag)
    check: dict[str, Any] = {"CHECK": not host_check, "options": {} if host_check else device_check_options({})}
    programs = cdiv(p, _BLOCK)
    if reduction == _NONE:
        out = torch.empty(target.shape, dtype=x.dtype, device=x.device)
        total_weight = zeros((), dtype=x.dtype, device=x.device)
        if p:
            _forward((programs,), x, target, w, out, out, flag, p, c, s, ignore_index,
                     HAS_W=weight is not None, REDUCE=False, BLOCK=_BLOCK, ACC=TL_DTYPES[acc_dtype(x.dtype)],
                     **check)
    else:
        out = torch.empty((), dtype=x.dtype, device=x.device)
        total_weight = torch.empty((), dtype=x.dtype, device=x.device)
        # every program writes its partial sums; with no position, one zero of each is the total
        partials = zeros if not p else torch.empty
        partial_loss = partials((max(programs, 1),), dtype=acc_dtype(x.dtype), device=x.device)
        partial_weight = partials((max(programs, 1),), dtype=acc_dtype(x.dtype), device=x.device)
        if p:
            _forward((programs,), x, target, w, partial_loss, partial_weight, flag, p, c, s, ignore_index,
                     HAS_W=weight is not None, REDUCE=True, BLOCK=_BLOCK, ACC=TL_DTYPES[acc_dtype(x.dtype)],
                     **check)
        _total((1,), partial_loss, partial_weight, out, total_weight, partial_loss.numel(),
               MEAN=reduction == _MEAN, BLOCK=min(1024, next_power_of_2(partial_loss.numel())),
               ACC=TL_DTYPES[acc_dtype(x.dtype)])
    _check_targets(bad, target, ignore_index, c)
    return out, total_weight


def _nll_backward(grad: torch.Tensor, x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                  reduction: int, ignore_index: int, total_weight: torch.Tensor, image: bool) -> Any:
    geometry = _geometry(x, target, weight, reduction, image)
    if geometry is None or grad.dtype != x.dtype:
        return NotImplemented
    n, c, s = geometry
    per_position = reduction == _NONE
    if grad.shape != (target.shape if per_position else ()):
        return NotImplemented
    dx = zeros(x.shape, dtype=x.dtype, device=x.device)
    p = n * s
    if p and c:
        _backward((cdiv(p, _BLOCK),), grad.contiguous(), target.contiguous(),
                  weight.contiguous() if weight is not None else dx, total_weight, dx, p, c, s, ignore_index,
                  HAS_W=weight is not None, PER_POSITION=per_position, MEAN=reduction == _MEAN, BLOCK=_BLOCK,
                  ACC=TL_DTYPES[acc_dtype(x.dtype)])
    return dx


@aten_op("nll_loss_forward")
def nll_loss_forward(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
                     ignore_index: int) -> Any:
    """(loss, total_weight) of log-probabilities (N, C) or (C,) against class targets."""
    return _nll_forward(self, target, weight, reduction, ignore_index, image=False)


@aten_op("nll_loss2d_forward")
def nll_loss2d_forward(self: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                       reduction: int, ignore_index: int) -> Any:
    """(loss, total_weight) of log-probabilities (N, C, H, W) against targets (N, H, W)."""
    return _nll_forward(self, target, weight, reduction, ignore_index, image=True)


@aten_op("nll_loss_backward")
def nll_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                      weight: torch.Tensor | None, reduction: int, ignore_index: int,
                      total_weight: torch.Tensor) -> Any:
    """Gradient with respect to the log-probabilities: ``-w[t] * g`` at each target."""
    return _nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, image=False)


@aten_op("nll_loss2d_backward")
def nll_loss2d_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                        weight: torch.Tensor | None, reduction: int, ignore_index: int,
                        total_weight: torch.Tensor) -> Any:
    return _nll_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, image=True)
