"""fill_, zero_ and arange: the backend kernels that ATen's factory functions reach.

torch.ones/zeros/full/ones_like/zeros_like/full_like (and new_ones...) are
CompositeExplicitAutograd in ATen: they allocate with ``empty`` and call ``fill_.Scalar`` or
``zero_`` on the backend key, so serving those two serves all of them. ATen's ``arange``
forms allocate an empty tensor (inferring the dtype: integers give int64, any float the
default dtype) and resize it in ``arange.start_out``; gems serves every form, the functional
ones allocating at the final size so that the native layer can repeat them.
"""

from __future__ import annotations

import math
import struct
import warnings
from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .kernel_lib import program_offsets

FACTORY = Tunable(
    "factory",
    params=("BLOCK_SIZE",),
    defaults=[KernelConfig({"BLOCK_SIZE": 1024}, num_warps=4)],
    description="fill_/zero_/arange: one program per BLOCK_SIZE elements written",
)

_INT32 = 2**31 - 1
_MAX_RANK = 4
_C_NAMES = {
    torch.int8: "int8_t", torch.uint8: "uint8_t", torch.int16: "int16_t", torch.int32: "int",
    torch.int64: "int64_t", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
    torch.float32: "float", torch.float64: "double",
}


@triton.jit
def _fill_kernel(
    out_ptr,  # (size0, size1, size2, size3) through strides; trailing dims may be 1
    value,  # the fill value (float64: its 64-bit pattern)
    numel,
    size1,
    size2,
    size3,
    stride0,
    stride1,
    stride2,
    stride3,
    F64_BITS: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # out[i] = value for every element i
    offsets = program_offsets(BLOCK_SIZE, INT64)
    mask = offsets < numel
    i3 = offsets % size3
    rest = offsets // size3
    i2 = rest % size2
    rest = rest // size2
    i1 = rest % size1
    i0 = rest // size1
    where = i0 * stride0 + i1 * stride1 + i2 * stride2 + i3 * stride3
    if F64_BITS:
        # a pattern that fits 32 bits (0.0, subnormals) arrives as an int32 argument
        v = tl.cast(value, tl.int64).to(tl.float64, bitcast=True)
    else:
        v = value
    tl.store(out_ptr + where, tl.full((BLOCK_SIZE,), v, out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _arange_kernel(
    out_ptr,  # (numel,) contiguous
    start,  # float64 results: the 64-bit patterns of start and step
    step,
    numel,
    ACC: tl.constexpr,  # computation dtype: int64, float32 or float64
    F64_BITS: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # out[i] = start + step * i, computed in ACC
    offsets = program_offsets(BLOCK_SIZE, INT64)
    mask = offsets < numel
    if F64_BITS:
        first = tl.cast(start, tl.int64).to(tl.float64, bitcast=True)
        delta = tl.cast(step, tl.int64).to(tl.float64, bitcast=True)
    else:
        first = start
        delta = step
    values = tl.full((BLOCK_SIZE,), first, ACC) + tl.full((BLOCK_SIZE,), delta, ACC) * offsets.to(ACC)
    tl.store(out_ptr + offsets, values.to(out_ptr.dtype.element_ty), mask=mask)


_fill_launch = LaunchCache(_fill_kernel, name="fill")
_arange_launch = LaunchCache(_arange_kernel, name="arange")


def f64_bits(value: float) -> int:
    return struct.unpack("<q", struct.pack("<d", float(value)))[0]


def _overflow(dtype: torch.dtype) -> RuntimeError:
    return RuntimeError(f"value cannot be converted to type {_C_NAMES[dtype]} without overflow")


def converted_value(value: Any, dtype: torch.dtype) -> Any:
    """``value`` as ATen's checked Scalar conversion to ``dtype`` gives it (a Python bool,
    int or float); raises ATen's overflow error. None for a value gems does not convert."""
    if isinstance(value, complex):
        return None
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        number = float(value)
        if math.isfinite(number) and abs(number) > torch.finfo(dtype).max:
            raise _overflow(dtype)
        return number
    if isinstance(value, float) and not math.isfinite(value):
        raise _overflow(dtype)
    info = torch.iinfo(dtype)
    if dtype == torch.uint8:
        if value > info.max or -int(value) > info.max:
            raise _overflow(dtype)
        return int(value) & 0xFF
    if value < info.min or value > info.max:
        raise _overflow(dtype)
    return int(value)


def _fill_layout(t: torch.Tensor) -> tuple[list[int], list[int]] | None:
    """(sizes, strides) of at most ``_MAX_RANK`` dims covering every element of ``t`` (dims
    of stride 0 dropped: writing one value twice is harmless); None past that rank."""
    dims = sorted(
        ((s, st) for s, st in zip(t.shape, t.stride()) if s != 1 and st != 0),
        key=lambda d: -abs(d[1]),
    )
    merged: list[list[int]] = []
    for size, stride in dims:
        if merged and merged[-1][1] == stride * size:
            merged[-1] = [merged[-1][0] * size, stride]
        else:
            merged.append([size, stride])
    if len(merged) > _MAX_RANK:
        return None
    merged = [[1, 0]] * (_MAX_RANK - len(merged)) + merged
    return [m[0] for m in merged], [m[1] for m in merged]


def fill_tensor(out: torch.Tensor, value: Any) -> Any:
    """Write ``value`` (already of ``out``'s kind) into every element of ``out``."""
    if out.dtype not in TL_DTYPES:
        return NotImplemented
    layout = _fill_layout(out)
    if layout is None:
        return NotImplemented
    if out.numel() == 0:
        return out
    sizes, strides = layout
    numel = math.prod(sizes)
    f64 = out.dtype == torch.float64
    if f64:
        value = f64_bits(value)
    elif out.dtype == torch.bool:
        value = int(value)
    reach = sum((s - 1) * abs(st) for s, st in zip(sizes, strides))
    config = FACTORY.choose("fill")
    _fill_launch(
        (cdiv(numel, config.params["BLOCK_SIZE"]),), out, value, numel, *sizes[1:], *strides,
        config=config, options=FACTORY.options(), F64_BITS=f64, INT64=max(reach, numel) > _INT32,
    )
    return out


def zeros(shape: Any, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A new dense tensor of zeros written by gems' fill kernel: an allocation and a launch,
    which the native layer's recorder repeats. ``torch.zeros`` (or ``.zero_()``) in a
    kernel's Python is an ATen call of its own, after which the op never leaves the Python
    path."""
    out = torch.empty(shape, dtype=dtype, device=device)
    if fill_tensor(out, False if dtype == torch.bool else 0) is NotImplemented:
        out.zero_()  # a dtype the fill kernel does not write
    return out


@aten_op("fill_.Scalar")
def fill_(self: torch.Tensor, value: Any) -> Any:
    """``self[...] = value``; serves torch.full/ones/full_like/ones_like/new_full..."""
    if self.dtype not in TL_DTYPES:
        return NotImplemented
    converted = converted_value(value, self.dtype)
    if converted is None:
        return NotImplemented
    return fill_tensor(self, converted)


@aten_op("fill_.Tensor")
def fill_tensor_(self: torch.Tensor, value: torch.Tensor) -> Any:
    if value.dim() != 0:
        raise RuntimeError(
            f"fill_ only supports 0-dimension value tensor but got tensor with {value.dim()} dimensions."
        )
    if value.device.type != "cpu":
        return NotImplemented  # ATen copies a device value without a host round trip
    return fill_(self, value.item())


@aten_op("zero_")
def zero_(self: torch.Tensor) -> Any:
    """``self[...] = 0``; serves torch.zeros/zeros_like/new_zeros."""
    return fill_(self, False if self.dtype == torch.bool else 0)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _show(x: Any) -> str:
    return str(int(x)) if isinstance(x, float) and x.is_integer() else str(x)


def _arange_size(start: Any, end: Any, step: Any, dtype: torch.dtype) -> tuple[int, Any, Any] | None:
    """(size, start, step) as ATen's arange computes them for ``dtype``, with its errors;
    None where ATen raises a conversion error of its own."""
    if not dtype.is_floating_point and not all(math.isfinite(float(v)) for v in (start, end, step)):
        return None  # ATen raises its own conversion error
    acc: Any = float if dtype.is_floating_point else int
    xstart, xend, xstep = acc(start), acc(end), acc(step)
    if dtype in (torch.float16, torch.bfloat16):
        # ATen accumulates these in float: a bound past float's range is infinite there
        limit = torch.finfo(torch.float32).max
        xstart, xend = (v if abs(v) <= limit else math.copysign(math.inf, v) for v in (xstart, xend))
    if xstep == 0:
        raise RuntimeError("step must be nonzero")
    if not (math.isfinite(float(xstart)) and math.isfinite(float(xend))):
        raise RuntimeError(f"unsupported range: {_show(xstart)} -> {_show(xend)}")
    if not ((xstep > 0 and xend >= xstart) or (xstep < 0 and xend <= xstart)):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dtype == torch.int64:
        sign = (xstep > 0) - (xstep < 0)
        size_d = float(_trunc_div(xend - xstart + xstep - sign, xstep))
    else:
        size_d = math.ceil((float(end) - float(start)) / float(step))
    if not 0 <= size_d <= 2**63 - 1:
        raise RuntimeError("invalid size, possible overflow?")
    return int(size_d), xstart, xstep


@aten_op("arange")
def arange_end(end: Any, *, dtype: torch.dtype | None = None, layout: Any = None, device: Any = None,
               pin_memory: bool | None = None) -> Any:
    """``torch.arange(end)``, as :func:`arange` from 0 (Hugging Face's position ids)."""
    return arange(0, end, 1, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


@aten_op("arange.start", "arange.start_step")
def arange(start: Any, end: Any, step: Any = 1, *, dtype: torch.dtype | None = None, layout: Any = None,
           device: Any = None, pin_memory: bool | None = None) -> Any:
    """``torch.arange(start, end[, step])``: the result allocated at its size, then filled
    as :func:`arange_out` fills. ATen's own form makes an empty tensor and resizes it in
    ``arange.start_out``, which the native layer cannot repeat; this one it can (a decode
    loop's positions replay from C++ once a position has been seen)."""
    if layout not in (None, torch.strided) or pin_memory:
        return NotImplemented
    if any(isinstance(v, complex) for v in (start, end, step)):
        return NotImplemented
    if dtype is None:  # ATen's inference: any float gives the default dtype, else int64
        dtype = torch.get_default_dtype() if any(isinstance(v, float) for v in (start, end, step)) else torch.int64
    if dtype not in TL_DTYPES or dtype == torch.bool:
        return NotImplemented
    computed = _arange_size(start, end, step, dtype)
    if computed is None:
        return NotImplemented
    size, first, delta = computed
    out = torch.empty(size, dtype=dtype, device=device)
    _fill_arange(out, size, first, delta)
    return out


@aten_op("arange.start_out")
def arange_out(start: Any, end: Any, step: Any = 1, *, out: torch.Tensor) -> Any:
    """``out = [start, start + step, ...)`` below ``end``; ``torch.arange(..., out=)`` and
    ``torch.arange(end)`` (ATen's composite) get here."""
    if out.dtype not in TL_DTYPES or out.dtype == torch.bool:
        return NotImplemented
    if any(isinstance(v, complex) for v in (start, end, step)):
        return NotImplemented
    computed = _arange_size(start, end, step, out.dtype)
    if computed is None:
        return NotImplemented
    size, first, delta = computed
    if out.numel() != size:
        if out.numel() > 0:
            warnings.warn(
                f"The number of elements in the out tensor of shape {list(out.shape)} is {out.numel()} "
                f"which does not match the computed number of elements {size}. Note that this may "
                f"occur as a result of rounding error. The out tensor will be resized to a tensor of "
                f"shape ({size},).",
                UserWarning, stacklevel=2,
            )
        out.resize_((size,))
    _fill_arange(out, size, first, delta)
    return out


def _fill_arange(out: torch.Tensor, size: int, first: Any, delta: Any) -> None:
    """``out[i] = first + delta * i`` for ``size`` elements (``out`` already that size)."""
    target = out if out.is_contiguous() else torch.empty(size, dtype=out.dtype, device=out.device)
    if size:
        if out.dtype.is_floating_point:
            acc = torch.float64 if out.dtype == torch.float64 else torch.float32
        else:
            acc = torch.int64
        f64 = acc == torch.float64
        if f64:
            first, delta = f64_bits(first), f64_bits(delta)
        config = FACTORY.choose("arange")
        _arange_launch(
            (cdiv(size, config.params["BLOCK_SIZE"]),), target, first, delta, size,
            config=config, options=FACTORY.options(), ACC=TL_DTYPES[acc], F64_BITS=f64,
            INT64=size > _INT32,
        )
    if target is not out:
        out.copy_(target)
