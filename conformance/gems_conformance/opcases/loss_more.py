"""Cases for gems_core/ops/loss_more.py: mse_loss with each reduction, forward and backward
through autograd, on pairs in every layout (a broadcast target too), empty and 0-d."""

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
