"""Gated activations of LLM MLPs: ``silu_and_mul`` (SwiGLU) and ``gelu_and_mul`` (GeGLU).

    y = act(x[..., :d]) * x[..., d:],   x: (..., 2d) -> y: (..., d)

Both halves are read in place as strided views by the pointwise generator (no copy), in
fp32 for half types. The backward writes both halves of dx in one pass.
"""

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import pointwise
from . import _device

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_SQRT_HALF = 0.7071067811865476
_SQRT_2_OVER_PI = 0.7978845608028654


@triton.jit
def _sigmoid(a):
    return 1.0 / (1.0 + tl.exp(-a))


@triton.jit
def _tanh(u):
    # (1 - e) / (1 + e) with e = exp(-2|u|) in (0, 1]: no overflow
    e = tl.exp(-2.0 * tl.abs(u))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(u < 0, -t, t)


@pointwise(kind="DEFAULT")
@triton.jit
def _silu_mul(a, b):
    # y = a sigmoid(a) b
    return a * _sigmoid(a) * b


@pointwise(kind="DEFAULT", num_outputs=2)
@triton.jit
def _silu_mul_backward(dy, a, b):
    # da = dy b s (1 + a (1 - s)),  db = dy a s,  s = sigmoid(a)
    s = _sigmoid(a)
    return dy * b * s * (1.0 + a * (1.0 - s)), dy * a * s


@pointwise(kind="DEFAULT")
@triton.jit
def _gelu_mul(a, b):
    # y = 0.5 a (1 + erf(a / sqrt 2)) b
    return 0.5 * a * (1.0 + tl.math.erf(a * 0.7071067811865476)) * b


@pointwise(kind="DEFAULT", num_outputs=2)
@triton.jit
def _gelu_mul_backward(dy, a, b):
    # gelu'(a) = Phi(a) + a phi(a);  da = dy b gelu'(a),  db = dy gelu(a)
    cdf = 0.5 * (1.0 + tl.math.erf(a * 0.7071067811865476))
    pdf = 0.3989422804014327 * tl.exp(-0.5 * a * a)
    return dy * b * (cdf + a * pdf), dy * a * cdf


@pointwise(kind="DEFAULT")
@triton.jit
def _gelu_tanh_mul(a, b):
    # y = 0.5 a (1 + tanh(u)) b,  u = sqrt(2/pi) (a + 0.044715 a^3)
    u = 0.7978845608028654 * (a + 0.044715 * a * a * a)
    return 0.5 * a * (1.0 + _tanh(u)) * b


@pointwise(kind="DEFAULT", num_outputs=2)
@triton.jit
def _gelu_tanh_mul_backward(dy, a, b):
    # gelu'(a) = 0.5 (1 + t) + 0.5 a (1 - t^2) u',  u' = sqrt(2/pi) (1 + 3 * 0.044715 a^2)
    u = 0.7978845608028654 * (a + 0.044715 * a * a * a)
    t = _tanh(u)
    du = 0.7978845608028654 * (1.0 + 0.134145 * a * a)
    gelu = 0.5 * a * (1.0 + t)
    return dy * b * (0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * du), dy * gelu


_GELU = {"none": (_gelu_mul, _gelu_mul_backward), "tanh": (_gelu_tanh_mul, _gelu_tanh_mul_backward)}


def _halves(x: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    _device.check(name, x)
    if x.dtype not in _FLOATS:
        raise TypeError(f"{name}: expected a floating tensor, got {x.dtype}")
    if x.dim() == 0 or x.shape[-1] % 2:
        raise ValueError(f"{name}: the last dim must be even, got shape {list(x.shape)}")
    d = x.shape[-1] // 2
    return x[..., :d], x[..., d:]


def _half_shape(x: torch.Tensor) -> list[int]:
    return [*x.shape[:-1], x.shape[-1] // 2]


def _gated_backward(kernel: Any, grad: torch.Tensor, x: torch.Tensor, name: str) -> torch.Tensor:
    a, b = _halves(x, name)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    d = a.shape[-1]
    if dx.numel():
        kernel(grad, a, b, out=(dx[..., :d], dx[..., d:]))
    return dx


# -- silu_and_mul ----------------------------------------------------------------------------


@torch.library.custom_op("gems::silu_and_mul", mutates_args=())
def _silu_and_mul_op(x: torch.Tensor) -> torch.Tensor:
    a, b = _halves(x, "silu_and_mul")
    return _silu_mul(a, b)


@torch.library.custom_op("gems::silu_and_mul_backward", mutates_args=())
def _silu_and_mul_backward_op(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return _gated_backward(_silu_mul_backward, grad, x, "silu_and_mul")


@_silu_and_mul_op.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(_half_shape(x))


@_silu_and_mul_backward_op.register_fake
def _(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _save_x(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0])
    ctx.approximate = inputs[1] if len(inputs) > 1 else None


def _silu_and_mul_grad(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    return torch.ops.gems.silu_and_mul_backward(grad, x)


_silu_and_mul_op.register_autograd(_silu_and_mul_grad, setup_context=_save_x)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU's gate: ``silu(x[..., :d]) * x[..., d:]`` for ``x`` of shape (..., 2d).

    Differentiable (the backward is a Triton kernel too) and traceable by ``torch.compile``
    as ``torch.ops.gems.silu_and_mul``."""
    if _device.foreign(x):
        return silu_and_mul_reference(x)
    return torch.ops.gems.silu_and_mul(x)


def silu_and_mul_reference(x: torch.Tensor) -> torch.Tensor:
    """Pure-PyTorch :func:`silu_and_mul`."""
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d]) * x[..., d:]


# -- gelu_and_mul ----------------------------------------------------------------------------


def _gelu_kernels(approximate: str) -> tuple[Any, Any]:
    if approximate not in _GELU:
        raise ValueError(f"gelu_and_mul: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _GELU[approximate]


@torch.library.custom_op("gems::gelu_and_mul", mutates_args=())
def _gelu_and_mul_op(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    forward, _ = _gelu_kernels(approximate)
    a, b = _halves(x, "gelu_and_mul")
    return forward(a, b)


@torch.library.custom_op("gems::gelu_and_mul_backward", mutates_args=())
def _gelu_and_mul_backward_op(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    _, backward = _gelu_kernels(approximate)
    return _gated_backward(backward, grad, x, "gelu_and_mul")


@_gelu_and_mul_op.register_fake
def _(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return x.new_empty(_half_shape(x))


@_gelu_and_mul_backward_op.register_fake
def _(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _gelu_and_mul_grad(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    (x,) = ctx.saved_tensors
    return torch.ops.gems.gelu_and_mul_backward(grad, x, ctx.approximate), None


_gelu_and_mul_op.register_autograd(_gelu_and_mul_grad, setup_context=_save_x)


def gelu_and_mul(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """GeGLU's gate: ``gelu(x[..., :d], approximate) * x[..., d:]`` for ``x`` of shape
    (..., 2d); ``approximate`` is ``"none"`` (erf) or ``"tanh"``, as in ``F.gelu``.

    Differentiable and traceable as ``torch.ops.gems.gelu_and_mul``."""
    if _device.foreign(x):
        return gelu_and_mul_reference(x, approximate)
    return torch.ops.gems.gelu_and_mul(x, approximate)


def gelu_and_mul_reference(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """Pure-PyTorch :func:`gelu_and_mul`."""
    d = x.shape[-1] // 2
    return torch.nn.functional.gelu(x[..., :d], approximate=approximate) * x[..., d:]
