"""Unary math: abs, reciprocal, rsqrt, sin, cos, tanh, sigmoid and erf, each with its out=
and in-place overloads.

abs keeps the input dtype (ATen's COMPLEX_TO_FLOAT kind on real inputs); the others compute
in floating point and give the default float dtype for integer and bool inputs
(INT_TO_FLOAT), so ``int_tensor.sin_()`` raises ATen's "can't be cast" error. Every kernel
propagates NaN and keeps the sign of -0.0 where the function is odd.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import PointwiseOp, pointwise
from ..registry import aten_op


@pointwise(kind="COMPLEX_TO_FLOAT")
@triton.jit
def _abs(x):
    # |x|; the most negative integer stays itself (two's complement wraps, as in ATen)
    return tl.abs(x)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _reciprocal(x):
    # 1 / x; +-0 -> +-inf
    return 1.0 / x


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _rsqrt(x):
    # -0.0 -> -inf, x < 0 -> NaN
    # 1 / sqrt(x), with subnormal x scaled into the normal range first (by 2^24, undone
    # exactly as 2^12): GPU square roots flush subnormals to zero, which would give inf
    tiny = tl.abs(x) < 1.1754943508222875e-38
    r = 1.0 / tl.sqrt(tl.where(tiny, x * 16777216.0, x))
    return tl.where(tiny, r * 4096.0, r)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _sin(x):
    return tl.sin(x)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _cos(x):
    return tl.cos(x)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _tanh(x):
    # tanh(x) = sign(x) (1 - e) / (1 + e), e = exp(-2|x|) in (0, 1]: no overflow for any x.
    # Near 0 the difference 1 - e loses relative (not absolute) accuracy, so |x| < 2^-12
    # returns x itself (tanh x = x (1 - x^2/3 + ...): exact to the dtype there), which also
    # keeps -0.0 and subnormals.
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    t = tl.where(x < 0, -t, t)
    return tl.where(tl.abs(x) < 0.000244140625, x, t)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _sigmoid(x):
    # 1 / (1 + e^-x): 0 for x -> -inf (e^-x overflows to inf), 1 for x -> +inf
    return tl.sigmoid(x)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _erf(x):
    return tl.math.erf(x)


def _no_bool(self: torch.Tensor) -> bool:
    return self.dtype != torch.bool


def _any(self: torch.Tensor) -> bool:
    return True


def _unary_overloads(
    name: str, op: PointwiseOp, doc: str, accepts: Callable[[torch.Tensor], bool] = _any, inplace: bool = True
) -> None:
    """Register ``name``, ``name.out`` and (with ``inplace``, for ops ATen has one of)
    ``name_`` for a one-operand op. ``accepts`` says which inputs gems serves; the others go
    to ATen, which raises its own error for them. An ``out`` of another dtype than the result
    goes to ATen too (it casts or raises, depending on the op)."""

    def functional(self: torch.Tensor) -> Any:
        if not accepts(self):
            return NotImplemented
        return op(self)

    def out_variant(self: torch.Tensor, *, out: torch.Tensor) -> Any:
        if not accepts(self) or out.dtype != op.result_dtypes(self)[1]:
            return NotImplemented
        return op(self, out=out)

    def in_place(self: torch.Tensor) -> Any:
        if not accepts(self):
            return NotImplemented
        return op.inplace(self)

    for fn, suffix in ((functional, ""), (out_variant, "_out"), (in_place, "_")):
        fn.__name__ = fn.__qualname__ = f"{name}{suffix}"
        fn.__doc__ = doc
    aten_op(name)(functional)
    aten_op(f"{name}.out")(out_variant)
    if inplace:
        aten_op(f"{name}_")(in_place)


_unary_overloads("abs", _abs, "|x| in the input's dtype; bool inputs go to ATen (which rejects them).",
                 _no_bool)
_unary_overloads("reciprocal", _reciprocal, "1 / x in floating point.")
_unary_overloads("rsqrt", _rsqrt, "1 / sqrt(x) in floating point.")
_unary_overloads("sin", _sin, "sin(x) in floating point.")
_unary_overloads("cos", _cos, "cos(x) in floating point.")
_unary_overloads("tanh", _tanh, "tanh(x) in floating point, from exp without overflow.")
_unary_overloads("sigmoid", _sigmoid, "1 / (1 + e^-x) in floating point.")
_unary_overloads("erf", _erf, "The error function, in floating point.")
