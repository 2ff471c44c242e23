"""Cases for gems_core/ops/loss.py: cross entropy (log_softmax + nll_loss), forward and
backward through autograd, the way training meets it.

Class targets with reductions none/mean/sum, ignored targets (the default -100 and a chosen
index), class weights, label smoothing (with and without weights), a class dim read with a
stride, a single (C,) input, (N, C, d) and (N, C, H, W) inputs (nll_loss2d), an empty batch
and a batch whose targets are all ignored (a NaN mean).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample, ramp_like

FLOATS = samples.FLOAT_DTYPES


def _targets(shape: tuple[int, ...], classes: int, device: torch.device | str, seed: int) -> torch.Tensor:
    return samples.make_tensor(shape, torch.int64, device, seed, low=0, high=classes)


def loss_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    """(logits, target, weight) and cross_entropy keywords."""
    logits = samples.make_tensor((9, 33), dtype, device, 81)
    target = _targets((9,), 33, device, 82)
    target[[2, 7]] = -100
    weight = samples.make_tensor((33,), dtype, device, 83, low=0.2, high=2)
    for reduction in ("mean", "sum", "none"):
        yield Sample("contiguous", (logits, target, None), {"reduction": reduction})
    yield Sample("weights", (logits, target, weight), {})
    yield Sample("weights", (logits, target, weight), {"reduction": "none"})
    yield Sample("ignore_index", (logits, target.clamp_min(0), None), {"ignore_index": 4})
    yield Sample("label_smoothing", (logits, target, None), {"label_smoothing": 0.1})
    yield Sample("label_smoothing", (logits, target, weight), {"label_smoothing": 0.2, "reduction": "sum"})
    transposed = samples.make_tensor((33, 9), dtype, device, 84).t()
    yield Sample("transposed", (transposed, target, weight), {})
    yield Sample("single", (logits[0], target[0], None), {})
    yield Sample("3-d", (samples.make_tensor((2, 5, 7), dtype, device, 85), _targets((2, 7), 5, device, 86), None), {})
    image = samples.make_tensor((2, 5, 3, 4), dtype, device, 87)
    image_target = _targets((2, 3, 4), 5, device, 88)
    image_target[0, 1] = -100
    yield Sample("4-d", (image, image_target, weight[:5]), {})
    yield Sample("4-d", (image, image_target, None), {"reduction": "none"})
    yield Sample("empty", (logits[:0], target[:0], None), {"reduction": "sum"})
    yield Sample("all ignored", (logits[:3], torch.full_like(target[:3], -100), None), {})


def _loss_and_grad(x: torch.Tensor, target: torch.Tensor, weight: Any, **kw: Any) -> tuple[torch.Tensor, ...]:
    x = x.detach().requires_grad_()
    loss = F.cross_entropy(x, target, weight, **kw)
    weights = ramp_like(loss)
    (grad,) = torch.autograd.grad(loss, x, weights)
    return loss.detach(), grad


def _length(sample: Sample) -> int:
    return sample.args[0].numel()


register(OpCase(
    "cross_entropy",
    ("_log_softmax", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward"),
    _loss_and_grad, loss_samples, FLOATS, reduction_length=_length,
))
