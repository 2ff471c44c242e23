"""Comparisons and value tests: eq, ne, gt, ge, lt, le (Tensor and Scalar, out= and in-place),
maximum and minimum (NaN-propagating), isnan, isinf, isposinf, isneginf, isfinite, isclose
and allclose.

ATen compares in the operands' common dtype: a number or a tensor of another dtype is first
cast to it (``half_tensor == 0.1`` compares with 0.1 rounded to fp16; ``int8_tensor == 1000``
with 1000 wrapped to int8). Integer numbers wrap in the kernel as they do in ATen; for fp16
and bf16, where the kernel compares in fp32, the other operand is rounded on the host first.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .. import runtime
from ..codegen.pointwise import PointwiseOp, pointwise
from ..registry import aten_op

_HALF = (torch.float16, torch.bfloat16)


@triton.jit
def is_nan(x):
    # True where x is NaN; never for integers and bools
    return x != x  # noqa: PLR0124 (NaN test)


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _eq(x, y):
    return x == y


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _ne(x, y):
    return x != y


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _gt(x, y):
    return x > y


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _ge(x, y):
    return x >= y


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _lt(x, y):
    return x < y


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _le(x, y):
    return x <= y


@pointwise(kind="DEFAULT")
@triton.jit
def _maximum(x, y):
    # the larger of x and y; NaN if either is NaN
    return tl.where((x > y) | is_nan(x), x, y)


@pointwise(kind="DEFAULT")
@triton.jit
def _minimum(x, y):
    # the smaller of x and y; NaN if either is NaN
    return tl.where((x < y) | is_nan(x), x, y)


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _isnan(x):
    return is_nan(x)


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _isinf(x):
    if x.dtype.is_floating():
        return tl.abs(x) == float("inf")
    else:
        return is_nan(x)  # all False


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _isposinf(x):
    if x.dtype.is_floating():
        return x == float("inf")
    else:
        return is_nan(x)  # all False


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _isneginf(x):
    if x.dtype.is_floating():
        return x == float("-inf")
    else:
        return is_nan(x)  # all False


@pointwise(kind="ALWAYS_BOOL")
@triton.jit
def _isfinite(x):
    if x.dtype.is_floating():
        return tl.abs(x) < float("inf")  # False for NaN too
    else:
        return ~is_nan(x)  # all True


@triton.jit
def _rounded(v, dtype: tl.constexpr):
    # v (fp32) rounded to ``dtype`` and widened back: ATen rounds every step to the input dtype
    if dtype == tl.float16 or dtype == tl.bfloat16:
        return v.to(dtype).to(tl.float32)
    else:
        return v


@pointwise(kind="ALWAYS_BOOL", extras=("rtol", "atol", "equal_nan", "tolerant"))
@triton.jit
def _isclose(x, y, rtol, atol, equal_nan, tolerant):
    # x, y in their own dtype. close = x == y  (infinities of one sign included)
    #   or (equal_nan and both NaN)
    #   or (tolerant and |x - y| finite and |x - y| <= atol + |rtol * y|), the error computed
    #      in the input's float dtype (fp32 for integers and bools), rounded as ATen rounds it
    if x.dtype == tl.float64:
        xf = x
        yf = y
    else:
        xf = x.to(tl.float32)
        yf = y.to(tl.float32)
    if x.dtype.is_floating():
        close = (xf == yf) | (equal_nan & is_nan(xf) & is_nan(yf))
    else:
        close = x == y
    allowed = _rounded(atol + _rounded(tl.abs(rtol * yf), x.dtype), x.dtype)
    actual = _rounded(tl.abs(xf - yf), x.dtype)
    within = (actual <= allowed) & (actual < float("inf"))
    return close | (tolerant & within)


def _round_number(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    return torch.tensor(float(value), dtype=torch.float64).to(dtype).item()


def _aligned(self: Any, other: Any) -> tuple[Any, Any]:
    """The operands as the kernel must see them: rounded to their common dtype when that is
    fp16 or bf16 (the kernel's fp32 comparison would otherwise see the unrounded value)."""
    if isinstance(self, torch.Tensor) and isinstance(other, torch.Tensor) and self.dtype == other.dtype:
        return self, other
    common = torch.result_type(self, other)
    if common not in _HALF:
        return self, other
    aligned = tuple(
        (v if v.dtype == common else v.to(common)) if isinstance(v, torch.Tensor) else _round_number(v, common)
        for v in (self, other)
    )
    return aligned[0], aligned[1]


def _bool_to_bf16_broken(target: torch.Tensor) -> bool:
    """Triton's interpreter (3.9) casts integers to bf16 bit for bit, so a bool result
    stored into a bf16 tensor is made as bool first and copied there."""
    return target.dtype == torch.bfloat16 and runtime.current().interpreter


def _comparison_overloads(name: str, op: PointwiseOp) -> None:
    """Register ``name.Tensor/.Scalar``, their ``_out`` and ``name_.Tensor/.Scalar``."""

    def functional(self: torch.Tensor, other: Any) -> Any:
        return op(*_aligned(self, other))

    def out_variant(self: torch.Tensor, other: Any, *, out: torch.Tensor) -> Any:
        if _bool_to_bf16_broken(out):
            return out.copy_(op(*_aligned(self, other))) if out.shape == torch.broadcast_shapes(
                *(v.shape for v in (self, other) if isinstance(v, torch.Tensor))) else NotImplemented
        return op(*_aligned(self, other), out=out)

    def inplace(self: torch.Tensor, other: Any) -> Any:
        a, b = _aligned(self, other)
        if a is not self:
            return NotImplemented  # self of another dtype than the comparison's: ATen's path
        if _bool_to_bf16_broken(self):
            result = op(self, b)
            if result.shape != self.shape:
                return op.inplace(self, b)  # raises ATen's broadcast error
            return self.copy_(result)
        return op.inplace(self, b)

    doc = f"x {name} y elementwise (bool result; the in-place form stores 0/1 in self's dtype)."
    for fn, suffix in ((functional, ""), (out_variant, "_out"), (inplace, "_")):
        fn.__name__ = fn.__qualname__ = f"{name}{suffix}"
        fn.__doc__ = doc
    aten_op(f"{name}.Tensor", f"{name}.Scalar")(functional)
    aten_op(f"{name}.Tensor_out", f"{name}.Scalar_out")(out_variant)
    aten_op(f"{name}_.Tensor", f"{name}_.Scalar")(inplace)


for _name, _op in (("eq", _eq), ("ne", _ne), ("gt", _gt), ("ge", _ge), ("lt", _lt), ("le", _le)):
    _comparison_overloads(_name, _op)


# -- maximum, minimum ------------------------------------------------------------------------


def _binary_out(op: PointwiseOp, self: torch.Tensor, other: torch.Tensor, out: torch.Tensor) -> Any:
    if out.dtype != op.result_dtypes(self, other)[1]:
        return NotImplemented  # ATen casts or raises, as the op has it
    return op(self, other, out=out)


@aten_op("maximum")
def maximum(self: torch.Tensor, other: torch.Tensor) -> Any:
    """The elementwise larger value; NaN wherever either operand is NaN."""
    return _maximum(self, other)


@aten_op("maximum.out")
def maximum_out(self: torch.Tensor, other: torch.Tensor, *, out: torch.Tensor) -> Any:
    return _binary_out(_maximum, self, other, out)


@aten_op("minimum")
def minimum(self: torch.Tensor, other: torch.Tensor) -> Any:
    """The elementwise smaller value; NaN wherever either operand is NaN."""
    return _minimum(self, other)


@aten_op("minimum.out")
def minimum_out(self: torch.Tensor, other: torch.Tensor, *, out: torch.Tensor) -> Any:
    return _binary_out(_minimum, self, other, out)


# -- value tests -----------------------------------------------------------------------------


def _bool_out(op: PointwiseOp, self: torch.Tensor, out: torch.Tensor) -> Any:
    return op(self, out=out) if out.dtype == torch.bool else NotImplemented


@aten_op("isnan")
def isnan(self: torch.Tensor) -> Any:
    """x != x: True where x is NaN."""
    return _isnan(self)


@aten_op("isnan.out")
def isnan_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    return _bool_out(_isnan, self, out)


@aten_op("isinf")
def isinf(self: torch.Tensor) -> Any:
    """True where x is +inf or -inf."""
    return _isinf(self)


@aten_op("isinf.out")
def isinf_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    return _bool_out(_isinf, self, out)


@aten_op("isposinf")
def isposinf(self: torch.Tensor) -> Any:
    """True where x is +inf."""
    return _isposinf(self)


@aten_op("isposinf.out")
def isposinf_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    return _bool_out(_isposinf, self, out)


@aten_op("isneginf")
def isneginf(self: torch.Tensor) -> Any:
    """True where x is -inf."""
    return _isneginf(self)


@aten_op("isneginf.out")
def isneginf_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    return _bool_out(_isneginf, self, out)


@aten_op("isfinite", autograd=True)  # a composite in ATen: served before it decomposes
def isfinite(self: torch.Tensor) -> Any:
    """True where x is neither NaN nor infinite (always for integers and bools)."""
    return _isfinite(self)


def _isclose_served(self: torch.Tensor, other: torch.Tensor, rtol: float, atol: float) -> bool:
    """ATen raises for mismatched dtypes and negative tolerances, and computes integer
    errors in the default dtype, which gems assumes is float32."""
    if self.dtype != other.dtype or rtol < 0 or atol < 0 or self.is_complex():
        return False
    return self.is_floating_point() or torch.get_default_dtype() == torch.float32


@aten_op("isclose", autograd=True)  # a composite in ATen: served before it decomposes
def isclose(
    self: torch.Tensor, other: torch.Tensor, rtol: float = 1e-05, atol: float = 1e-08,
    equal_nan: bool = False,
) -> Any:
    """|self - other| <= atol + rtol |other| elementwise, as ATen computes it (equal
    infinities are close; NaNs are close to each other only with ``equal_nan``)."""
    if not _isclose_served(self, other, rtol, atol):
        return NotImplemented
    return _isclose(
        self, other, rtol=float(rtol), atol=float(atol), equal_nan=bool(equal_nan),
        tolerant=not (rtol == 0 and atol == 0), compute_dtype=self.dtype,
    )


@aten_op("allclose")
def allclose(
    self: torch.Tensor, other: torch.Tensor, rtol: float = 1e-05, atol: float = 1e-08,
    equal_nan: bool = False,
) -> Any:
    """isclose everywhere (broadcast); a Python bool."""
    close = isclose(self, other, rtol, atol, equal_nan)
    if close is NotImplemented:
        return NotImplemented
    return bool(close.all())
