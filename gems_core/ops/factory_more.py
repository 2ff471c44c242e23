"""linspace, logspace and eye (with out=): the factories ATen's kernels fill directly.

linspace computes as ATen's kernel does, so results match it to the last bit where the
arithmetic allows: ``start`` and ``end`` taken in the result dtype (truncated for an
integer one), ``step = (end - start) / (steps - 1)``, element ``i`` is ``start + step * i``
in the first half and ``end - step * (steps - 1 - i)`` in the second (so both ends are
exact), in float32 for float32 and narrower floats, float64 for float64 and integers
(truncated when stored). logspace raises ``base`` to those values, in float64, for floating
results (integer ones are left to ATen: see :func:`_truncated_power`). eye is zeros
(the fill kernel) with ones written on the diagonal view (the fill kernel again).

Complex values, layouts other than strided, pinned memory and arguments ATen rejects
(negative sizes, ends the dtype cannot hold) are handed to ATen.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl

from ..codegen.pointwise import TL_DTYPES
from ..host_math import cdiv
from ..launch_cache import LaunchCache
from ..registry import aten_op
from .factory import FACTORY, f64_bits, fill_, zero_
from .kernel_lib import program_offsets
from .pow import _float_pow

_INT32 = 2**31 - 1


@triton.jit
def _linspace_kernel(
    out_ptr,  # (steps,) contiguous
    start,  # float64 computations: the 64-bit patterns of start, end, step and base
    end,
    step,
    base,
    steps,
    ACC: tl.constexpr,  # float32 or float64
    F64_BITS: tl.constexpr,
    LOG: tl.constexpr,  # logspace: base ** value
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    offsets = program_offsets(BLOCK_SIZE, INT64)
    mask = offsets < steps
    if F64_BITS:
        start = tl.cast(start, tl.int64).to(tl.float64, bitcast=True)
        end = tl.cast(end, tl.int64).to(tl.float64, bitcast=True)
        step = tl.cast(step, tl.int64).to(tl.float64, bitcast=True)
        base = tl.cast(base, tl.int64).to(tl.float64, bitcast=True)
    first = tl.full((BLOCK_SIZE,), start, ACC) + tl.full((BLOCK_SIZE,), step, ACC) * offsets.to(ACC)
    last = tl.full((BLOCK_SIZE,), end, ACC) - tl.full((BLOCK_SIZE,), step, ACC) * (steps - 1 - offsets).to(ACC)
    values = tl.where(offsets < steps // 2, first, last)
    if LOG:
        values = _float_pow(tl.full((BLOCK_SIZE,), base, ACC), values)
    tl.store(out_ptr + offsets, values.to(out_ptr.dtype.element_ty), mask=mask)


_linspace_launch = LaunchCache(_linspace_kernel, name="linspace")


def _fits(value: Any, dtype: torch.dtype) -> bool:
    """Whether ATen converts ``value`` to ``dtype`` without its overflow error."""
    if value is None:
        return True
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    return not math.isfinite(value) or info.min <= (value if dtype.is_floating_point else math.trunc(value)) <= info.max


def _served(dtype: torch.dtype, layout: Any, pin_memory: bool | None, start: Any, end: Any, base: Any) -> bool:
    return (dtype in TL_DTYPES and dtype != torch.bool and layout in (None, torch.strided) and not pin_memory
            and not any(isinstance(v, complex) for v in (start, end, base))
            and _fits(start, dtype) and _fits(end, dtype))


def _truncated_power(dtype: torch.dtype, base: float | None) -> bool:
    """logspace into an integer dtype: a power computed as 2^(y log2 base) lands just below
    an exact integer power and truncates one short, where ATen's pow is exact: left to ATen."""
    return base is not None and not dtype.is_floating_point


