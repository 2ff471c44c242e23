"""where(condition, self, other): elementwise select, with its out= and Python-number
overloads.

ATen's rules: the condition takes no part in type promotion and must be bool (any other
condition goes to ATen, which accepts uint8 with a deprecation warning and rejects the
rest); ``self``/``other`` promote without an opmath dtype (fp16 stays fp16). The overloads
taking numbers are composites in ATen; gems serves them on the Autograd key (see
:func:`_wants_grad`).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import pointwise
from ..registry import aten_op
from .factory import converted_value


@pointwise(kind="NO_OPMATH", promote=(1, 2))
@triton.jit
def _where(condition, x, y):
    # out = condition ? x : y  (condition bool, x and y already in the result dtype)
    return tl.where(condition, x, y)


def _bool_condition(condition: torch.Tensor) -> bool:
    return condition.dtype == torch.bool


def _as_result_number(value: Any, result: torch.dtype) -> Any:
    """An int number for a floating result reaches the kernel as a float: the value is the
    same once cast, and int-to-bf16 casts are wrong in Triton's interpreter (3.9)."""
    if isinstance(value, int) and not isinstance(value, bool) and result.is_floating_point:
        return float(value)
    return value


def _wants_grad(*values: Any) -> bool:
    """The number overloads are registered on the Autograd key (ATen's composites would
    otherwise decompose before gems sees them), so a call that must record a graph goes to
    the composite, which reaches gems' ``where.self`` under autograd."""
    return torch.is_grad_enabled() and any(
        isinstance(v, torch.Tensor) and v.requires_grad for v in values
    )


@aten_op("where.self")
def where(condition: torch.Tensor, self: torch.Tensor, other: torch.Tensor) -> Any:
    """``self`` where ``condition`` holds, else ``other``, broadcast together."""
    if not _bool_condition(condition):
        return NotImplemented
    return _where(condition, self, other)


@aten_op("where.self_out")
def where_out(
    condition: torch.Tensor, self: torch.Tensor, other: torch.Tensor, *, out: torch.Tensor
) -> Any:
    if not _bool_condition(condition):
        return NotImplemented
    _, result = _where.result_dtypes(condition, self, other)
    if out.dtype != result:
        return NotImplemented  # ATen requires out's dtype to be exactly the result's
    return _where(condition, self, other, out=out)


@aten_op("where.ScalarSelf", "where.ScalarOther", autograd=True)
def where_scalar_operand(condition: torch.Tensor, self: Any, other: Any) -> Any:
    """One of ``self``/``other`` is a Python number: it promotes as a number does."""
    if not _bool_condition(condition) or _wants_grad(condition, self, other):
        return NotImplemented
    _, result = _where.result_dtypes(condition, self, other)
    if not result.is_floating_point and result != torch.bool:
        # ATen converts the number to an integer result dtype checked (1000 into int8 raises)
        self, other = (converted_value(v, result) if not isinstance(v, torch.Tensor) else v
                       for v in (self, other))
    return _where(condition, _as_result_number(self, result), _as_result_number(other, result))


@aten_op("where.Scalar", autograd=True)
def where_scalars(condition: torch.Tensor, self: Any, other: Any) -> Any:
    """Both operands are numbers: the result has their promoted dtype and the condition's
    shape."""
    if not _bool_condition(condition):
        return NotImplemented
    _, result = _where.result_dtypes(condition, self, other)
    if result.is_complex:
        return NotImplemented
    # one operand as a 0-d tensor of the result dtype: the kernel needs a tensor to promote
    other_tensor = torch.full((), other, dtype=result, device=condition.device)
    return _where(condition, _as_result_number(self, result), other_tensor)
