"""More activations and their backward kernels: elu (celu and selu reach it through ATen's
composites), hardtanh (relu6), hardsigmoid, hardswish, softplus, softshrink, threshold and
log_sigmoid, plus sigmoid_backward and tanh_backward (the gradients autograd takes from
sigmoid's and tanh's outputs).

Floating inputs only, in ATen's computation dtype (float32 for float16/bfloat16); integer
and bool inputs go to ATen, which raises its own error where it rejects them. Backward
kernels take (grad_output, input or output) of one shape, as ATen's do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import PointwiseOp, pointwise
from ..registry import aten_op
from .math_more import expm1_fn, log1p_fn


@pointwise(kind="DEFAULT", extras=("alpha", "scale", "input_scale"))
@triton.jit
def _elu(x, alpha, scale, input_scale):
    # scale * (x > 0 ? x : alpha * expm1(x * input_scale))
    return tl.where(x > 0, x * scale, expm1_fn(x * input_scale) * (alpha * scale))


@pointwise(kind="DEFAULT", extras=("alpha", "scale", "input_scale"))
@triton.jit
def _elu_backward_of_input(dy, x, alpha, scale, input_scale):
    # NaN takes the positive branch, as in ATen
    neg = expm1_fn(x * input_scale) + 1.0
    return tl.where(x <= 0, dy * (input_scale * alpha * scale) * neg, dy * scale)


@pointwise(kind="DEFAULT", extras=("alpha", "scale", "input_scale"))
@triton.jit
def _elu_backward_of_result(dy, y, alpha, scale, input_scale):
    # from y = alpha scale (e^(x input_scale) - 1) where y <= 0
    return tl.where(y <= 0, dy * input_scale * (y + alpha * scale), dy * scale)


@pointwise(kind="DEFAULT", extras=("low", "high"))
@triton.jit
def _hardtanh(x, low, high):
    # NaN passes
    r = tl.where(x < low, low, x)
    return tl.where(r > high, high, r)


@pointwise(kind="DEFAULT", extras=("low", "high"))
@triton.jit
def _hardtanh_backward(dy, x, low, high):
    return tl.where((x > low) & (x < high), dy, 0.0)


@pointwise(kind="DEFAULT")
@triton.jit
def _hardsigmoid(x):
    # clamp(x / 6 + 1/2, 0, 1); NaN passes
    r = x / 6.0 + 0.5
    r = tl.where(r < 0.0, 0.0, r)
    return tl.where(r > 1.0, 1.0, r)


@pointwise(kind="DEFAULT")
@triton.jit
def _hardsigmoid_backward(dy, x):
    return tl.where((x > -3.0) & (x < 3.0), dy / 6.0, 0.0)


@pointwise(kind="DEFAULT")
@triton.jit
def _hardswish(x):
    # x * clamp(x + 3, 0, 6) / 6
    return x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0


@pointwise(kind="DEFAULT")
@triton.jit
def _hardswish_backward(dy, x):
    return tl.where(x <= -3.0, 0.0, tl.where(x < 3.0, dy * (x / 3.0 + 0.5), dy))


@pointwise(kind="DEFAULT", extras=("beta", "threshold"))
@triton.jit
def _softplus(x, beta, threshold):
    # log1p(e^(beta x)) / beta, x itself once beta x > threshold
    bx = x * beta
    return tl.where(bx > threshold, x, log1p_fn(tl.exp(bx)) / beta)


@pointwise(kind="DEFAULT", extras=("beta", "threshold"))
@triton.jit
def _softplus_backward(dy, x, beta, threshold):
    bx = x * beta
    z = tl.exp(bx)
    return tl.where(bx > threshold, dy, dy * z / (z + 1.0))


@pointwise(kind="DEFAULT", extras=("lambd",))
@triton.jit
def _softshrink(x, lambd):
    r = tl.where(x > lambd, x - lambd, tl.where(x < -lambd, x + lambd, 0.0))
    return tl.where(x != x, x, r)


@pointwise(kind="DEFAULT", extras=("lambd",))
@triton.jit
def _softshrink_backward(dy, x, lambd):
    return tl.where((x < -lambd) | (x > lambd), dy, 0.0)


@pointwise(kind="DEFAULT", extras=("threshold", "value"))
@triton.jit
def _threshold(x, threshold, value):
    # value where x <= threshold (NaN passes, as the comparison is false)
    return tl.where(x <= threshold, value, x)


@pointwise(kind="DEFAULT", extras=("threshold",))
@triton.jit
def _threshold_backward(dy, x, threshold):
    return tl.where(x <= threshold, 0.0, dy)


@pointwise(kind="DEFAULT", num_outputs=2)
@triton.jit
def _log_sigmoid_forward(x):
    # -softplus(-x) = min(x, 0) - log1p(e^-|x|); the buffer keeps e^-|x| for the backward
    z = tl.exp(-tl.abs(x))
    return tl.minimum(x, 0.0) - log1p_fn(z), z


@pointwise(kind="DEFAULT")
@triton.jit
def _log_sigmoid_backward(dy, x, z):
    # d/dx = 1 - sigmoid(x) = (x < 0 ? 1 : z) / (1 + z), z = e^-|x|
    return dy * tl.where(x < 0, 1.0, z) / (1.0 + z)


@pointwise(kind="DEFAULT")
@triton.jit
def _sigmoid_backward(dy, y):
    return dy * (1.0 - y) * y


@pointwise(kind="DEFAULT")
@triton.jit
def _tanh_backward(dy, y):
    return dy * (1.0 - y * y)


def _floating(*tensors: Any) -> bool:
    return all(t.is_floating_point() for t in tensors if isinstance(t, torch.Tensor))


def _register(
    name: str,
    op: PointwiseOp,
    doc: str,
    extras: Callable[..., dict[str, Any]],
    num_tensors: int = 1,
    out_name: str = "out",
    inplace: bool = True,
) -> None:
    """Register ``name``, its out= overload (keyword ``out_name``) and, with ``inplace``,
    ``name_``. The first ``num_tensors`` arguments are the op's tensors; ``extras`` maps
    the remaining ATen arguments to the op's extras."""

    def call(*args: Any) -> Any:
        tensors = args[:num_tensors]
        if not _floating(*tensors):
            return NotImplemented
        return op(*tensors, **extras(*args[num_tensors:]))

    def out_variant(*args: Any, **out: torch.Tensor) -> Any:
        tensors, target = args[:num_tensors], out[out_name]
        if not _floating(*tensors) or target.dtype != op.result_dtypes(*tensors)[1]:
            return NotImplemented
        return op(*tensors, out=target, **extras(*args[num_tensors:]))

    def inplace_variant(self: torch.Tensor, *args: Any) -> Any:
        if not _floating(self):
            return NotImplemented
        return op.inplace(self, **extras(*args))

    variants = [(call, "", name), (out_variant, "_out", f"{name}.{'out' if out_name == 'out' else out_name}")]
    if inplace:
        variants.append((inplace_variant, "_", f"{name}_"))
    for fn, suffix, aten_name in variants:
        fn.__name__ = fn.__qualname__ = f"{name}{suffix}"
        fn.__doc__ = doc
        aten_op(aten_name)(fn)


