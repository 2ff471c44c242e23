"""add, sub, mul, div (true, trunc, floor) and neg, with their Tensor/Scalar, out= and
in-place overloads."""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import pointwise
from ..registry import aten_op
from .kernel_lib import fmod_fn


@pointwise(kind="DEFAULT")
@triton.jit
def _add(x, y):
    # if/else, not an early return: the compiler types every return of a function alike
    if x.dtype == tl.int1:
        return x | y  # bool: logical or (1-bit addition would wrap True + True to False)
    else:
        return x + y


@pointwise(kind="DEFAULT", extras=("alpha",))
@triton.jit
def _add_scaled(x, y, alpha):
    if x.dtype == tl.int1:
        return x | (y & (alpha != 0))
    else:
        return x + y * alpha


@pointwise(kind="DEFAULT")
@triton.jit
def _sub(x, y):
    return x - y


@pointwise(kind="DEFAULT", extras=("alpha",))
@triton.jit
def _sub_scaled(x, y, alpha):
    return x - y * alpha


@pointwise(kind="DEFAULT")
@triton.jit
def _mul(x, y):
    return x * y


@pointwise(kind="INT_TO_FLOAT")
@triton.jit
def _true_div(x, y):
    return x / y


@pointwise(kind="DEFAULT")
@triton.jit
def _trunc_div(x, y):
    if x.dtype.is_floating():
        # a correctly rounded quotient: the fast division GPUs default to can land just
        # below an exact integer quotient (3 / 0.75 -> 3.9999998), which truncation exposes
        q = tl.div_rn(x, y)
        return tl.where(q < 0, tl.math.ceil(q), tl.math.floor(q))
    else:
        return x // y  # integer // truncates toward zero in Triton, as C does


@pointwise(kind="DEFAULT")
@triton.jit
def _floor_div(x, y):
    if x.dtype.is_floating():
        # Python's floor division, as ATen computes it: from fmod so that
        # x == y * q + r holds without the rounding error of floor(x / y).
        r = fmod_fn(x, y)
        q = (x - r) / y
        q = tl.where((r != 0) & ((y < 0) != (r < 0)), q - 1, q)
        fq = tl.math.floor(q)
        fq = tl.where(q - fq > 0.5, fq + 1, fq)
        # a zero quotient takes the sign of x / y (ATen: copysign(0, x / y))
        return tl.where(y == 0, x / y, tl.where(q == 0, 0.0 * (x / y), fq))
    else:
        q = x // y
        fix = (x % y != 0) & ((x < 0) != (y < 0))
        return tl.where(fix, q - 1, q)


@pointwise(kind="DEFAULT")
@triton.jit
def _neg(x):
    return -x


def _check_alpha(self: Any, other: Any, alpha: Any) -> None:
    if isinstance(alpha, bool):
        _, result = _add.result_dtypes(self, other)
        if result != torch.bool:
            raise RuntimeError("Boolean alpha only supported for Boolean results.")
    elif isinstance(alpha, float):
        _, result = _add.result_dtypes(self, other)
        if not result.is_floating_point and not result.is_complex:
            raise RuntimeError(
                "For integral input tensors, argument alpha must not be a floating point number."
            )


def _check_sub(self: Any, other: Any) -> None:
    bools = [isinstance(x, torch.Tensor) and x.dtype == torch.bool for x in (self, other)]
    if all(bools):
        raise RuntimeError(
            "Subtraction, the `-` operator, with two bool tensors is not supported. "
            "Use the `^` or `logical_xor()` operator instead."
        )
    if any(bools) and all(isinstance(x, (torch.Tensor, bool)) and
                          (not isinstance(x, torch.Tensor) or x.dtype == torch.bool)
                          for x in (self, other)):
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
        )


def _add_like(plain: Any, scaled: Any, self: Any, other: Any, alpha: Any, out: Any = None) -> Any:
    _check_alpha(self, other, alpha)
    if alpha == 1 and not isinstance(alpha, float):
        return plain(self, other, out=out)
    return scaled(self, other, alpha=alpha, out=out)


@aten_op("add.Tensor", "add.Scalar")
def add(self: torch.Tensor, other: Any, *, alpha: Any = 1) -> torch.Tensor:
    if alpha.__class__ is int and alpha == 1:
        return _add(self, other)  # the common call: no alpha to check or apply
    return _add_like(_add, _add_scaled, self, other, alpha)


@aten_op("add.out", "add.Scalar_out")
def add_out(self: torch.Tensor, other: Any, *, alpha: Any = 1, out: torch.Tensor) -> torch.Tensor:
    return _add_like(_add, _add_scaled, self, other, alpha, out=out)


