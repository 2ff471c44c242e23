"""Activations: exp, relu, gelu ("none" and "tanh") and silu, with their out= and in-place
overloads, plus the backward kernels of gelu and silu (so training runs on gems too).

Each scalar function computes in ATen's computation dtype (fp32 for fp16/bf16 inputs).
Dtypes on which ATen raises (relu on bool, gelu/silu on integers) are handed to ATen, so the
error is ATen's own.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import pointwise
from ..registry import aten_op


@triton.jit
def _tanh(y):
    # tanh(y) = sign(y) * (1 - e) / (1 + e), e = exp(-2|y|) in (0, 1]: no overflow for any y,
    # and NaN propagates through e.
    e = tl.exp(-2.0 * tl.abs(y))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(y < 0, -t, t)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _exp(x):
    # y = e^x
    return tl.exp(x)


@pointwise(kind="DEFAULT")
@triton.jit
def _relu(x):
    # y = max(x, 0); written as a select on x < 0 so NaN passes through
    return tl.where(x < 0, 0, x)


@triton.jit
def _normal_cdf(x):
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2 for float32 ``x``, without branches (libdevice's
    erff branches on |x|, which keeps the compiler from interleaving a thread's elements):
    both pieces are computed and one selected.

    - |x| < 1.42: erf(x / sqrt 2) = x P(x^2), P of degree 6 (fit error 1.2e-9);
    - |x| >= 1.42: erfc(|x| / sqrt 2) = 2^Q(|x|), Q of degree 8 in |x| (relative error of
      erfc 1.5e-8), so the lower tail Phi(x) = erfc / 2 has no cancellation; past 5.7,
      erfc < 1.2e-8 and is taken as 0 (as float32 1 + erf(x) rounds it).

    The coefficients are least-squares fits in float64 on Chebyshev nodes of each interval.
    Gelu through it in float32, against float64 where |gelu| > 1e-6 on [-8, 8]: relative
    error under 2.4e-6 (ATen's float32 0.5 x (1 + erf) loses the lower tail to cancellation:
    2.4e-4 on [-3, -1.42], 0.22 near -5). NaN passes through the caller's product with x."""
    a = tl.abs(x)
    s = a * a
    p = 8.679330059e-07 * s - 1.770294902e-05
    p = p * s + 0.0002293037234
    p = p * s - 0.002373578263
    p = p * s + 0.01994675756
    p = p * s - 0.1329807157
    p = p * s + 0.7978845599
    near = 0.5 + 0.5 * x * p
    t = tl.minimum(a, 5.7)
    q = 1.443640292e-07 * t - 5.781474414e-06
    q = q * t + 0.0001065232688
    q = q * t - 0.001206489656
    q = q * t + 0.009499486322
    q = q * t - 0.05607318493
    q = q * t - 0.4558808221
    q = q * t - 1.152899369
    q = q * t + 0.0004276854933
    half_tail = tl.where(a > 5.7, 0.0, 0.5 * tl.exp2(q))
    far = tl.where(x < 0, half_tail, 1.0 - half_tail)
    return tl.where(a < 1.42, near, far)


@pointwise(kind="DEFAULT")
@triton.jit
def _gelu_erf(x):
    # y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); float64 keeps libdevice's erf
    if x.dtype == tl.float64:
        y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    else:
        y = x * _normal_cdf(x)
    return y


@pointwise(kind="DEFAULT")
@triton.jit
def _gelu_tanh(x):
    # y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
    #   = x / (1 + exp(-2u)): no cancellation in 1 + tanh(u) for u << 0
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return x / (1.0 + tl.exp(-2.0 * u))


@pointwise(kind="DEFAULT")
@triton.jit
def _gelu_erf_backward(dy, x):
    # dx = dy (Phi(x) + x phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    if x.dtype == tl.float64:
        cdf = 0.5 * (1.0 + tl.math.erf(x * 0.7071067811865476))
    else:
        cdf = _normal_cdf(x)
    pdf = 0.3989422804014327 * tl.exp(-0.5 * x * x)
    return dy * (cdf + x * pdf)


@pointwise(kind="DEFAULT")
@triton.jit
def _gelu_tanh_backward(dy, x):
    # dx = dy (0.5 (1 + t) + 0.5 x (1 - t^2) u'),
    # t = tanh(u), u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = _tanh(u)
    du = 0.7978845608028654 * (1.0 + 0.134145 * x * x)
    return dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


@pointwise(kind="DEFAULT")
@triton.jit
def _silu(x):
    # y = x sigmoid(x) = x / (1 + e^-x)
    return x / (1.0 + tl.exp(-x))


