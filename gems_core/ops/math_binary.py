"""More binary and ternary pointwise ops: atan2, copysign, fmin, fmax, hypot, logaddexp,
remainder, the bit shifts, the logical ops, lerp, addcmul and addcdiv, each with the
Tensor/Scalar, out= and in-place overloads ATen has for it.

Operands promote as in ATen. Dtypes ATen rejects (hypot or lerp on integers, shifts on
floats, ...) and out= tensors of another dtype than the result go to ATen, which raises or
casts as it does; so do the float64 calls of atan2, whose atan is float32-accurate.
``remainder`` is Python's modulo (the sign of the divisor), raising ATen's CPU error for an
integer division by zero; shifts by a negative count or by the width or more give 0 (left)
or the sign fill (right), as ATen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import PointwiseOp, pointwise
from ..registry import aten_op
from .arithmetic import _check_int_zero_division
from .kernel_lib import fmod_fn
from .math_more import atan_fn, log1p_fn, signbit_fn


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _atan2(y, x):
    # atan of min/max of |y|, |x| (1 for two infinities), reflected into the quadrant;
    # the signs of zeros pick 0 or pi as in C's atan2
    a = tl.abs(y)
    b = tl.abs(x)
    both_inf = (a == float("inf")) & (b == float("inf"))
    ratio = tl.where(both_inf, 1.0, tl.where(a > b, b / a, a / b))
    r = atan_fn(tl.where((a == 0) & (b == 0), 0.0, ratio))
    r = tl.where(a > b, 1.5707963267948966 - r, r)
    r = tl.where(signbit_fn(x), 3.141592653589793 - r, r)
    r = tl.where(signbit_fn(y), -r, r)
    return tl.where((y != y) | (x != x), y + x, r)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _copysign(x, y):
    a = tl.abs(x)
    return tl.where(signbit_fn(y), -a, a)


@pointwise(kind="DEFAULT")
@triton.jit
def _fmin(x, y):
    # the other operand where one is NaN
    return tl.where((x <= y) | (y != y), x, y)


@pointwise(kind="DEFAULT")
@triton.jit
def _fmax(x, y):
    return tl.where((x >= y) | (y != y), x, y)


@pointwise(kind="DEFAULT")
@triton.jit
def _hypot(x, y):
    # m sqrt(1 + (n/m)^2), m = max(|x|, |y|), n = min: no overflow of the squares;
    # an infinite operand gives inf even beside NaN
    a = tl.abs(x)
    b = tl.abs(y)
    m = tl.where(a > b, a, b)
    n = tl.where(a > b, b, a)
    q = n / m
    r = m * tl.sqrt(1.0 + q * q)
    r = tl.where(m == 0, 0.0, r)
    return tl.where((a == float("inf")) | (b == float("inf")), float("inf"), r)


@pointwise(kind="DEFAULT")
@triton.jit
def _logaddexp(x, y):
    # max + log1p(e^-|x - y|); equal operands (two like infinities) give x + log 2
    m = tl.where(x > y, x, y)
    r = m + log1p_fn(tl.exp(-tl.abs(x - y)))
    return tl.where(x == y, x + 0.6931471805599453, r)


@pointwise(kind="DEFAULT")
@triton.jit
def _remainder(x, y):
    # fmod, moved to the divisor's sign (as ATen computes it)
    r = fmod_fn(x, y)
    return tl.where((r != 0) & ((r < 0) != (y < 0)), r + y, r)


@pointwise(kind="DEFAULT")
@triton.jit
def _left_shift(x, y):
    bits: tl.constexpr = x.dtype.primitive_bitwidth
    inside = (y >= 0) & (y < bits)
    return tl.where(inside, x << tl.where(inside, y, 0), 0)


@pointwise(kind="DEFAULT")
@triton.jit
def _right_shift(x, y):
    bits: tl.constexpr = x.dtype.primitive_bitwidth
    inside = (y >= 0) & (y < bits)
    return tl.where(inside, x >> tl.where(inside, y, 0), tl.where(x < 0, -1, 0))


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _logical_and(x, y):
    return (x != 0) & (y != 0)


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _logical_or(x, y):
    return (x != 0) | (y != 0)


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _logical_xor(x, y):
    return (x != 0) != (y != 0)


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _logical_not(x):
    return x == 0


@pointwise(kind="DEFAULT")
@triton.jit
def _lerp(x, end, weight):
    # from the nearer end, as ATen: exact at weight 0 and 1
    d = end - x
    return tl.where(tl.abs(weight) < 0.5, x + weight * d, end - d * (1.0 - weight))


@pointwise(kind="DEFAULT", extras=("value",))
@triton.jit
def _addcmul(x, t1, t2, value):
    return x + value * t1 * t2


@pointwise(kind="DEFAULT", extras=("value",))
@triton.jit
def _addcdiv(x, t1, t2, value):
    return x + value * (t1 / t2)


def _result(op: PointwiseOp, *operands: Any) -> torch.dtype:
    return op.result_dtypes(*operands)[1]


def _floating(op: PointwiseOp) -> Callable[..., bool]:
    return lambda *operands: _result(op, *operands).is_floating_point


def _below_float64(op: PointwiseOp) -> Callable[..., bool]:
    return lambda *operands: _result(op, *operands) in (torch.float32, torch.float16, torch.bfloat16)


def _integral(op: PointwiseOp) -> Callable[..., bool]:
    def accepts(*operands: Any) -> bool:
        result = _result(op, *operands)
        return not result.is_floating_point and not result.is_complex and result != torch.bool

    return accepts


def _not_bool(op: PointwiseOp) -> Callable[..., bool]:
    return lambda *operands: _result(op, *operands) != torch.bool


def _any(*operands: Any) -> bool:
    return True  # complex operands reach ATen through the generated op itself


def _overloads(
    name: str,
    op: PointwiseOp,
    doc: str,
    accepts: Callable[..., bool],
    functional: Sequence[str],
    out: Sequence[str],
    inplace: Sequence[str] = (),
    check: Callable[..., None] | None = None,
    **extras: Any,
) -> None:
    """Register ``name``'s functional, out= and in-place overloads (the ATen names given)
    on ``op``. ``extras`` are keyword-only ATen arguments with their defaults, passed to
    ``op`` as its extras of the same names; ``check`` raises ATen's error for operands it
    rejects."""

    def picked(kwargs: dict[str, Any]) -> dict[str, Any]:
        return {k: kwargs.get(k, default) for k, default in extras.items()}

    def call(*operands: Any, **kwargs: Any) -> Any:
        if not accepts(*operands):
            return NotImplemented
        if check is not None:
            check(*operands)
        return op(*operands, **picked(kwargs))

    def out_variant(*operands: Any, out: torch.Tensor, **kwargs: Any) -> Any:
        if not accepts(*operands) or out.dtype != _result(op, *operands):
            return NotImplemented
        if check is not None:
            check(*operands)
        return op(*operands, out=out, **picked(kwargs))

    def inplace_variant(self: torch.Tensor, *operands: Any, **kwargs: Any) -> Any:
        if not accepts(self, *operands):
            return NotImplemented
        if check is not None:
            check(self, *operands)
        return op.inplace(self, *operands, **picked(kwargs))

    for fn, suffix, names in ((call, "", functional), (out_variant, "_out", out), (inplace_variant, "_", inplace)):
        if names:
            fn.__name__ = fn.__qualname__ = f"{name}{suffix}"
            fn.__doc__ = doc
            aten_op(*names)(fn)


def _zero_division(self: Any, other: Any) -> None:
    _check_int_zero_division(_remainder, self, other)


def _same_dtypes(op: PointwiseOp, zero_dim_too: bool) -> Callable[..., bool]:
    """Floating operands of one dtype: lerp raises on any other mix (0-d weights too), and
    addcmul/addcdiv promote a mix of dimensioned tensors, both left to ATen."""
    def accepts(*operands: Any) -> bool:
        dtypes = {x.dtype for x in operands if isinstance(x, torch.Tensor) and (zero_dim_too or x.dim())}
        return len(dtypes) <= 1 and _result(op, *operands).is_floating_point

    return accepts


_overloads("atan2", _atan2, "atan2(y, x) in floating point; float64 goes to ATen.", _below_float64(_atan2),
           ("atan2",), ("atan2.out",), ("atan2_",))
_overloads("copysign", _copysign, "|x| with the sign bit of y, in floating point.", _floating(_copysign),
           ("copysign.Tensor", "copysign.Scalar"), ("copysign.out", "copysign.Scalar_out"),
           ("copysign_.Tensor", "copysign_.Scalar"))
_overloads("fmin", _fmin, "The smaller operand, ignoring a NaN.", _not_bool(_fmin), ("fmin",), ("fmin.out",))
_overloads("fmax", _fmax, "The larger operand, ignoring a NaN.", _not_bool(_fmax), ("fmax",), ("fmax.out",))
_overloads("hypot", _hypot, "sqrt(x^2 + y^2) without overflow; floating operands.", _floating(_hypot),
           ("hypot",), ("hypot.out",), ("hypot_",))
_overloads("logaddexp", _logaddexp, "log(e^x + e^y) without overflow; floating operands.",
           _floating(_logaddexp), ("logaddexp",), ("logaddexp.out",))
_overloads("remainder", _remainder, "Python's modulo: the result has the divisor's sign.", _not_bool(_remainder),
           ("remainder.Tensor", "remainder.Scalar", "remainder.Scalar_Tensor"),
           ("remainder.Tensor_out", "remainder.Scalar_out", "remainder.Scalar_Tensor_out"),
           ("remainder_.Tensor", "remainder_.Scalar"), check=_zero_division)
for _name, _op in (("bitwise_left_shift", _left_shift), ("bitwise_right_shift", _right_shift)):
    _overloads(_name, _op, "Bit shift of integer operands, as ATen's for out-of-range counts.", _integral(_op),
               (f"{_name}.Tensor", f"{_name}.Tensor_Scalar", f"{_name}.Scalar_Tensor"),
               (f"{_name}.Tensor_out", f"{_name}.Tensor_Scalar_out", f"{_name}.Scalar_Tensor_out"),
               (f"{_name}_.Tensor", f"{_name}_.Tensor_Scalar"))
for _name, _op in (("logical_and", _logical_and), ("logical_or", _logical_or), ("logical_xor", _logical_xor),
                   ("logical_not", _logical_not)):
    _overloads(_name, _op, "Truth values (nonzero is true) combined into a bool tensor.", _any,
               (_name,), (f"{_name}.out",), (f"{_name}_",))
_overloads("lerp", _lerp, "self + weight (end - self), from the nearer end; floating operands of one dtype.",
           _same_dtypes(_lerp, True), ("lerp.Scalar", "lerp.Tensor"), ("lerp.Scalar_out", "lerp.Tensor_out"),
           ("lerp_.Scalar", "lerp_.Tensor"))
_overloads("addcmul", _addcmul, "self + value * tensor1 * tensor2; floating operands of one dtype.",
           _same_dtypes(_addcmul, False), ("addcmul",), ("addcmul.out",), ("addcmul_",), value=1)
_overloads("addcdiv", _addcdiv, "self + value * tensor1 / tensor2; floating operands of one dtype.",
           _same_dtypes(_addcdiv, False), ("addcdiv",), ("addcdiv.out",), ("addcdiv_",), value=1)
