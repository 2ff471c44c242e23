"""Cases for gems_core/ops/parametric_activation.py: celu's out= and in-place forms (the
functional one is activation_more's "celu" case) and PReLU (through F.prelu: its kernel, and
the backward through autograd).

Elementwise samples of every layout with special values; alpha below and above 1; PReLU's
weight one per channel (broadcast over a 3-d input's other dims) or a single one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

FLOATS = samples.FLOAT_DTYPES


def _celu_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    for sample in samples.elementwise(1, dtype, device, profile):
        for alpha in (0.5, 1.7):
            yield Sample(sample.label, (*sample.args, alpha))


def _prelu_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        x = samples.make_tensor((2, *shape), dtype, device, 100 * n)
        yield Sample("per channel", (x, samples.make_tensor((shape[0],), dtype, device, 100 * n + 1)))
        yield Sample("transposed", (x.transpose(1, 2).contiguous().transpose(1, 2),
                                    samples.make_tensor((shape[0],), dtype, device, 100 * n + 2)))
        yield Sample("one weight", (x, samples.make_tensor((1,), dtype, device, 100 * n + 3)))
    yield Sample("empty", (samples.make_tensor((0, 3, 4), dtype, device, 1), samples.make_tensor((3,), dtype, device, 2)))


def _prelu_input_grad(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x, weight = x.detach().requires_grad_(), weight.detach().requires_grad_()
    y = F.prelu(x, weight)
    return torch.autograd.grad(y, (x, weight), samples.ramp_like(y))


register(OpCase("celu_", ("celu_",), lambda x, alpha: torch.celu_(x.clone(), alpha), _celu_samples, (torch.float32,)))
register(OpCase("celu_out", ("celu.out",), lambda x, alpha: torch.ops.aten.celu.out(x, alpha, out=torch.empty_like(x)),
                _celu_samples, (torch.float32,)))
register(OpCase("prelu", ("_prelu_kernel",), F.prelu, _prelu_samples, FLOATS))
register(OpCase("prelu_autograd", ("_prelu_kernel", "_prelu_kernel_backward"), _prelu_input_grad, _prelu_samples,
                FLOATS, reduction_length=lambda sample: sample.args[0].numel() // max(sample.args[1].numel(), 1)))
