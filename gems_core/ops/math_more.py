"""More unary math: inverse and hyperbolic trigonometry, logarithms, exp2/expm1, sqrt, i0,
logit and the rounding family (ceil, floor, round, trunc, sign, sgn, signbit), each with its
out= and in-place overloads.

The transcendental ones compute in floating point (ATen's INT_TO_FLOAT kind) from the few
functions every Triton target has (exp, log, sqrt, sin, cos): log1p and expm1 by Kahan's
compensations, so they keep full relative accuracy near 0. atan (and acos, atan2 built on
it) and i0 use float32-accurate approximations: float64 inputs of those go to ATen. The
rounding ops keep the input dtype (integers are returned unchanged, as in ATen).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import pointwise
from ..registry import aten_op
from .kernel_lib import ceil_fn, floor_fn
from .math import _unary_overloads


@triton.jit
def log1p_fn(x):
    # log(1 + x) = log(u) * x / (u - 1), u = 1 + x rounded: the rounding of u cancels
    u = 1.0 + x
    r = tl.log(u) * (x / (u - 1.0))
    r = tl.where(u == 1.0, x, r)
    return tl.where(u == float("inf"), u, r)


@triton.jit
def expm1_fn(x):
    # e^x - 1 = (u - 1) * x / log(u), u = e^x rounded: the rounding of u cancels
    u = tl.exp(x)
    r = (u - 1.0) * (x / tl.log(u))
    r = tl.where(u - 1.0 == -1.0, -1.0, r)
    r = tl.where(u == 1.0, x, r)
    return tl.where(u == float("inf"), u, r)


@triton.jit
def atan_fn(x):
    """atan(x) to float32 accuracy: |x| > 1 reflects through pi/2 - atan(1/|x|), then
    t > tan(pi/8) shifts by pi/4 - atan((1 - t) / (1 + t)); on [0, tan(pi/8)]
    atan(t) = t P(t^2), P of degree 5 fitted in float64 on Chebyshev nodes (relative
    error 7e-10)."""
    a = tl.abs(x)
    big = a > 1.0
    t = tl.where(big, 1.0 / a, a)
    mid = t > 0.41421356237309503
    t = tl.where(mid, (t - 1.0) / (t + 1.0), t)
    z = t * t
    p = -6.0770741821e-02 * z + 1.0592656512e-01
    p = p * z - 1.4243194650e-01
    p = p * z + 1.9998431420e-01
    p = p * z - 3.3333313284e-01
    p = p * z + 9.9999999974e-01
    r = t * p
    r = tl.where(mid, 0.7853981633974483 + r, r)
    r = tl.where(big, 1.5707963267948966 - r, r)
    r = tl.where(x < 0, -r, r)
    return tl.where(a == 0, x, r)  # keeps -0.0


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _acos(x):
    # acos(x) = 2 atan(sqrt((1 - x) / (1 + x))); |x| > 1 gives NaN through the sqrt
    return 2.0 * atan_fn(tl.sqrt((1.0 - x) / (1.0 + x)))


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _atan(x):
    return atan_fn(x)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _asinh(x):
    # sign(x) log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x|; log(a) + log 2 where a^2 overflows
    a = tl.abs(x)
    r = log1p_fn(a + a * a / (1.0 + tl.sqrt(1.0 + a * a)))
    r = tl.where(a > 268435456.0, tl.log(a) + 0.6931471805599453, r)
    r = tl.where(x < 0, -r, r)
    return tl.where(a == 0, x, r)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _atanh(x):
    # sign(x) log1p(2a / (1 - a)) / 2, a = |x|: inf at 1, NaN past it
    a = tl.abs(x)
    r = 0.5 * log1p_fn(2.0 * a / (1.0 - a))
    return tl.where(x < 0, -r, r)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _sinh(x):
    # |x| < 1: (m + m / (m + 1)) / 2, m = expm1(|x|) (no cancellation near 0);
    # else h^2 / 2 - 1 / (2 h^2) from h = e^(|x|/2), which does not overflow early
    a = tl.abs(x)
    m = expm1_fn(a)
    small = 0.5 * (m + m / (m + 1.0))
    h = tl.exp(0.5 * a)
    large = (0.5 * h) * h - 0.5 / (h * h)
    r = tl.where(a < 1.0, small, large)
    return tl.where(x < 0, -r, r)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _cosh(x):
    # h^2 / 2 + 1 / (2 h^2), h = e^(|x|/2)
    h = tl.exp(0.5 * tl.abs(x))
    return (0.5 * h) * h + 0.5 / (h * h)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _tan(x):
    return tl.sin(x) / tl.cos(x)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _exp2(x):
    return tl.exp2(x)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _expm1(x):
    return expm1_fn(x)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _log(x):
    return tl.log(x)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _log2(x):
    return tl.log2(x)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _log10(x):
    return tl.log(x) * 0.4342944819032518


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _log1p(x):
    return log1p_fn(x)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _sqrt(x):
    # correctly rounded, as ATen's (float64 square roots are)
    if x.dtype == tl.float32:
        r = tl.sqrt_rn(x)
    else:
        r = tl.sqrt(x)
    return r


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _i0(x):
    # |x| <= 15: sum over k < 30 of (x^2/4)^k / (k!)^2 (positive terms, no cancellation);
    # beyond: e^a / sqrt(2 pi a) (1 + sum c_k / a^k), c_k = ((2k-1)!!)^2 / (k! 8^k), written
    # e^(a/2) (e^(a/2) / sqrt(2 pi a)) so that it overflows no earlier than I0 does
    a = tl.abs(x)
    q = 0.25 * a * a
    term = q * 0.0 + 1.0
    series = term
    for k in range(1, 30):
        term = term * q / (k * k)
        series += term
    inv = 1.0 / tl.maximum(a, 15.0)
    tail = a * 0.0 + 1.0  # loop-carried values are tensors from the start, as Triton requires
    power = tail
    c = tail
    for k in range(1, 9):
        c = c * (2 * k - 1) * (2 * k - 1) / (8 * k)
        power = power * inv
        tail += c * power
    h = tl.exp(0.5 * a)
    large = h * (h / tl.sqrt(6.283185307179586 * a)) * tail
    return tl.where(a <= 15.0, series, large)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _logit(x):
    return tl.log(x / (1.0 - x))


@pointwise(kind="INT_TO_FLOAT", extras=("eps",))
@triton.jit
def _logit_eps(x, eps):
    # x clamped to [eps, 1 - eps] (NaN passes), then log(z / (1 - z))
    z = tl.where(x < eps, eps, x)
    z = tl.where(z > 1.0 - eps, 1.0 - eps, z)
    return tl.log(z / (1.0 - z))


@pointwise(kind="DEFAULT")
@triton.jit
def _ceil(x):
    if x.dtype.is_floating():
        return ceil_fn(x)
    else:
        return x


@pointwise(kind="DEFAULT")
@triton.jit
def _floor(x):
    if x.dtype.is_floating():
        return floor_fn(x)
    else:
        return x


@pointwise(kind="DEFAULT")
@triton.jit
def _trunc(x):
    if x.dtype.is_floating():
        return tl.where(x < 0, tl.math.ceil(x), tl.math.floor(x))
    else:
        return x


@pointwise(kind="DEFAULT")
@triton.jit
def _round(x):
    # to nearest, ties to even; a zero result keeps the sign of x; inf and NaN pass
    if x.dtype.is_floating():
        f = tl.math.floor(x)
        d = x - f
        odd = f - 2.0 * tl.math.floor(0.5 * f) != 0.0
        r = tl.where((d > 0.5) | ((d == 0.5) & odd), f + 1.0, f)
        r = tl.where(r == 0.0, x * 0.0, r)
        return tl.where(d == d, r, x)
    else:
        return x


@pointwise(kind="DEFAULT")
@triton.jit
def _sign(x):
    # 1, -1 or 0 (also for NaN, as ATen)
    return tl.where(x > 0, 1, tl.where(x < 0, -1, 0)).to(x.dtype)


@triton.jit
def signbit_fn(x):
    # the sign bit itself, so -0.0 and negative NaNs count
    if x.dtype == tl.float64:
        s = x.to(tl.int64, bitcast=True) < 0
    elif x.dtype == tl.float32:
        s = x.to(tl.int32, bitcast=True) < 0
    elif x.dtype.is_floating():
        s = x.to(tl.int16, bitcast=True) < 0
    else:
        s = x < 0
    return s


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _signbit(x):
    return signbit_fn(x)


def _below_float64(self: torch.Tensor) -> bool:
    return self.dtype != torch.float64


def _no_bool(self: torch.Tensor) -> bool:
    return self.dtype != torch.bool


for _name, _op, _doc in (
    ("acos", _acos, "acos(x) in floating point; float64 goes to ATen."),
    ("atan", _atan, "atan(x) in floating point; float64 goes to ATen."),
    ("i0", _i0, "The modified Bessel function I0 in floating point; float64 goes to ATen."),
):
    _unary_overloads(_name, _op, _doc, _below_float64)

for _name, _op, _doc in (
    ("asinh", _asinh, "asinh(x) in floating point (arcsinh reaches it as an alias)."),
    ("atanh", _atanh, "atanh(x) in floating point (arctanh reaches it as an alias)."),
    ("sinh", _sinh, "sinh(x) in floating point, accurate near 0."),
    ("cosh", _cosh, "cosh(x) in floating point."),
    ("tan", _tan, "tan(x) in floating point."),
    ("exp2", _exp2, "2^x in floating point."),
    ("expm1", _expm1, "e^x - 1 in floating point, accurate near 0."),
    ("log", _log, "The natural logarithm in floating point."),
    ("log2", _log2, "log2(x) in floating point."),
    ("log10", _log10, "log10(x) in floating point."),
    ("log1p", _log1p, "log(1 + x) in floating point, accurate near 0."),
    ("sqrt", _sqrt, "The correctly rounded square root in floating point."),
):
    _unary_overloads(_name, _op, _doc)

for _name, _op, _doc in (
    ("ceil", _ceil, "Rounds up; integers unchanged; bool goes to ATen."),
    ("floor", _floor, "Rounds down; integers unchanged; bool goes to ATen."),
    ("trunc", _trunc, "Rounds toward zero; integers unchanged; bool goes to ATen."),
    ("round", _round, "Rounds to nearest, ties to even; integers unchanged; bool goes to ATen."),
    ("sgn", _sign, "sign(x) for real inputs (complex goes to ATen); bool goes to ATen."),
):
    _unary_overloads(_name, _op, _doc, _no_bool)

_unary_overloads("sign", _sign, "1, -1 or 0 in the input's dtype (bool stays bool).")


@aten_op("signbit")
def signbit(self: torch.Tensor) -> Any:
    """Whether the sign bit is set (-0.0 and negative NaNs included); bool goes to ATen."""
    return _signbit(self) if self.dtype != torch.bool else NotImplemented


@aten_op("signbit.out")
def signbit_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    if self.dtype == torch.bool or out.dtype != torch.bool:
        return NotImplemented
    return _signbit(self, out=out)


def _logit_op(eps: float | None) -> tuple[Any, dict[str, Any]]:
    return (_logit, {}) if eps is None else (_logit_eps, {"eps": float(eps)})


@aten_op("logit")
def logit(self: torch.Tensor, eps: float | None = None) -> Any:
    """log(x / (1 - x)), x first clamped to [eps, 1 - eps] when eps is given."""
    op, extras = _logit_op(eps)
    return op(self, **extras)


@aten_op("logit.out")
def logit_out(self: torch.Tensor, eps: float | None = None, *, out: torch.Tensor) -> Any:
    op, extras = _logit_op(eps)
    if out.dtype != op.result_dtypes(self)[1]:
        return NotImplemented
    return op(self, out=out, **extras)


@aten_op("logit_")
def logit_(self: torch.Tensor, eps: float | None = None) -> Any:
    op, extras = _logit_op(eps)
    return op.inplace(self, **extras)
