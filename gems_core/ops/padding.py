"""reflection_pad1d/2d/3d and replication_pad1d/2d/3d (functional, out= and their backward),
and constant_pad_nd.out (the functional constant pad is flip and repeat's strided copy, in
:mod:`.shape`).

Forward: one kernel over tiles of the output seen as rows of channels (channels_last, as
ATen lays out the result of a channels_last input) or rows of W, so per-row index math is
done once per row and lanes write along the contiguous dim. Output coordinate ``o`` of a
dim padded by ``lo`` before (negative: cropped) reads input coordinate ``i = o - lo``
taken back into ``[0, n)`` by the mode: reflect mirrors about the edges (``-i``,
``2(n-1) - i``), replicate clamps. The input is read through its strides, so no layout is
copied.

Backward: one gather kernel over grad_input (no atomics, so deterministic): input
coordinate ``i`` sums the outputs that read it, which lie among the left pad (``o < lo``),
``o = i + lo`` and the right pad; each candidate counts where the forward map sends it to
``i``. Sums are in float32 (float64 for float64).

Arguments ATen refuses (pads too large for reflect, odd pad lists, wrong ranks, empty
spatial dims) go to ATen, which raises its own error.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from torch._prims_common import suggest_memory_format

from ..codegen.layout import max_offset
from ..codegen.overlap import assert_no_internal_overlap, assert_no_overlap
from ..codegen.pointwise import TL_DTYPES
from ..launch_cache import LaunchCache
from ..registry import aten_op
from . import shape
from .kernel_lib import ncdhw_tile
from .masked import write_out
from .resample import register_forms, tile_grid, tile_tunable

PADDING = tile_tunable("padding", 16, "reflection/replication pads, output rows")
PADDING_BACKWARD = tile_tunable("padding_backward", 8, "reflection/replication pads' backward, grad_input rows")

REFLECT, REPLICATE = 1, 2
_INT32 = 2**31 - 1
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def _source(o, size, lo, MODE: tl.constexpr):
    """The input coordinate output coordinate ``o`` reads."""
    i = o - lo
    if MODE == 1:  # REFLECT
        i = tl.where(i < 0, -i, i)
        i = tl.where(i >= size, 2 * (size - 1) - i, i)
    else:  # REPLICATE
        i = tl.minimum(tl.maximum(i, 0), size - 1)
    return i


@triton.jit
def _pad_kernel(
    x_ptr,  # (N, C, D, H, W) through strides sN, sC, sD, sH, sW
    out_ptr,  # (N, C, OD, OH, OW), dense in NCDHW or (CHANNELS_LAST) NDHWC order
    M, INNER,  # the output as M rows of INNER (channels or OW) elements
    C, D, H, W,
    OD, OH, OW,
    LD, LH, LW,  # pad before each spatial dim (negative: crop)
    sN, sC, sD, sH, sW,
    MODE: tl.constexpr,  # REFLECT, REPLICATE
    CHANNELS_LAST: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # out[n, c, od, oh, ow] = x[n, c, src(od), src(oh), src(ow)], src(o) = o - L mapped into the input
    p, live, n, c, od, oh, ow = ncdhw_tile(M, INNER, C, OD, OH, OW, CHANNELS_LAST, INT64, BLOCK_M, BLOCK_N)
    d = _source(od, D, LD, MODE)
    h = _source(oh, H, LH, MODE)
    w = _source(ow, W, LW, MODE)
    x = tl.load(x_ptr + n * sN + c * sC + d * sD + h * sH + w * sW, mask=live)
    tl.store(out_ptr + p, x, mask=live)


@triton.jit
def _candidate(i, u, size, out_size, lo, left, MODE: tl.constexpr):
    """The ``u``-th output coordinate that may read input coordinate ``i`` (the left pad's
    ``left`` coordinates, then ``i + lo``, then the right pad's), -1 where it does not."""
    o = tl.where(u < left, u, tl.where(u == left, i + lo, out_size - (u - left)))
    hit = (o >= 0) & (o < out_size)
    hit = hit & (_source(o, size, lo, MODE) == i)
    return tl.where(hit, o, -1)


@triton.jit
def _pad_backward_kernel(
    go_ptr,  # (N, C, OD, OH, OW) through strides g*
    gi_ptr,  # (N, C, D, H, W), dense in NCDHW order or (CHANNELS_LAST) NDHWC order
    M, INNER,  # grad_input as M rows of INNER (channels or W) elements
    C, D, H, W,
    OD, OH, OW,
    LD, LH, LW,  # pad before each spatial dim
    KD, KH, KW,  # left and right pad widths (>= 0) plus one: candidates per dim
    gN, gC, gD, gH, gW,
    MODE: tl.constexpr,  # REFLECT, REPLICATE
    CHANNELS_LAST: tl.constexpr,
    ACC: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # gi[n, c, d, h, w] = sum of go[n, c, od, oh, ow] over the outputs whose source is (d, h, w)
    p, live, n, c, d, h, w = ncdhw_tile(M, INNER, C, D, H, W, CHANNELS_LAST, INT64, BLOCK_M, BLOCK_N)
    base = go_ptr + n * gN + c * gC
    acc = tl.zeros((BLOCK_M, BLOCK_N), ACC)
    for ud in range(0, KD):
        od = _candidate(d, ud, D, OD, LD, tl.maximum(LD, 0), MODE)
        for uh in range(0, KH):
            oh = _candidate(h, uh, H, OH, LH, tl.maximum(LH, 0), MODE)
            for uw in range(0, KW):
                ow = _candidate(w, uw, W, OW, LW, tl.maximum(LW, 0), MODE)
                hit = live & (od >= 0) & (oh >= 0) & (ow >= 0)
                g = tl.load(base + od * gD + oh * gH + ow * gW, mask=hit, other=0)
                acc += g.to(ACC)
    tl.store(gi_ptr + p, acc.to(gi_ptr.dtype.element_ty), mask=live)


_pad = LaunchCache(_pad_kernel, name="padding")
_pad_backward = LaunchCache(_pad_backward_kernel, name="padding_backward")


def _pad_into(x: torch.Tensor, pairs: list[tuple[int, int]], dims: int, mode: int) -> torch.Tensor:
    """``x`` padded by ``pairs`` ((before, after) per dim) in its last ``dims`` dims, into a
    new tensor in x's suggested memory format."""
    fmt = suggest_memory_format(x)
    out = torch.empty([n + lo + hi for n, (lo, hi) in zip(x.shape, pairs)], dtype=x.dtype, device=x.device,
                      memory_format=fmt)
    if out.numel():
        grid, rows, config = tile_grid(out, fmt != torch.contiguous_format, PADDING.choose("all"))
        sizes, strides = _as_5d(x, dims)
        reach = max(out.numel(), max_offset(tuple(x.shape), x.stride()) + 1)
        _pad(
            grid, x, out, *rows, *sizes[1:], *_as_5d(out, dims)[0][2:], *_lows(pairs, dims), *strides,
            config=config, options=PADDING.options(), MODE=mode, CHANNELS_LAST=fmt != torch.contiguous_format,
            INT64=reach > _INT32,
        )
    return out


def _lows(pairs: list[tuple[int, int]], dims: int) -> list[int]:
    """The (D, H, W) pads before."""
    return [0] * (3 - dims) + [lo for lo, _ in pairs[-dims:]]


# --- constant_pad_nd.out -----------------------------------------------------------------


@aten_op("constant_pad_nd.out")
def constant_pad_nd_out(self: torch.Tensor, pad: list[int], value: Any = 0, *, out: torch.Tensor) -> Any:
    """The out= form of :func:`gems_core.ops.shape.constant_pad_nd` (which serves the
    functional form with flip and repeat's strided copy)."""
    if out.dtype != self.dtype or out.device != self.device:
        return NotImplemented  # ATen raises its own error
    assert_no_overlap(out, (self,))
    result = shape.constant_pad_nd(self, pad, value)
    return result if result is NotImplemented else write_out(out, result)


# --- reflection_pad, replication_pad -----------------------------------------------------


def _spatial_pads(self: torch.Tensor, padding: list[int], dims: int, mode: int) -> list[tuple[int, int]] | None:
    """(before, after) per dim for a pad of the last ``dims`` dims, or None where ATen
    raises: a rank other than dims + 1 or dims + 2, an empty spatial or channel dim, a
    reflect pad not smaller than its dim, an output size below 1."""
    if (self.dim() not in (dims + 1, dims + 2) or len(padding) != 2 * dims or self.dtype not in TL_DTYPES
            or self.dtype == torch.bool):  # ATen pads no bool tensor by reflection or replication
        return None
    pairs = [(0, 0)] * self.dim()
    for k in range(dims):
        pairs[self.dim() - 1 - k] = (padding[2 * k], padding[2 * k + 1])
    if any(n == 0 for n in self.shape[-dims - 1:]):
        return None
    for n, (lo, hi) in zip(self.shape[-dims:], pairs[-dims:]):
        if n + lo + hi < 1 or (mode == REFLECT and max(abs(lo), abs(hi)) >= n):
            return None
    return pairs


def _spatial_pad(self: torch.Tensor, padding: list[int], dims: int, mode: int, out: torch.Tensor | None) -> Any:
    pairs = _spatial_pads(self, padding, dims, mode)
    if pairs is None or (out is not None and (out.dtype != self.dtype or out.device != self.device)):
        return NotImplemented
    if out is not None:
        assert_no_overlap(out, (self,))
    result = _pad_into(self, pairs, dims, mode)
    return result if out is None else write_out(out, result)


def _as_5d(t: torch.Tensor, dims: int) -> tuple[list[int], list[int]]:
    """(N, C, D, H, W) sizes and strides of a tensor with ``dims`` spatial dims, with or
    without its batch dim."""
    sizes, strides = list(t.shape), list(t.stride())
    if t.dim() == dims + 1:
        sizes, strides = [1] + sizes, [0] + strides
    missing = 3 - dims
    return sizes[:2] + [1] * missing + sizes[2:], strides[:2] + [0] * missing + strides[2:]


def _spatial_pad_backward(
    grad_output: torch.Tensor, self: torch.Tensor, padding: list[int], dims: int, mode: int,
    grad_input: torch.Tensor | None,
) -> Any:
    pairs = _spatial_pads(self, padding, dims, mode)
    if (pairs is None or grad_output.dtype not in _FLOAT_DTYPES or grad_output.dtype != self.dtype
            or grad_output.device != self.device):
        return NotImplemented
    expected = [n + lo + hi for n, (lo, hi) in zip(self.shape, pairs)]
    if list(grad_output.shape) != expected:
        return NotImplemented  # ATen: "grad_output width unexpected"
    if grad_input is not None:
        if grad_input.dtype != self.dtype or grad_input.device != self.device:
            return NotImplemented
        assert_no_internal_overlap(grad_input)
        assert_no_overlap(grad_input, (grad_output,))
    fmt = suggest_memory_format(self)  # ATen's layout: the input's
    result = torch.empty(self.shape, dtype=self.dtype, device=self.device, memory_format=fmt)
    if result.numel():
        sizes, _ = _as_5d(result, dims)
        out_sizes, go_strides = _as_5d(grad_output, dims)
        widths = [1] * (3 - dims) + [max(lo, 0) + max(hi, 0) + 1 for lo, hi in pairs[-dims:]]
        grid, rows, config = tile_grid(result, fmt != torch.contiguous_format, PADDING_BACKWARD.choose("all"))
        reach = max(result.numel(), max_offset(tuple(grad_output.shape), grad_output.stride()) + 1)
        _pad_backward(
            grid, grad_output, result, *rows, *sizes[1:], *out_sizes[2:], *_lows(pairs, dims), *widths, *go_strides,
            config=config, options=PADDING_BACKWARD.options(), MODE=mode, CHANNELS_LAST=fmt != torch.contiguous_format,
            ACC=tl.float64 if self.dtype == torch.float64 else tl.float32, INT64=reach > _INT32,
        )
    return result if grad_input is None else write_out(grad_input, result)


def _register(name: str, dims: int, mode: int) -> None:
    """The functional, out=, backward and backward out= overloads of one spatial pad."""
    what = "mirroring the edges (the edge itself not repeated)" if mode == REFLECT else "repeating the edge elements"
    doc = f"Pads the last {dims} dim(s) of a {dims + 1}-d or {dims + 2}-d tensor by {what}."

    def forward(self: torch.Tensor, padding: list[int]) -> Any:
        return _spatial_pad(self, padding, dims, mode, None)

    def forward_out(self: torch.Tensor, padding: list[int], *, out: torch.Tensor) -> Any:
        return _spatial_pad(self, padding, dims, mode, out)

    def backward(grad_output: torch.Tensor, self: torch.Tensor, padding: list[int]) -> Any:
        return _spatial_pad_backward(grad_output, self, padding, dims, mode, None)

    def backward_out(grad_output: torch.Tensor, self: torch.Tensor, padding: list[int], *,
                     grad_input: torch.Tensor) -> Any:
        return _spatial_pad_backward(grad_output, self, padding, dims, mode, grad_input)

    forward.__doc__ = doc
    register_forms(name, forward, forward_out, backward, backward_out)

for _dims in (1, 2, 3):
    _register(f"reflection_pad{_dims}d", _dims, REFLECT)
    _register(f"replication_pad{_dims}d", _dims, REPLICATE)
