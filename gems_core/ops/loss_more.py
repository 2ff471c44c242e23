"""mse_loss and soft_margin_loss with their backward: the per-element losses are one
pointwise kernel; ``mean`` and ``sum`` reduce them with gems' own sum (through the
dispatcher, so a backend that leaves ``sum`` to ATen is respected). Floating operands of one
dtype; the others go to ATen, which raises or promotes as it does.

soft_margin_loss is log(1 + e^(-y x)), taken as max(z, 0) + log1p(e^-|z|) for z = -y x, and
its gradient -y sigmoid(z) from e^-|z| too, so neither overflows where ATen's e^z does (an
infinite z still gives ATen's NaN gradient).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import pointwise
from ..registry import aten_op
from .math_more import log1p_fn

_NONE, _MEAN, _SUM = 0, 1, 2


@pointwise(kind="DEFAULT")
@triton.jit
def _squared_difference(x, y):
    d = x - y
    return d * d


@pointwise(kind="DEFAULT", extras=("scale",))
@triton.jit
def _mse_backward(dy, x, y, scale):
    # d/dx of scale/2 * (x - y)^2
    return scale * (x - y) * dy


def _served(*tensors: torch.Tensor, reduction: int) -> bool:
    dtypes = {t.dtype for t in tensors}
    return len(dtypes) == 1 and tensors[0].is_floating_point() and reduction in (_NONE, _MEAN, _SUM)


def _reduce(squares: torch.Tensor, reduction: int) -> torch.Tensor:
    if reduction == _MEAN:
        return squares.mean()
    return squares.sum() if reduction == _SUM else squares


@aten_op("mse_loss")
def mse_loss(self: torch.Tensor, target: torch.Tensor, reduction: int = _MEAN) -> Any:
    """(self - target)^2, broadcast, then kept, averaged or summed."""
    if not _served(self, target, reduction=reduction):
        return NotImplemented
    return _reduce(_squared_difference(self, target), reduction)


@aten_op("mse_loss.out")
def mse_loss_out(self: torch.Tensor, target: torch.Tensor, reduction: int = _MEAN, *, out: torch.Tensor) -> Any:
    if not _served(self, target, out, reduction=reduction):
        return NotImplemented
    if reduction == _NONE:
        return _squared_difference(self, target, out=out)
    result = _reduce(_squared_difference(self, target), reduction)
    out.resize_(result.shape)
    return out.copy_(result)


def _backward_scale(self: torch.Tensor, target: torch.Tensor, reduction: int) -> float:
    numel = torch.broadcast_shapes(self.shape, target.shape).numel()
    return 2.0 / numel if reduction == _MEAN and numel else 2.0


@aten_op("mse_loss_backward")
def mse_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, reduction: int) -> Any:
    """2 (self - target) grad_output, divided by the element count for ``mean``."""
    if not _served(grad_output, self, target, reduction=reduction):
        return NotImplemented
    return _mse_backward(grad_output, self, target, scale=_backward_scale(self, target, reduction))


@aten_op("mse_loss_backward.grad_input")
def mse_loss_backward_out(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, reduction: int, *,
                          grad_input: torch.Tensor) -> Any:
    if not _served(grad_output, self, target, grad_input, reduction=reduction):
        return NotImplemented
    return _mse_backward(grad_output, self, target, scale=_backward_scale(self, target, reduction), out=grad_input)


@pointwise(kind="DEFAULT")
@triton.jit
def _soft_margin(x, y):
    # log(1 + e^z), z = -y x, without overflow
    z = -y * x
    return tl.maximum(z, 0.0) + log1p_fn(tl.exp(-tl.abs(z)))


@pointwise(kind="DEFAULT", extras=("scale",))
@triton.jit
def _soft_margin_backward(dy, x, y, scale):
    # d/dx log(1 + e^z) = -y sigmoid(z), z = -y x, sigmoid(z) = (z >= 0 ? 1 : e) / (1 + e), e = e^-|z|;
    # z = +inf gives NaN, as ATen's e^z / (1 + e^z) does
    z = -y * x
    e = tl.exp(-tl.abs(z))
    s = tl.where(z >= 0, 1.0, e) / (1.0 + e)
    s = tl.where(z == float("inf"), float("nan"), s)
    return -y * s * scale * dy


@aten_op("soft_margin_loss")
def soft_margin_loss(self: torch.Tensor, target: torch.Tensor, reduction: int = _MEAN) -> Any:
    """log(1 + e^(-target self)), broadcast, then kept, averaged or summed."""
    if not _served(self, target, reduction=reduction):
        return NotImplemented
    return _reduce(_soft_margin(self, target), reduction)


@aten_op("soft_margin_loss.out")
def soft_margin_loss_out(self: torch.Tensor, target: torch.Tensor, reduction: int = _MEAN, *,
                         out: torch.Tensor) -> Any:
    if not _served(self, target, out, reduction=reduction):
        return NotImplemented
    if reduction == _NONE:
        return _soft_margin(self, target, out=out)
    result = _reduce(_soft_margin(self, target), reduction)
    out.resize_(result.shape)
    return out.copy_(result)


def _soft_margin_grad_served(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                             reduction: int, *more: torch.Tensor) -> bool:
    """ATen writes the gradient in the broadcast shape of ``self`` and ``target`` and then
    multiplies ``grad_output`` into it in place: a ``grad_output`` that would widen it goes
    to ATen, which raises."""
    if not _served(grad_output, self, target, *more, reduction=reduction):
        return False
    shape = torch.broadcast_shapes(self.shape, target.shape)
    return torch.broadcast_shapes(shape, grad_output.shape) == shape


def _soft_margin_scale(self: torch.Tensor, reduction: int) -> float:
    # ATen divides by the element count of ``self`` (not of the broadcast shape) for ``mean``
    return 1.0 / self.numel() if reduction == _MEAN and self.numel() else 1.0


@aten_op("soft_margin_loss_backward")
def soft_margin_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                              reduction: int) -> Any:
    """-target sigmoid(-target self) grad_output, divided by the element count for ``mean``."""
    if not _soft_margin_grad_served(grad_output, self, target, reduction):
        return NotImplemented
    return _soft_margin_backward(grad_output, self, target, scale=_soft_margin_scale(self, reduction))


@aten_op("soft_margin_loss_backward.grad_input")
def soft_margin_loss_backward_out(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                                  reduction: int, *, grad_input: torch.Tensor) -> Any:
    if not _soft_margin_grad_served(grad_output, self, target, reduction, grad_input):
        return NotImplemented
    return _soft_margin_backward(grad_output, self, target, scale=_soft_margin_scale(self, reduction),
                                 out=grad_input)
