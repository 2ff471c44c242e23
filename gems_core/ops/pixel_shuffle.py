"""pixel_shuffle and pixel_unshuffle (with out=): channels traded for an upscaled (or
downscaled) image, ``(*, C r^2, H, W) <-> (*, C, H r, W r)``.

Both are one strided copy (gems' copy kernel): the input seen as 6 dims with the factor
split out, permuted, written into the result seen the same way. The result's memory format
is ATen's: the input's on the CPU (channels_last stays channels_last), contiguous on other
devices (ATen's CUDA kernel writes a contiguous result). Factors or sizes ATen
rejects are handed to it. An empty input gives an empty result of the shuffled shape, except
pixel_unshuffle's: the input's own shape, as ATen returns it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import suggest_memory_format

from ..registry import aten_op
from .copying import copy_into, may_overlap_itself, plain, spans_meet


def _shuffled_shape(self: torch.Tensor, factor: int, up: bool) -> list[int] | None:
    if not plain(self) or self.dim() < 3 or factor <= 0:
        return None
    *lead, c, h, w = self.shape
    if up:
        return None if c % (factor * factor) else [*lead, c // (factor * factor), h * factor, w * factor]
    if h % factor or w % factor:
        return None
    if self.numel() == 0:
        return list(self.shape)  # ATen returns an empty input's shape unchanged
    return [*lead, c * factor * factor, h // factor, w // factor]


def _write(self: torch.Tensor, out: torch.Tensor, factor: int, up: bool) -> torch.Tensor:
    lead = list(self.shape[:-3])
    b = len(lead)
    r = factor
    if up:  # (*, C, r, r, H, W) -> (*, C, H, r, W, r)
        c, h, w = out.shape[-3], self.shape[-2], self.shape[-1]
        src = self.view(*lead, c, r, r, h, w).permute(*range(b), b, b + 3, b + 1, b + 4, b + 2)
        dst = out.view(*lead, c, h, r, w, r)
    else:  # (*, C, H, r, W, r) -> (*, C, r, r, H, W)
        c, h, w = self.shape[-3], out.shape[-2], out.shape[-1]
        src = self.view(*lead, c, h, r, w, r).permute(*range(b), b, b + 2, b + 4, b + 1, b + 3)
        dst = out.view(*lead, c, r, r, h, w)
    copy_into(dst, src)
    return out


def _shuffle(self: torch.Tensor, factor: int, up: bool, out: torch.Tensor | None) -> Any:
    shape = _shuffled_shape(self, factor, up)
    if shape is None:
        return NotImplemented
    if out is None:
        # channels_last stays channels_last on the CPU; ATen's other kernels write contiguous
        fmt = suggest_memory_format(self) if self.device.type == "cpu" else torch.contiguous_format
        out = torch.empty(shape, dtype=self.dtype, device=self.device, memory_format=fmt)
    else:
        if out.dtype != self.dtype or out.device != self.device or (list(out.shape) != shape and out.numel()):
            return NotImplemented  # ATen raises, or resizes an out= that holds elements with a warning
        if list(out.shape) != shape:
            out.resize_(shape)  # an empty out= of another shape: resized, as ATen does
        if out.numel() and (not plain(out) or may_overlap_itself(out) or spans_meet(out, self)):
            return NotImplemented
    if out.numel() == 0:
        return out
    try:
        return _write(self, out, factor, up)
    except RuntimeError:  # an out= whose strides cannot be seen as the 6 dims
        return NotImplemented


@aten_op("pixel_shuffle")
def pixel_shuffle(self: torch.Tensor, upscale_factor: int) -> Any:
    """``(*, C r^2, H, W) -> (*, C, H r, W r)``: each channel group of r^2 becomes an r x r patch."""
    return _shuffle(self, upscale_factor, True, None)


@aten_op("pixel_shuffle.out")
def pixel_shuffle_out(self: torch.Tensor, upscale_factor: int, *, out: torch.Tensor) -> Any:
    return _shuffle(self, upscale_factor, True, out)


@aten_op("pixel_unshuffle")
def pixel_unshuffle(self: torch.Tensor, downscale_factor: int) -> Any:
    """``(*, C, H r, W r) -> (*, C r^2, H, W)``: each r x r patch becomes a group of channels."""
    return _shuffle(self, downscale_factor, False, None)


@aten_op("pixel_unshuffle.out")
def pixel_unshuffle_out(self: torch.Tensor, downscale_factor: int, *, out: torch.Tensor) -> Any:
    return _shuffle(self, downscale_factor, False, out)
