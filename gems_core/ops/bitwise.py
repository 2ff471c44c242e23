"""bitwise_and, bitwise_or, bitwise_xor (Tensor, Scalar and Scalar_Tensor; out= and in-place)
and bitwise_not, on integer and bool tensors.

``a & b``, ``a | b``, ``a ^ b`` and ``~a`` reach these through ATen's ``__and__`` family.
Operands promote as ATen's (a bool tensor with an int number gives int64; numbers wrap to
the tensor's integer dtype); a floating result is not defined, so those calls go to ATen,
which raises its own "not implemented for 'Float'" error.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl  # noqa: F401  (the interpreter looks for it beside kernels)

from ..codegen.pointwise import PointwiseOp, pointwise
from ..registry import aten_op


@pointwise(kind="DEFAULT")
@triton.jit
def _bitwise_and(x, y):
    return x & y


@pointwise(kind="DEFAULT")
@triton.jit
def _bitwise_or(x, y):
    return x | y


@pointwise(kind="DEFAULT")
@triton.jit
def _bitwise_xor(x, y):
    return x ^ y


@pointwise(kind="DEFAULT")
@triton.jit
def _bitwise_not(x):
    # ~x; for bool, logical not (~ on a 1-bit integer flips its one bit)
    return ~x


def _integral(op: PointwiseOp, *operands: Any) -> bool:
    _, result = op.result_dtypes(*operands)
    return not result.is_floating_point and not result.is_complex


def _binary_overloads(name: str, op: PointwiseOp) -> None:
    """Register every overload of one binary bitwise op."""

    def functional(self: Any, other: Any) -> Any:
        return op(self, other) if _integral(op, self, other) else NotImplemented

    def out_variant(self: Any, other: Any, *, out: torch.Tensor) -> Any:
        if not _integral(op, self, other) or out.dtype != op.result_dtypes(self, other)[1]:
            return NotImplemented
        return op(self, other, out=out)

    def inplace(self: torch.Tensor, other: Any) -> Any:
        return op.inplace(self, other) if _integral(op, self, other) else NotImplemented

    doc = f"{name} elementwise on integer and bool operands."
    for fn, suffix in ((functional, ""), (out_variant, "_out"), (inplace, "_")):
        fn.__name__ = fn.__qualname__ = f"{name}{suffix}"
        fn.__doc__ = doc
    aten_op(f"{name}.Tensor", f"{name}.Scalar", f"{name}.Scalar_Tensor")(functional)
    aten_op(f"{name}.Tensor_out", f"{name}.Scalar_out", f"{name}.Scalar_Tensor_out")(out_variant)
    aten_op(f"{name}_.Tensor", f"{name}_.Scalar")(inplace)


_binary_overloads("bitwise_and", _bitwise_and)
_binary_overloads("bitwise_or", _bitwise_or)
_binary_overloads("bitwise_xor", _bitwise_xor)


@aten_op("bitwise_not")
def bitwise_not(self: torch.Tensor) -> Any:
    """~x on integers, logical not on bools."""
    return _bitwise_not(self) if _integral(_bitwise_not, self) else NotImplemented


@aten_op("bitwise_not.out")
def bitwise_not_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    if not _integral(_bitwise_not, self) or out.dtype != self.dtype:
        return NotImplemented
    return _bitwise_not(self, out=out)


@aten_op("bitwise_not_")
def bitwise_not_(self: torch.Tensor) -> Any:
    return _bitwise_not.inplace(self) if _integral(_bitwise_not, self) else NotImplemented
