"""Activations with a parameter: celu (alpha; functional, out= and in place), leaky_relu
(its negative slope; functional, out=, in place, and its backward), PReLU's
kernels (a learned weight broadcast against the input: ``_prelu_kernel`` and its backward,
which ATen's prelu composite calls and reduces) and RReLU's backward
(``rrelu_with_noise_backward``: in training the slopes drawn by the forward, kept in
``noise``, times the gradient; in evaluation leaky_relu's backward with the mean slope
(lower + upper) / 2).

celu is activation_more.py's elu kernel with ``input_scale = 1 / alpha``, as ATen defines
it; the PReLU kernels are generated pointwise ops. Floating inputs only: ATen raises for
the others, and so it is handed them.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import pointwise
from ..registry import aten_op
from .activation_more import _elu


def _celu_extras(alpha: Any) -> dict[str, Any]:
    return {"alpha": float(alpha), "scale": 1.0, "input_scale": 1.0 / float(alpha)}


def _celu_served(self: torch.Tensor, alpha: Any) -> bool:
    return self.is_floating_point() and float(alpha) != 0  # ATen raises for alpha 0


@aten_op("celu")
def celu(self: torch.Tensor, alpha: Any = 1.0) -> Any:
    """max(0, x) + min(0, alpha (e^(x / alpha) - 1))."""
    return _elu(self, **_celu_extras(alpha)) if _celu_served(self, alpha) else NotImplemented


@aten_op("celu.out")
def celu_out(self: torch.Tensor, alpha: Any = 1.0, *, out: torch.Tensor) -> Any:
    if not _celu_served(self, alpha) or out.dtype != self.dtype:
        return NotImplemented
    return _elu(self, out=out, **_celu_extras(alpha))


@aten_op("celu_")
def celu_(self: torch.Tensor, alpha: Any = 1.0) -> Any:
    return _elu.inplace(self, **_celu_extras(alpha)) if _celu_served(self, alpha) else NotImplemented


@pointwise(kind="DEFAULT")
@triton.jit
def _prelu(x, weight):
    return tl.where(x > 0, x, weight * x)


@pointwise(kind="DEFAULT", num_outputs=2)
@triton.jit
def _prelu_backward(dy, x, weight):
    # (d/dx, d/dweight) per element; the composite sums the weight's over its broadcast dims.
    # NaN takes the weighted branch, as in ATen
    positive = x > 0
    return tl.where(positive, dy, weight * dy), tl.where(positive, 0.0, x * dy)


def _floating(*tensors: torch.Tensor) -> bool:
    return all(t.is_floating_point() and t.dtype == tensors[0].dtype for t in tensors)


@aten_op("_prelu_kernel")
def prelu_kernel(self: torch.Tensor, weight: torch.Tensor) -> Any:
    """x where x > 0, weight * x elsewhere, ``weight`` broadcast against ``self``."""
    return _prelu(self, weight) if _floating(self, weight) else NotImplemented


@aten_op("_prelu_kernel_backward")
def prelu_kernel_backward(grad_output: torch.Tensor, self: torch.Tensor, weight: torch.Tensor) -> Any:
    """(grad_input, grad_weight), both of the broadcast shape."""
    return _prelu_backward(grad_output, self, weight) if _floating(grad_output, self, weight) else NotImplemented


@pointwise(kind="DEFAULT", extras=("slope",))
@triton.jit
def _leaky_relu_backward(dy, x, slope):
    # x (or the output, of the same sign for slope >= 0) > 0: dy; else slope * dy (NaN too, as in ATen)
    return tl.where(x > 0, dy, dy * slope)


@pointwise(kind="DEFAULT", extras=("slope",))
@triton.jit
def _leaky_relu(x, slope):
    # NaN takes the sloped branch (and stays NaN), as in ATen
    return tl.where(x > 0, x, x * slope)


@aten_op("leaky_relu")
def leaky_relu(self: torch.Tensor, negative_slope: Any = 0.01) -> Any:
    """x where x > 0, else negative_slope * x."""
    return _leaky_relu(self, slope=float(negative_slope)) if self.is_floating_point() else NotImplemented


@aten_op("leaky_relu.out")
def leaky_relu_out(self: torch.Tensor, negative_slope: Any = 0.01, *, out: torch.Tensor) -> Any:
    if not _floating(self, out):
        return NotImplemented
    return _leaky_relu(self, slope=float(negative_slope), out=out)


@aten_op("leaky_relu_")
def leaky_relu_(self: torch.Tensor, negative_slope: Any = 0.01) -> Any:
    return _leaky_relu.inplace(self, slope=float(negative_slope)) if self.is_floating_point() else NotImplemented


def _leaky_backward(grad_output: torch.Tensor, self: torch.Tensor, negative_slope: Any, self_is_result: bool,
                    out: torch.Tensor | None = None) -> Any:
    slope = float(negative_slope)
    # ATen refuses a negative slope taken from the output (an in-place forward flips its sign)
    if not _floating(grad_output, self, *([] if out is None else [out])) or (self_is_result and slope < 0):
        return NotImplemented
    return _leaky_relu_backward(grad_output, self, slope=slope, out=out)


@aten_op("leaky_relu_backward")
def leaky_relu_backward(grad_output: torch.Tensor, self: torch.Tensor, negative_slope: Any,
                        self_is_result: bool) -> Any:
    """grad_output where the input (or the output) is positive, else negative_slope times it."""
    return _leaky_backward(grad_output, self, negative_slope, self_is_result)


@aten_op("leaky_relu_backward.grad_input")
def leaky_relu_backward_grad_input(grad_output: torch.Tensor, self: torch.Tensor, negative_slope: Any,
                                   self_is_result: bool, *, grad_input: torch.Tensor) -> Any:
    return _leaky_backward(grad_output, self, negative_slope, self_is_result, out=grad_input)


@pointwise(kind="DEFAULT")
@triton.jit
def _noise_backward(dy, noise):
    return dy * noise


def _rrelu_backward(grad_output: torch.Tensor, self: torch.Tensor, noise: torch.Tensor, lower: Any, upper: Any,
                    training: bool, self_is_result: bool, out: torch.Tensor | None = None) -> Any:
    if training:
        if not _floating(grad_output, noise, *([] if out is None else [out])):
            return NotImplemented
        return _noise_backward(grad_output, noise, out=out)
    slope = (float(lower) + float(upper)) / 2
    # ATen refuses a negative slope taken from the output (an in-place forward flips its sign)
    if not _floating(grad_output, self, *([] if out is None else [out])) or (self_is_result and slope < 0):
        return NotImplemented
    return _leaky_relu_backward(grad_output, self, slope=slope, out=out)


@aten_op("rrelu_with_noise_backward")
def rrelu_with_noise_backward(grad_output: torch.Tensor, self: torch.Tensor, noise: torch.Tensor, lower: Any,
                              upper: Any, training: bool, self_is_result: bool) -> Any:
    """RReLU's input gradient: ``grad_output * noise`` in training, else leaky_relu's
    backward with slope (lower + upper) / 2."""
    return _rrelu_backward(grad_output, self, noise, lower, upper, training, self_is_result)


@aten_op("rrelu_with_noise_backward.out")
def rrelu_with_noise_backward_out(grad_output: torch.Tensor, self: torch.Tensor, noise: torch.Tensor, lower: Any,
                                  upper: Any, training: bool, self_is_result: bool, *, out: torch.Tensor) -> Any:
    return _rrelu_backward(grad_output, self, noise, lower, upper, training, self_is_result, out=out)