def _elu_extras(alpha: Any = 1, scale: Any = 1, input_scale: Any = 1) -> dict[str, Any]:
    return {"alpha": float(alpha), "scale": float(scale), "input_scale": float(input_scale)}


def _none() -> dict[str, Any]:
    return {}


_register("elu", _elu, "ELU: scale * (x > 0 ? x : alpha (e^(x input_scale) - 1)).", _elu_extras)
_register("hardtanh", _hardtanh, "x clamped to [min_val, max_val] (relu6 reaches it).",
          lambda low=-1, high=1: {"low": low, "high": high})
_register("hardtanh_backward", _hardtanh_backward, "grad where min_val < x < max_val, else 0.",
          lambda low, high: {"low": low, "high": high}, 2, "grad_input", inplace=False)
_register("hardsigmoid", _hardsigmoid, "clamp(x / 6 + 1/2, 0, 1).", _none)
_register("hardsigmoid_backward", _hardsigmoid_backward, "grad / 6 where -3 < x < 3.", _none, 2, "grad_input",
          inplace=False)
_register("hardswish", _hardswish, "x * clamp(x + 3, 0, 6) / 6.", _none)
_register("hardswish_backward", _hardswish_backward, "grad * d hardswish(x) / dx.", _none, 2, inplace=False)
_register("softplus", _softplus, "log(1 + e^(beta x)) / beta, linear past threshold.",
          lambda beta=1, threshold=20: {"beta": beta, "threshold": threshold}, inplace=False)
_register("softplus_backward", _softplus_backward, "grad * sigmoid(beta x), grad past threshold.",
          lambda beta, threshold: {"beta": beta, "threshold": threshold}, 2, "grad_input", inplace=False)
_register("softshrink", _softshrink, "x - lambd above lambd, x + lambd below -lambd, else 0.",
          lambda lambd=0.5: {"lambd": lambd}, inplace=False)
_register("softshrink_backward", _softshrink_backward, "grad outside [-lambd, lambd], else 0.",
          lambda lambd: {"lambd": lambd}, 2, "grad_input", inplace=False)
_register("threshold", _threshold, "value where x <= threshold, else x.",
          lambda threshold, value: {"threshold": threshold, "value": value})
_register("threshold_backward", _threshold_backward, "grad where x > threshold, else 0 (relu's backward).",
          lambda threshold: {"threshold": threshold}, 2, "grad_input", inplace=False)
_register("sigmoid_backward", _sigmoid_backward, "grad * y (1 - y), y = sigmoid(x).", _none, 2, "grad_input",
          inplace=False)
_register("tanh_backward", _tanh_backward, "grad * (1 - y^2), y = tanh(x).", _none, 2, "grad_input",
          inplace=False)
