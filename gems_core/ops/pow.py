"""pow: Tensor_Tensor, Tensor_Scalar and Scalar (a number raised to a tensor), with out= and
in-place overloads.

The result dtype is ATen's ordinary promotion of base and exponent (a bool result is
rejected by ATen, so it goes there). Floating powers follow C's ``pow`` on every special
value, except a number exponent of +-0.5, which ATen (and gems) computes as sqrt or rsqrt;
integer powers are exact with two's-complement wrap-around, and a negative integer exponent
gives 1 for base 1, +-1 for base -1 and 0 otherwise, as ATen's kernels do (ATen raises only
when the exponent is a negative *number*, and so does gems).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import pointwise
from ..registry import aten_op
from .math import _rsqrt


@triton.jit
def _float_pow(x, y):
    # x^y = 2^(y log2|x|), then the sign and C's special cases:
    #   x < 0: NaN unless y is an integer (+-inf count as even integers); negative for odd y
    #   -0.0 with odd y keeps its sign (-0.0 or -inf); x^0 = 1^y = (-1)^(+-inf) = 1, NaN too
    magnitude = tl.exp2(y * tl.log2(tl.abs(x)))
    floor_y = tl.math.floor(y)
    y_integer = floor_y == y
    y_odd = y_integer & (y - 2.0 * tl.math.floor(y * 0.5) == 1.0)
    x_negative = (x < 0) | ((x == 0) & (1.0 / x < 0))
    r = tl.where(x_negative & y_odd, -magnitude, magnitude)
    r = tl.where((x < 0) & (x > float("-inf")) & ~y_integer, float("nan"), r)
    r = tl.where(y == 2, x * x, r)  # the common square, exactly rounded
    one = (y == 0) | (x == 1) | ((x == -1) & (tl.abs(y) == float("inf")))
    return tl.where(one, 1.0, r)


@triton.jit
def _integer_pow(x, y):
    # square-and-multiply over every bit of the exponent (x^y wraps as integer products do)
    result = tl.full(x.shape, 1, x.dtype)
    base = x
    e = y
    for _ in range(x.dtype.primitive_bitwidth):
        result = tl.where((e & 1) != 0, result * base, result)
        base = base * base
        e = e >> 1
    if x.dtype.is_int_signed():
        # y < 0: 1 / x^|y| truncated toward zero
        minus_one = tl.where((y & 1) != 0, -1, 1)
        negative = tl.where(x == 1, 1, tl.where(x == -1, minus_one, 0))
        result = tl.where(y < 0, negative.to(x.dtype), result)
    return result


@pointwise(kind="DEFAULT")
@triton.jit
def _pow(x, y):
    # x, y: base and exponent in the computation dtype
    if x.dtype.is_floating():
        return _float_pow(x, y)
    else:
        return _integer_pow(x, y)


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _sqrt(x):
    # x^0.5 as sqrt(x): sqrt(-0.0) = -0.0, sqrt(-inf) = NaN (C's pow says +0 and +inf)
    return tl.sqrt(x)


def _number_power(exponent: Any) -> Any:
    """ATen computes a number exponent of 0.5 or -0.5 as sqrt or rsqrt, which differ from
    pow on -0.0 and -inf (x^-0.5 of -0.0 is -inf, of -inf NaN; C's pow says +inf and +0);
    gems does the same, with the rsqrt op itself."""
    if isinstance(exponent, float) and exponent in (0.5, -0.5):
        return _sqrt if exponent == 0.5 else _rsqrt
    return None


def _served(base: Any, exponent: Any) -> bool:
    _, result = _pow.result_dtypes(base, exponent)
    return result != torch.bool and not result.is_complex


def _check_exponent(base: torch.Tensor, exponent: Any) -> bool:
    """ATen rejects a negative integer number as the exponent of an integer tensor; that
    call goes to ATen for its error."""
    integral = not base.is_floating_point() and not base.is_complex()
    return not (integral and isinstance(exponent, int) and not isinstance(exponent, bool) and exponent < 0)


def _out_ok(base: Any, exponent: Any, out: torch.Tensor) -> bool:
    return _served(base, exponent) and out.dtype == _pow.result_dtypes(base, exponent)[1]


@aten_op("pow.Tensor_Tensor", "pow.Scalar")
def pow(self: Any, exponent: Any) -> Any:
    """``self ** exponent`` elementwise; either may be a number where the overload allows."""
    if not _served(self, exponent):
        return NotImplemented
    return _pow(self, exponent)


@aten_op("pow.Tensor_Scalar")
def pow_tensor_scalar(self: torch.Tensor, exponent: Any) -> Any:
    if not _served(self, exponent) or not _check_exponent(self, exponent):
        return NotImplemented
    root = _number_power(exponent)
    return root(self) if root is not None else _pow(self, exponent)


@aten_op("pow.Tensor_Tensor_out", "pow.Scalar_out")
def pow_out(self: Any, exponent: Any, *, out: torch.Tensor) -> Any:
    if not _out_ok(self, exponent, out):
        return NotImplemented
    return _pow(self, exponent, out=out)


@aten_op("pow.Tensor_Scalar_out")
def pow_tensor_scalar_out(self: torch.Tensor, exponent: Any, *, out: torch.Tensor) -> Any:
    if not _out_ok(self, exponent, out) or not _check_exponent(self, exponent):
        return NotImplemented
    root = _number_power(exponent)
    return root(self, out=out) if root is not None else _pow(self, exponent, out=out)


@aten_op("pow_.Tensor", "pow_.Scalar")
def pow_(self: torch.Tensor, exponent: Any) -> Any:
    if not _served(self, exponent) or not _check_exponent(self, exponent):
        return NotImplemented
    root = _number_power(exponent)
    return root.inplace(self) if root is not None else _pow.inplace(self, exponent)
