"""mse_loss and its backward: the squared differences are one pointwise kernel; ``mean``
and ``sum`` reduce them with gems' own sum (through the dispatcher, so a backend that
leaves ``sum`` to ATen is respected). Floating operands of one dtype; the others go to
ATen, which raises or promotes as it does.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl  # noqa: F401  (the interpreter looks for it beside kernels)

from ..codegen.pointwise import pointwise
from ..registry import aten_op

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