_register("log_sigmoid_backward", _log_sigmoid_backward, "grad * (1 - sigmoid(x)), from the forward's buffer.",
          _none, 3, "grad_input", inplace=False)


def _elu_backward_op(is_result: bool) -> PointwiseOp:
    return _elu_backward_of_result if is_result else _elu_backward_of_input


@aten_op("elu_backward")
def elu_backward(grad_output: torch.Tensor, alpha: Any, scale: Any, input_scale: Any, is_result: bool,
                 self_or_result: torch.Tensor) -> Any:
    """ELU's gradient, from its input or (``is_result``, in-place elu) its output."""
    if not _floating(grad_output, self_or_result):
        return NotImplemented
    return _elu_backward_op(is_result)(grad_output, self_or_result, **_elu_extras(alpha, scale, input_scale))


@aten_op("elu_backward.grad_input")
def elu_backward_out(grad_output: torch.Tensor, alpha: Any, scale: Any, input_scale: Any, is_result: bool,
                     self_or_result: torch.Tensor, *, grad_input: torch.Tensor) -> Any:
    op = _elu_backward_op(is_result)
    if not _floating(grad_output, self_or_result) or grad_input.dtype != op.result_dtypes(grad_output,
                                                                                            self_or_result)[1]:
        return NotImplemented
    return op(grad_output, self_or_result, out=grad_input, **_elu_extras(alpha, scale, input_scale))


@aten_op("log_sigmoid_forward")
def log_sigmoid_forward(self: torch.Tensor) -> Any:
    """(log sigmoid(x), e^-|x|): the output and the buffer its backward takes."""
    if not _floating(self):
        return NotImplemented
    return _log_sigmoid_forward(self)


@aten_op("log_sigmoid_forward.output")
def log_sigmoid_forward_out(self: torch.Tensor, *, output: torch.Tensor, buffer: torch.Tensor) -> Any:
    dtype = _log_sigmoid_forward.result_dtypes(self)[1]
    if not _floating(self) or output.dtype != dtype or buffer.dtype != dtype:
        return NotImplemented
    return _log_sigmoid_forward(self, out=(output, buffer))


# -- glu: the halves of one dim gate each other ------------------------------------------------


@pointwise(kind="DEFAULT")
@triton.jit
def _glu(a, b):
    return a / (1.0 + tl.exp(-b))


@pointwise(kind="DEFAULT", num_outputs=2)
@triton.jit
def _glu_backward(dy, a, b):
    # d/da = sigmoid(b), d/db = a sigmoid(b) (1 - sigmoid(b))
    s = 1.0 / (1.0 + tl.exp(-b))
    da = dy * s
    return da, da * a * (1.0 - s)


def _halves(self: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The two halves of ``dim``; None where ATen raises (0-d, an odd size) or the dtype is
    not floating, so that ATen's error is the one seen."""
    if self.dim() == 0 or not self.is_floating_point():
        return None
    dim = dim % self.dim() if -self.dim() <= dim < self.dim() else dim
    if not 0 <= dim < self.dim() or self.shape[dim] % 2:
        return None
    half = self.shape[dim] // 2
    return self.narrow(dim, 0, half), self.narrow(dim, half, half)


@aten_op("glu")
def glu(self: torch.Tensor, dim: int = -1) -> Any:
    """a * sigmoid(b), a and b the halves of ``dim``."""
    halves = _halves(self, dim)
    return NotImplemented if halves is None else _glu(*halves)


@aten_op("glu.out")
def glu_out(self: torch.Tensor, dim: int = -1, *, out: torch.Tensor) -> Any:
    halves = _halves(self, dim)
    if halves is None or out.dtype != self.dtype:
        return NotImplemented
    return _glu(*halves, out=out)


def _glu_backward_into(grad_output: torch.Tensor, self: torch.Tensor, dim: int, grad_input: torch.Tensor) -> Any:
    halves = _halves(self, dim)
    if halves is None or grad_output.shape != halves[0].shape or grad_input.dtype != self.dtype:
        return NotImplemented
    if grad_input.shape != self.shape:
        grad_input.resize_(self.shape)
    dim = dim % self.dim()
    half = self.shape[dim] // 2
    _glu_backward(grad_output, *halves, out=(grad_input.narrow(dim, 0, half), grad_input.narrow(dim, half, half)))
    return grad_input


@aten_op("glu_backward")
def glu_backward(grad_output: torch.Tensor, self: torch.Tensor, dim: int) -> Any:
    """The gradients of both halves, written into one tensor of ``self``'s shape."""
    if not self.is_floating_point():
        return NotImplemented
    return _glu_backward_into(grad_output, self, dim, torch.empty_like(self))


@aten_op("glu_backward.grad_input")
def glu_backward_out(grad_output: torch.Tensor, self: torch.Tensor, dim: int, *, grad_input: torch.Tensor) -> Any:
    return _glu_backward_into(grad_output, self, dim, grad_input)
