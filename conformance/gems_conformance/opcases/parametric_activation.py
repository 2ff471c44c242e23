"""Cases for gems_core/ops/parametric_activation.py: celu's out= and in-place forms (the
functional one is activation_more's "celu" case), leaky_relu (functional, out=, in place,
its backward called directly and through autograd), PReLU (through F.prelu: its kernel, and
the backward through autograd) and RReLU's backward (called directly, in and out of
training, and through autograd of F.rrelu in evaluation, which draws no noise).

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


def _slope_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    for sample in samples.elementwise(1, dtype, device, profile):
        for slope in (0.01, 0.2, -0.7):  # a negative slope is allowed in the forward
            yield Sample(sample.label, (*sample.args, slope))


def _leaky_backward_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    # (grad_output, self, negative_slope, self_is_result); no negative slope from the output
    for sample in samples.elementwise(2, dtype, device, profile):
        for slope, self_is_result in ((0.01, False), (-0.7, False), (0.2, True)):
            yield Sample(sample.label, (*sample.args, slope, self_is_result))


def _leaky_relu_grad(x: torch.Tensor, slope: float) -> torch.Tensor:
    x = x.detach().requires_grad_()
    y = F.leaky_relu(x, slope)
    (grad,) = torch.autograd.grad(y, x, samples.ramp_like(y))
    return grad


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
register(OpCase("leaky_relu", ("leaky_relu",), F.leaky_relu, _slope_samples, FLOATS))
register(OpCase("leaky_relu_", ("leaky_relu_",), lambda x, slope: torch.ops.aten.leaky_relu_(x.clone(), slope),
                _slope_samples, (torch.float32,)))
register(OpCase("leaky_relu_out", ("leaky_relu.out",),
                lambda x, slope: torch.ops.aten.leaky_relu.out(x, slope, out=torch.empty_like(x)),
                _slope_samples, (torch.float32,)))
register(OpCase("leaky_relu_backward", ("leaky_relu_backward",), torch.ops.aten.leaky_relu_backward,
                _leaky_backward_samples, FLOATS))
register(OpCase("leaky_relu_backward_grad_input", ("leaky_relu_backward.grad_input",),
                lambda dy, x, slope, from_result: torch.ops.aten.leaky_relu_backward.grad_input(
                    dy, x, slope, from_result,
                    grad_input=torch.empty(torch.broadcast_shapes(dy.shape, x.shape), dtype=x.dtype, device=x.device)),
                _leaky_backward_samples, (torch.float32,)))
register(OpCase("leaky_relu_autograd", ("leaky_relu", "leaky_relu_backward"), _leaky_relu_grad, _slope_samples,
                FLOATS))
register(OpCase("prelu", ("_prelu_kernel",), F.prelu, _prelu_samples, FLOATS))
register(OpCase("prelu_autograd", ("_prelu_kernel", "_prelu_kernel_backward"), _prelu_input_grad, _prelu_samples,
                FLOATS, reduction_length=lambda sample: sample.args[0].numel() // max(sample.args[1].numel(), 1)))


def _rrelu_samples(dtype: torch.dtype, device: Any, profile: str) -> Iterator[Sample]:
    # (grad_output, self, noise) and, in training, the slopes drawn by the forward in noise;
    # out of training the mean slope, from the input or (self_is_result) the output
    for sample in samples.elementwise(3, dtype, device, profile):
        for training, self_is_result in ((True, False), (False, False), (False, True)):
            yield Sample(sample.label, (*sample.args, 0.125, 0.375, training, self_is_result))


def _rrelu_eval_grad(x: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_()
    y = F.rrelu(x, 0.1, 0.3, training=False)
    (grad,) = torch.autograd.grad(y, x, samples.ramp_like(y))
    return grad


register(OpCase("rrelu_with_noise_backward", ("rrelu_with_noise_backward",),
                torch.ops.aten.rrelu_with_noise_backward, _rrelu_samples, FLOATS))
register(OpCase("rrelu_with_noise_backward_out", ("rrelu_with_noise_backward.out",),
                lambda dy, x, noise, *args: torch.ops.aten.rrelu_with_noise_backward.out(
                    dy, x, noise, *args, out=torch.empty(torch.broadcast_shapes(dy.shape, x.shape, noise.shape),
                                                         dtype=x.dtype, device=x.device)),
                _rrelu_samples, (torch.float32,)))
register(OpCase("rrelu_eval_autograd", ("rrelu_with_noise_backward",), _rrelu_eval_grad,
                lambda dt, dev, p: samples.elementwise(1, dt, dev, p), FLOATS))
