"""Cases for gems_core/ops/loss_more.py: mse_loss and soft_margin_loss with each reduction,
forward and backward through autograd, on pairs in every layout (a broadcast target too),
empty, 0-d and (soft_margin_loss) special values; the out= overloads called directly, the
backward's with a grad_output broadcast over the gradient."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

FLOATS = samples.FLOAT_DTYPES


def _pairs(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    for s in samples.elementwise(2, dt, dev, p):
        x, y = s.args
        if s.label == "broadcast":  # mse_loss broadcasts the target (with a warning)
            y = y.expand_as(x)
        yield Sample(s.label, (x, y))


def _length(sample: Sample) -> int:
    return max(1, sample.args[0].numel())


def _with_grad(reduction: str) -> Any:
    def call(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_()
        loss = F.mse_loss(x, y, reduction=reduction)
        (grad,) = torch.autograd.grad(loss, x, torch.ones_like(loss))
        return grad

    return call


for _reduction in ("mean", "sum", "none"):
    register(OpCase(f"mse_loss_{_reduction}", ("mse_loss",),
                    lambda x, y, r=_reduction: F.mse_loss(x, y, reduction=r), _pairs, FLOATS,
                    reduction_length=_length))
    register(OpCase(f"mse_loss_{_reduction}_autograd", ("mse_loss", "mse_loss_backward"), _with_grad(_reduction),
                    _pairs, FLOATS))


def _soft_margin_grad(reduction: str) -> Any:
    def call(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_()
        loss = F.soft_margin_loss(x, y, reduction=reduction)
        (grad,) = torch.autograd.grad(loss, x, samples.ramp_like(loss) if reduction == "none" else None)
        return grad

    return call


def _soft_margin_backward_out(x: torch.Tensor, y: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    # grad_output broadcast over the gradient, which takes the broadcast shape of x and y
    out = torch.empty(torch.broadcast_shapes(x.shape, y.shape), dtype=x.dtype, device=x.device)
    return torch.ops.aten.soft_margin_loss_backward.grad_input(grad, x, y, 0, grad_input=out)


for _reduction in ("mean", "sum", "none"):
    register(OpCase(f"soft_margin_loss_{_reduction}", ("soft_margin_loss",),
                    lambda x, y, r=_reduction: F.soft_margin_loss(x, y, reduction=r),
                    lambda dt, dev, p: samples.elementwise(2, dt, dev, p), FLOATS, reduction_length=_length))
    register(OpCase(f"soft_margin_loss_{_reduction}_autograd", ("soft_margin_loss", "soft_margin_loss_backward"),
                    _soft_margin_grad(_reduction), lambda dt, dev, p: samples.elementwise(2, dt, dev, p), FLOATS))

register(OpCase("soft_margin_loss_out", ("soft_margin_loss.out",),
                lambda x, y: torch.ops.aten.soft_margin_loss.out(x, y, 2, out=torch.empty((), dtype=x.dtype,
                                                                                          device=x.device)),
                _pairs, (torch.float32, torch.bfloat16), reduction_length=_length))
register(OpCase("soft_margin_loss_backward_out", ("soft_margin_loss_backward.grad_input",), _soft_margin_backward_out,
                lambda dt, dev, p: samples.elementwise(3, dt, dev, p), (torch.float32, torch.float16)))