@aten_op("add_.Tensor", "add_.Scalar")
def add_(self: torch.Tensor, other: Any, *, alpha: Any = 1) -> torch.Tensor:
    _check_alpha(self, other, alpha)
    if alpha == 1 and not isinstance(alpha, float):
        return _add.inplace(self, other)
    return _add_scaled.inplace(self, other, alpha=alpha)


@aten_op("sub.Tensor", "sub.Scalar")
def sub(self: torch.Tensor, other: Any, *, alpha: Any = 1) -> torch.Tensor:
    _check_sub(self, other)
    return _add_like(_sub, _sub_scaled, self, other, alpha)


@aten_op("sub.out", "sub.Scalar_out")
def sub_out(self: torch.Tensor, other: Any, *, alpha: Any = 1, out: torch.Tensor) -> torch.Tensor:
    _check_sub(self, other)
    return _add_like(_sub, _sub_scaled, self, other, alpha, out=out)


@aten_op("sub_.Tensor", "sub_.Scalar")
def sub_(self: torch.Tensor, other: Any, *, alpha: Any = 1) -> torch.Tensor:
    _check_sub(self, other)
    _check_alpha(self, other, alpha)
    if alpha == 1 and not isinstance(alpha, float):
        return _sub.inplace(self, other)
    return _sub_scaled.inplace(self, other, alpha=alpha)


@aten_op("mul.Tensor", "mul.Scalar")
def mul(self: torch.Tensor, other: Any) -> torch.Tensor:
    return _mul(self, other)


@aten_op("mul.out", "mul.Scalar_out")
def mul_out(self: torch.Tensor, other: Any, *, out: torch.Tensor) -> torch.Tensor:
    return _mul(self, other, out=out)


@aten_op("mul_.Tensor", "mul_.Scalar")
def mul_(self: torch.Tensor, other: Any) -> torch.Tensor:
    return _mul.inplace(self, other)


def _division(rounding_mode: str | None) -> Any:
    if rounding_mode is None:
        return _true_div
    if rounding_mode == "trunc":
        return _trunc_div
    if rounding_mode == "floor":
        return _floor_div
    raise RuntimeError(
        "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
        f"'{rounding_mode}'"
    )


def _check_int_zero_division(op: Any, self: Any, other: Any) -> None:
    """ATen's CPU kernels raise on integer division by zero; its GPU kernels do not."""
    if op is _true_div:
        return
    _, result = op.result_dtypes(self, other)
    if result.is_floating_point or result == torch.bool:
        return
    if isinstance(other, torch.Tensor):
        if other.device.type == "cpu" and other.numel() and bool((other == 0).any()):
            raise RuntimeError("ZeroDivisionError")
    elif other == 0 and any(isinstance(x, torch.Tensor) and x.device.type == "cpu" for x in (self,)):
        raise RuntimeError("ZeroDivisionError")


@aten_op("div.Tensor", "div.Scalar")
def div(self: torch.Tensor, other: Any) -> torch.Tensor:
    return _true_div(self, other)


@aten_op("div.Tensor_mode", "div.Scalar_mode")
def div_mode(self: torch.Tensor, other: Any, *, rounding_mode: str | None) -> torch.Tensor:
    op = _division(rounding_mode)
    _check_int_zero_division(op, self, other)
    return op(self, other)


@aten_op("div.out", "div.Scalar_out")
def div_out(self: torch.Tensor, other: Any, *, out: torch.Tensor) -> torch.Tensor:
    return _true_div(self, other, out=out)


@aten_op("div.out_mode", "div.Scalar_mode_out")
def div_mode_out(
    self: torch.Tensor, other: Any, *, rounding_mode: str | None, out: torch.Tensor
) -> torch.Tensor:
    op = _division(rounding_mode)
    _check_int_zero_division(op, self, other)
    return op(self, other, out=out)


@aten_op("div_.Tensor", "div_.Scalar")
def div_(self: torch.Tensor, other: Any) -> torch.Tensor:
    return _true_div.inplace(self, other)


@aten_op("div_.Tensor_mode", "div_.Scalar_mode")
def div_mode_(self: torch.Tensor, other: Any, *, rounding_mode: str | None) -> torch.Tensor:
    op = _division(rounding_mode)
    _check_int_zero_division(op, self, other)
    return op.inplace(self, other)


def _check_neg(self: torch.Tensor) -> None:
    if self.dtype == torch.bool:
        raise RuntimeError(
            "Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
            "to invert a mask, use the `~` or `logical_not()` operator instead."
        )


@aten_op("neg")
def neg(self: torch.Tensor) -> torch.Tensor:
    _check_neg(self)
    return _neg(self)


@aten_op("neg.out")
def neg_out(self: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    _check_neg(self)
    return _neg(self, out=out)


@aten_op("neg_")
def neg_(self: torch.Tensor) -> torch.Tensor:
    _check_neg(self)
    return _neg.inplace(self)
