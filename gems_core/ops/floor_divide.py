"""floor_divide (Tensor and Scalar; out= and in-place): ``div(rounding_mode="floor")`` under
its own ATen name, so ``a // b`` runs on gems too.

The kernel is arithmetic's floor division; as there, an integer division by zero raises
ATen's CPU error, and bool results (rejected by ATen) go to ATen.
"""

from __future__ import annotations

from typing import Any

import torch

from ..registry import aten_op
from .arithmetic import _check_int_zero_division, _floor_div


def _served(self: Any, other: Any) -> bool:
    _, result = _floor_div.result_dtypes(self, other)
    return result != torch.bool and not result.is_complex


@aten_op("floor_divide", "floor_divide.Scalar")
def floor_divide(self: torch.Tensor, other: Any) -> Any:
    """floor(self / other) elementwise, as Python's ``//``."""
    if not _served(self, other):
        return NotImplemented
    _check_int_zero_division(_floor_div, self, other)
    return _floor_div(self, other)


@aten_op("floor_divide.out", "floor_divide.Scalar_out")
def floor_divide_out(self: torch.Tensor, other: Any, *, out: torch.Tensor) -> Any:
    if not _served(self, other) or out.dtype != _floor_div.result_dtypes(self, other)[1]:
        return NotImplemented
    _check_int_zero_division(_floor_div, self, other)
    return _floor_div(self, other, out=out)


@aten_op("floor_divide_.Tensor", "floor_divide_.Scalar")
def floor_divide_(self: torch.Tensor, other: Any) -> Any:
    if not _served(self, other):
        return NotImplemented
    _check_int_zero_division(_floor_div, self, other)
    return _floor_div.inplace(self, other)