def _fill_linspace(out: torch.Tensor, start: Any, end: Any, steps: int, base: float | None) -> torch.Tensor:
    """``out`` (contiguous, ``steps`` elements) <- linspace, or logspace with ``base``."""
    if steps == 0:
        return out
    dtype = out.dtype
    f64 = base is not None or dtype == torch.float64 or not dtype.is_floating_point
    real = np.float64 if f64 else np.float32
    # start and end in the result dtype, as ATen's kernel takes them
    start, end = (torch.tensor(v, dtype=torch.float64).to(dtype).item() for v in (start, end))
    first, last = real(start), real(start if steps == 1 else end)  # one step: start alone
    step = (last - first) / real(steps - 1) if steps > 1 else real(0)
    args = [float(first), float(last), float(step), float(base if base is not None else 0)]
    if f64:
        args = [f64_bits(a) for a in args]
    config = FACTORY.choose("arange")
    _linspace_launch(
        (cdiv(steps, config.params["BLOCK_SIZE"]),), out, *args, steps,
        config=config, options=FACTORY.options(), ACC=tl.float64 if f64 else tl.float32, F64_BITS=f64,
        LOG=base is not None, INT64=steps > _INT32,
    )
    return out


def _space(start: Any, end: Any, steps: int, base: float | None, dtype: torch.dtype | None, layout: Any,
           device: Any, pin_memory: bool | None) -> Any:
    dtype = dtype or torch.get_default_dtype()
    if steps < 0 or not _served(dtype, layout, pin_memory, start, end, base) or _truncated_power(dtype, base):
        return NotImplemented  # ATen raises for a negative count
    return _fill_linspace(torch.empty(steps, dtype=dtype, device=device), start, end, steps, base)


def _space_out(start: Any, end: Any, steps: int, base: float | None, out: torch.Tensor) -> Any:
    if (steps < 0 or not _served(out.dtype, None, None, start, end, base) or _truncated_power(out.dtype, base)
            or out.shape != (steps,) or not out.is_contiguous()):
        return NotImplemented  # ATen resizes out (or raises)
    return _fill_linspace(out, start, end, steps, base)


@aten_op("linspace")
def linspace(start: Any, end: Any, steps: int, *, dtype: torch.dtype | None = None, layout: Any = None,
             device: Any = None, pin_memory: bool | None = None) -> Any:
    """``steps`` values evenly spaced from ``start`` to ``end``, both included."""
    return _space(start, end, steps, None, dtype, layout, device, pin_memory)


@aten_op("linspace.out")
def linspace_out(start: Any, end: Any, steps: int, *, out: torch.Tensor) -> Any:
    return _space_out(start, end, steps, None, out)


@aten_op("logspace")
def logspace(start: Any, end: Any, steps: int, base: float = 10.0, *, dtype: torch.dtype | None = None,
             layout: Any = None, device: Any = None, pin_memory: bool | None = None) -> Any:
    """``base`` raised to ``steps`` values evenly spaced from ``start`` to ``end``."""
    return _space(start, end, steps, float(base), dtype, layout, device, pin_memory)


@aten_op("logspace.out")
def logspace_out(start: Any, end: Any, steps: int, base: float = 10.0, *, out: torch.Tensor) -> Any:
    return _space_out(start, end, steps, float(base), out)


def _eye_into(out: torch.Tensor) -> Any:
    if zero_(out) is NotImplemented:
        return NotImplemented
    if out.numel():
        fill_(out.diagonal(), True if out.dtype == torch.bool else 1)
    return out


def _eye(n: int, m: int | None, dtype: torch.dtype | None, layout: Any, device: Any,
         pin_memory: bool | None) -> Any:
    dtype = dtype or torch.get_default_dtype()
    m = n if m is None else m
    if n < 0 or m < 0 or not (dtype in TL_DTYPES and layout in (None, torch.strided) and not pin_memory):
        return NotImplemented  # ATen raises for negative sizes
    return _eye_into(torch.empty((n, m), dtype=dtype, device=device))


@aten_op("eye")
def eye(n: int, *, dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
        pin_memory: bool | None = None) -> Any:
    """The n x n identity."""
    return _eye(n, None, dtype, layout, device, pin_memory)


@aten_op("eye.m")
def eye_m(n: int, m: int, *, dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
          pin_memory: bool | None = None) -> Any:
    """The n x m matrix with ones on its main diagonal."""
    return _eye(n, m, dtype, layout, device, pin_memory)


@aten_op("eye.out", "eye.m_out")
def eye_out(n: int, m: int | None = None, *, out: torch.Tensor) -> Any:
    m = n if m is None else m
    if n < 0 or m < 0 or out.dtype not in TL_DTYPES or out.shape != (n, m):
        return NotImplemented  # ATen resizes out (or raises)
    return _eye_into(out)
