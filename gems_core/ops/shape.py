"""flip, repeat (and tile, ATen's composite over repeat) and constant_pad_nd.

All three are one strided copy: each output element reads the source element an index map
gives. flip reads through negated strides from the far end; repeat views the output as
``(r0, s0, r1, s1, ...)`` and reads the source with stride 0 along each ``r``; pad reads
``i - pad_before`` where that lies inside the source and writes the fill value elsewhere.
Dims are merged where the map allows, so the kernel takes at most ``_MAX_RANK`` dims.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl
from torch._prims_common import suggest_memory_format

from ..codegen.layout import iteration_layout
from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .factory import converted_value, f64_bits
from .kernel_lib import program_offsets

STRIDED_COPY = Tunable(
    "strided_copy",
    params=("BLOCK_SIZE",),
    defaults=[KernelConfig({"BLOCK_SIZE": 1024}, num_warps=4)],
    description="flip/repeat/constant_pad_nd: one program per BLOCK_SIZE output elements",
)

_INT32 = 2**31 - 1
_MAX_RANK = 6


@triton.jit
def _copy_kernel(
    src_ptr,  # read at src_base + sum_d j_d * src_stride_d
    dst_ptr,  # (size0, ..., size5) through dst strides; leading dims may be 1
    src_base,
    numel,
    size1, size2, size3, size4, size5,
    src_stride0, src_stride1, src_stride2, src_stride3, src_stride4, src_stride5,
    dst_stride0, dst_stride1, dst_stride2, dst_stride3, dst_stride4, dst_stride5,
    lo0, lo1, lo2, lo3, lo4, lo5,  # PAD: padding before each dim (negative crops)
    src_size0, src_size1, src_size2, src_size3, src_size4, src_size5,  # PAD only
    fill,  # PAD: the value outside the source (float64: its bit pattern)
    PAD: tl.constexpr,
    F64_BITS: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # dst[i] = src[j] with j_d = i_d (PAD: i_d - lo_d, and fill where j is outside src)
    offsets = program_offsets(BLOCK_SIZE, INT64)
    mask = offsets < numel
    i5 = offsets % size5
    rest = offsets // size5
    i4 = rest % size4
    rest = rest // size4
    i3 = rest % size3
    rest = rest // size3
    i2 = rest % size2
    rest = rest // size2
    i1 = rest % size1
    i0 = rest // size1
    dst = (i0 * dst_stride0 + i1 * dst_stride1 + i2 * dst_stride2 + i3 * dst_stride3
           + i4 * dst_stride4 + i5 * dst_stride5)
    if PAD:
        i0 -= lo0
        i1 -= lo1
        i2 -= lo2
        i3 -= lo3
        i4 -= lo4
        i5 -= lo5
        inside = (mask & (i0 >= 0) & (i0 < src_size0) & (i1 >= 0) & (i1 < src_size1)
                  & (i2 >= 0) & (i2 < src_size2) & (i3 >= 0) & (i3 < src_size3)
                  & (i4 >= 0) & (i4 < src_size4) & (i5 >= 0) & (i5 < src_size5))
    else:
        inside = mask
    src = (i0 * src_stride0 + i1 * src_stride1 + i2 * src_stride2 + i3 * src_stride3
           + i4 * src_stride4 + i5 * src_stride5)
    value = tl.load(src_ptr + src_base + src, mask=inside)
    if PAD:
        if F64_BITS:
            outside = tl.cast(fill, tl.int64).to(tl.float64, bitcast=True)  # bits that fit 32 bits arrive as int32
        else:
            outside = fill
        value = tl.where(inside, value, outside)
    tl.store(dst_ptr + dst, value.to(dst_ptr.dtype.element_ty), mask=mask)


_launch = LaunchCache(_copy_kernel, name="strided_copy")


def _pad_front(values: Sequence[int], fill: int) -> list[int]:
    return [fill] * (_MAX_RANK - len(values)) + list(values)


def _copy(
    src: torch.Tensor, dst: torch.Tensor, shape: Sequence[int], src_strides: Sequence[int],
    dst_strides: Sequence[int], src_base: int = 0, lo: Sequence[int] = (),
    src_sizes: Sequence[int] = (), fill: Any = None,
) -> bool:
    """Launch the copy over ``shape`` (False where it has more than ``_MAX_RANK`` dims)."""
    numel = math.prod(shape)
    if numel == 0:
        return True
    if len(shape) > _MAX_RANK:
        return False
    pad = fill is not None
    f64 = pad and dst.dtype == torch.float64
    if f64:
        fill = f64_bits(fill)
    elif dst.dtype == torch.bool and pad:
        fill = int(fill)
    reach = max(
        sum((s - 1) * abs(st) for s, st in zip(shape, strides)) for strides in (src_strides, dst_strides)
    )
    config = STRIDED_COPY.choose("copy")
    _launch(
        (cdiv(numel, config.params["BLOCK_SIZE"]),), src, dst, src_base, numel,
        *_pad_front(shape, 1)[1:], *_pad_front(src_strides, 0), *_pad_front(dst_strides, 0),
        *_pad_front(lo, 0), *_pad_front(src_sizes, 1), fill if pad else 0,
        config=config, options=STRIDED_COPY.options(), PAD=pad, F64_BITS=f64,
        INT64=max(numel, reach + src_base) > _INT32,
    )
    return True


def _wrap_dims(dims: Sequence[int], ndim: int) -> list[int]:
    rank = max(ndim, 1)
    wrapped: list[int] = []
    for d in dims:
        if not -rank <= d < rank:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {d})"
            )
        if d % rank in wrapped:
            raise RuntimeError(f"dim {d % rank} appears multiple times in the list of dims")
        wrapped.append(d % rank)
    return [d for d in wrapped if d < ndim]


@aten_op("flip")
def flip(self: torch.Tensor, dims: Sequence[int]) -> Any:
    """``self`` reversed along ``dims``."""
    flipped = _wrap_dims(dims, self.dim())
    if self.dtype not in TL_DTYPES:
        return NotImplemented
    out = torch.empty_like(self)
    base = sum((self.size(d) - 1) * self.stride(d) for d in flipped)
    src_strides = tuple(-s if d in flipped else s for d, s in enumerate(self.stride()))
    shape, (dst_strides, src_merged) = iteration_layout(tuple(self.shape), [tuple(out.stride()), src_strides])
    if not _copy(self, out, shape, src_merged, dst_strides, src_base=base):
        return NotImplemented
    return out


@aten_op("repeat")
def repeat(self: torch.Tensor, repeats: Sequence[int]) -> Any:
    """``self`` tiled ``repeats[d]`` times along each dim (leading dims added as needed)."""
    if len(repeats) < self.dim():
        raise RuntimeError(
            "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor"
        )
    if self.dtype not in TL_DTYPES or any(r < 0 for r in repeats):
        return NotImplemented  # ATen raises for a negative repeat
    lead = len(repeats) - self.dim()
    sizes = [1] * lead + list(self.shape)
    strides = [0] * lead + list(self.stride())
    out = torch.empty([r * s for r, s in zip(repeats, sizes)], dtype=self.dtype, device=self.device)
    # out viewed as (r0, s0, r1, s1, ...), contiguous; the source repeats along each r
    view_shape = tuple(x for r, s in zip(repeats, sizes) for x in (r, s))
    dst_view = [1] * len(view_shape)
    for d in range(len(view_shape) - 2, -1, -1):
        dst_view[d] = dst_view[d + 1] * view_shape[d + 1]
    src_view = tuple(x for st in strides for x in (0, st))
    shape, (dst_strides, src_strides) = iteration_layout(view_shape, [tuple(dst_view), src_view])
    if not _copy(self, out, shape, src_strides, dst_strides):
        return NotImplemented
    return out


def _pad_layout(
    src: torch.Tensor, out: torch.Tensor, before: list[int]
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """(shape, src strides, dst strides, lo, src sizes) with size-1 unpadded dims dropped and
    an unpadded dim folded into the dim outside it where both tensors step through memory."""
    dims: list[list[int]] = []
    for d in range(src.dim()):
        size, lo, src_size = out.size(d), before[d], src.size(d)
        entry = [size, src.stride(d), out.stride(d), lo, src_size]
        if size == 1 and lo == 0 and src_size == 1:
            continue
        if dims and lo == 0 and size == src_size:
            prev = dims[-1]
            if prev[1] == src.stride(d) * size and prev[2] == out.stride(d) * size:
                dims[-1] = [prev[0] * size, src.stride(d), out.stride(d), prev[3] * size, prev[4] * size]
                continue
        dims.append(entry)
    if not dims:
        dims = [[1, 0, 0, 0, 1]]
    return [list(col) for col in zip(*dims)]  # type: ignore[return-value]


@aten_op("constant_pad_nd")
def constant_pad_nd(self: torch.Tensor, pad: Sequence[int], value: Any = 0) -> Any:
    """``self`` padded with ``value``: ``pad`` gives (before, after) pairs from the last dim
    backwards; negative amounts crop."""
    if len(pad) % 2:
        raise RuntimeError(f"Length of pad must be even but instead it equals {len(pad)}")
    if len(pad) // 2 > self.dim():
        raise RuntimeError(
            f"Length of pad should be no more than twice the number of dimensions of the input. "
            f"Pad length is {len(pad)}while the input has {self.dim()}dimensions."
        )
    if self.dtype not in TL_DTYPES:
        return NotImplemented
    fill = converted_value(value, self.dtype)
    if fill is None:
        return NotImplemented
    before = [0] * self.dim()
    shape = list(self.shape)
    for i in range(len(pad) // 2):
        d = self.dim() - 1 - i
        before[d] = pad[2 * i]
        shape[d] += pad[2 * i] + pad[2 * i + 1]
    if any(s < 0 for s in shape):
        return NotImplemented  # ATen raises for a negative output size
    # ATen's layout: a channels_last input gives a channels_last result
    out = torch.empty(shape, dtype=self.dtype, device=self.device, memory_format=suggest_memory_format(self))
    sizes, src_strides, dst_strides, lo, src_sizes = _pad_layout(self, out, before)
    if not _copy(self, out, sizes, src_strides, dst_strides, lo=lo, src_sizes=src_sizes, fill=fill):
        return NotImplemented
    return out