@pointwise(kind="DEFAULT")
@triton.jit
def _silu_backward(dy, x):
    # dx = dy s (1 + x (1 - s)), s = sigmoid(x)
    s = 1.0 / (1.0 + tl.exp(-x))
    return dy * s * (1.0 + x * (1.0 - s))


def _is_float(*tensors: Any) -> bool:
    return all(t.is_floating_point() for t in tensors if isinstance(t, torch.Tensor))


# -- exp -------------------------------------------------------------------------------------


@aten_op("exp")
def exp(self: torch.Tensor) -> torch.Tensor:
    """e^x; integer and bool inputs give the default float dtype, as in ATen."""
    return _exp(self)


@aten_op("exp.out")
def exp_out(self: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return _exp(self, out=out)


@aten_op("exp_")
def exp_(self: torch.Tensor) -> torch.Tensor:
    return _exp.inplace(self)


# -- relu ------------------------------------------------------------------------------------


@aten_op("relu")
def relu(self: torch.Tensor) -> Any:
    """max(x, 0) with NaN propagated; bool inputs go to ATen (which rejects them)."""
    if self.dtype == torch.bool:
        return NotImplemented
    return _relu(self)


@aten_op("relu_")
def relu_(self: torch.Tensor) -> Any:
    if self.dtype == torch.bool:
        return NotImplemented
    return _relu.inplace(self)


# -- gelu ------------------------------------------------------------------------------------


def _gelu_kernels(approximate: str) -> tuple[Any, Any] | None:
    if approximate == "none":
        return _gelu_erf, _gelu_erf_backward
    if approximate == "tanh":
        return _gelu_tanh, _gelu_tanh_backward
    return None  # ATen raises its own error for an unknown mode


@aten_op("gelu")
def gelu(self: torch.Tensor, *, approximate: str = "none") -> Any:
    """GELU, exact (erf) or with the tanh approximation; floating inputs only."""
    kernels = _gelu_kernels(approximate)
    if kernels is None or not _is_float(self):
        return NotImplemented
    return kernels[0](self)


@aten_op("gelu.out")
def gelu_out(self: torch.Tensor, *, approximate: str = "none", out: torch.Tensor) -> Any:
    kernels = _gelu_kernels(approximate)
    if kernels is None or not _is_float(self, out):
        return NotImplemented
    return kernels[0](self, out=out)


@aten_op("gelu_")
def gelu_(self: torch.Tensor, *, approximate: str = "none") -> Any:
    kernels = _gelu_kernels(approximate)
    if kernels is None or not _is_float(self):
        return NotImplemented
    return kernels[0].inplace(self)


@aten_op("gelu_backward")
def gelu_backward(
    grad_output: torch.Tensor, self: torch.Tensor, *, approximate: str = "none"
) -> Any:
    """d gelu(x) / dx times ``grad_output``; called by autograd for gelu's backward."""
    kernels = _gelu_kernels(approximate)
    if kernels is None or not _is_float(grad_output, self):
        return NotImplemented
    return kernels[1](grad_output, self)


@aten_op("gelu_backward.grad_input")
def gelu_backward_out(
    grad_output: torch.Tensor,
    self: torch.Tensor,
    *,
    approximate: str = "none",
    grad_input: torch.Tensor,
) -> Any:
    kernels = _gelu_kernels(approximate)
    if kernels is None or not _is_float(grad_output, self, grad_input):
        return NotImplemented
    return kernels[1](grad_output, self, out=grad_input)


# -- silu ------------------------------------------------------------------------------------


@aten_op("silu")
def silu(self: torch.Tensor) -> Any:
    """x * sigmoid(x); floating inputs only."""
    if not _is_float(self):
        return NotImplemented
    return _silu(self)


@aten_op("silu.out")
def silu_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    if not _is_float(self, out):
        return NotImplemented
    return _silu(self, out=out)


@aten_op("silu_")
def silu_(self: torch.Tensor) -> Any:
    if not _is_float(self):
        return NotImplemented
    return _silu.inplace(self)


@aten_op("silu_backward")
def silu_backward(grad_output: torch.Tensor, self: torch.Tensor) -> Any:
    """d silu(x) / dx times ``grad_output``; called by autograd for silu's backward."""
    if not _is_float(grad_output, self):
        return NotImplemented
    return _silu_backward(grad_output, self)


@aten_op("silu_backward.grad_input")
def silu_backward_out(
    grad_output: torch.Tensor, self: torch.Tensor, *, grad_input: torch.Tensor
) -> Any:
    if not _is_float(grad_output, self, grad_input):
        return NotImplemented
    return _silu_backward(grad_output, self, out=grad_input)
