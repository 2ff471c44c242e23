"""Cases for gems_core/ops/activation_more.py.

Forward cases take unary samples (every layout, empty, 0-d, special values), through the
functional API models call (celu, selu and relu6 reach gems through ATen's composites);
backward cases run the forward and backward through autograd with an upstream gradient of
the output's shape, as training does, and a few call the backward overloads directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .. import samples
from ..cases import OpCase, nan_input_takes_the_upper_branch, register
from ..samples import Sample

FLOATS = samples.FLOAT_DTYPES


def _unary(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return samples.elementwise(1, dt, dev, p, low=-5.0, high=5.0)


def _same_shape(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    return (s for s in samples.elementwise(2, dt, dev, p, low=-5.0, high=5.0) if s.label != "broadcast")


def _through_autograd(forward: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    def call(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        x = x.detach().requires_grad_()
        (grad,) = torch.autograd.grad(forward(x), x, dy)
        return grad

    return call


#: name -> (forward, the overloads it reaches, the backward overload)
ACTIVATIONS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str, str]] = {
    "elu": (lambda x: F.elu(x, alpha=0.8), "elu", "elu_backward"),
    "celu": (lambda x: F.celu(x, alpha=1.5), "celu", "elu_backward"),
    "selu": (F.selu, "elu", "elu_backward"),
    "relu6": (F.relu6, "hardtanh", "hardtanh_backward"),
    "hardtanh": (lambda x: F.hardtanh(x, -2.0, 1.5), "hardtanh", "hardtanh_backward"),
    "hardsigmoid": (F.hardsigmoid, "hardsigmoid", "hardsigmoid_backward"),
    "hardswish": (F.hardswish, "hardswish", "hardswish_backward"),
    "softplus": (lambda x: F.softplus(x, beta=2.0, threshold=4.0), "softplus", "softplus_backward"),
    "softshrink": (lambda x: F.softshrink(x, 0.7), "softshrink", "softshrink_backward"),
    "threshold": (lambda x: F.threshold(x, 0.5, -2.0), "threshold", "threshold_backward"),
    "logsigmoid": (F.logsigmoid, "log_sigmoid_forward", "log_sigmoid_backward"),
}

#: backward formulas whose pieces are chosen by comparisons a NaN input fails (see
#: nan_input_takes_the_upper_branch)
_PIECEWISE_BACKWARD = ("elu_backward", "hardswish_backward")

for _name, (_forward, _aten, _backward) in ACTIVATIONS.items():
    register(OpCase(_name, (_aten,), _forward, _unary, FLOATS))
    _call = _through_autograd(_forward)
    register(OpCase(f"{_name}_autograd", (_aten, _backward), _call, _same_shape, FLOATS,
                    reference=nan_input_takes_the_upper_branch(_call, 0) if _backward in _PIECEWISE_BACKWARD
                    else None))

register(OpCase("elu_", ("elu_",), lambda x: F.elu(x.clone(), inplace=True), _unary, (torch.float32,)))
_elu_inplace = _through_autograd(lambda x: F.elu(x * 1.0, alpha=0.5, inplace=True))
register(OpCase("elu_autograd_inplace", ("elu_", "elu_backward"), _elu_inplace, _same_shape, FLOATS,
                reference=nan_input_takes_the_upper_branch(_elu_inplace, 0)))
register(OpCase("hardswish_", ("hardswish_",), lambda x: F.hardswish(x.clone(), inplace=True), _unary,
                (torch.bfloat16,)))
register(OpCase("threshold_", ("threshold_",), lambda x: F.threshold(x.clone(), 0.1, 3.0, inplace=True), _unary,
                (torch.float16,)))
register(OpCase("relu_autograd", ("relu", "threshold_backward"), _through_autograd(torch.relu), _same_shape, FLOATS))
register(OpCase("sigmoid_backward", ("sigmoid_backward",), lambda dy, x: torch.ops.aten.sigmoid_backward(dy, x),
                _same_shape, FLOATS))
register(OpCase("tanh_backward", ("tanh_backward",), lambda dy, x: torch.ops.aten.tanh_backward(dy, x),
                _same_shape, FLOATS))
# through autograd in float32 only: the backward takes the rounded output y, and 1 - y or
# 1 - y^2 near saturation magnifies half precision's rounding past its tolerance (ATen's too)
register(OpCase("sigmoid_autograd", ("sigmoid", "sigmoid_backward"), _through_autograd(torch.sigmoid), _same_shape,
                (torch.float32,)))
register(OpCase("tanh_autograd", ("tanh", "tanh_backward"), _through_autograd(torch.tanh), _same_shape,
                (torch.float32,)))
register(OpCase("hardtanh_out", ("hardtanh.out",),
                lambda x: torch._C._nn.hardtanh(x, -0.5, 0.5, out=torch.empty_like(x)), _unary, (torch.float32,)))


def _gated(dt: torch.dtype, dev: torch.device, p: str) -> Any:
    """(x, dy, dim): inputs whose gated dim has an even size, in several layouts."""
    for label, x in samples.layouts((6, 34), dt, dev, seed=40, low=-4.0, high=4.0):
        yield Sample(label, (x, samples.make_tensor((6, 17), dt, dev, 41), 1))
    yield Sample("contiguous", (samples.make_tensor((4, 3, 5), dt, dev, 42), samples.make_tensor((2, 3, 5), dt, dev, 43),
                                0))
    yield Sample("empty", (samples.make_tensor((0, 4), dt, dev, 44), samples.make_tensor((0, 2), dt, dev, 45), -1))


register(OpCase("glu", ("glu",), lambda x, dy, dim: F.glu(x, dim), _gated, FLOATS))
register(OpCase("glu_autograd", ("glu", "glu_backward"),
                lambda x, dy, dim: _through_autograd(lambda t: F.glu(t, dim))(x, dy), _gated, FLOATS))
register(OpCase("glu_out", ("glu.out",), lambda x, dy, dim: torch._C._nn.glu(x, dim, out=torch.empty(0, dtype=x.dtype, device=x.device)),
                _gated, (torch.float32,)))
register(OpCase("glu_backward_out", ("glu_backward.grad_input",),
                lambda x, dy, dim: torch.ops.aten.glu_backward.grad_input(dy, x, dim, grad_input=torch.empty(0, dtype=x.dtype, device=x.device)),
                _gated, (torch.float32,)))


def _log_sigmoid_out(x: torch.Tensor) -> torch.Tensor:
    # the buffer is the forward's own scratch for its backward (ATen and gems keep different
    # values there): only the output is compared
    output, buffer = (torch.empty(0, dtype=x.dtype, device=x.device) for _ in range(2))
    return torch.ops.aten.log_sigmoid_forward.output(x, output=output, buffer=buffer)[0]


def _log_sigmoid_backward_out(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    buffer = torch.ops.aten.log_sigmoid_forward(x)[1]  # the same backend's forward fills it
    return torch.ops.aten.log_sigmoid_backward.grad_input(dy, x, buffer, grad_input=torch.empty(0, dtype=x.dtype, device=x.device))


register(OpCase("log_sigmoid_forward_out", ("log_sigmoid_forward.output",), _log_sigmoid_out, _unary, (torch.float32,)))
register(OpCase("log_sigmoid_backward_out", ("log_sigmoid_backward.grad_input",), _log_sigmoid_backward_out,
                _same_shape, (torch.float32,)))
