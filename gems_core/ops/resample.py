"""Upsampling (F.interpolate, nn.Upsample): nearest, nearest-exact and (bi/tri)linear in 1,
2 and 3 spatial dims and bicubic in 2, functional and out= forms, and their backward (with
grad_input=).

Source coordinates follow ATen's rules exactly. The scale (input step per output step) is
``1 / scale`` where the caller gave a positive scale, else ``in / out``; with
align_corners it is ``(in - 1) / (out - 1)`` (0 for one output). Nearest reads
``min(floor(o * scale), in - 1)`` (identity where out == in and ``o // 2`` where out ==
2 * in, as ATen's CPU kernels, the float64 reference, do), nearest-exact
``min(floor((o + 0.5) * scale), in - 1)``, both with a float32 scale for every dtype, as
ATen. Linear and cubic take ``src = scale * o`` with align_corners, else
``scale * (o + 0.5) - 0.5`` (linear: at least 0), ``i = min(floor(src), in - 1)`` and
``t = clamp(src - i, 0, 1)``, in float32 (float64 for float64). Linear reads ``i`` and
``i + (i < in - 1)`` with weights ``1 - t`` and ``t``; cubic reads ``i - 1 .. i + 2``
clamped to the input, weighted by Keys' cubic convolution (A = -0.75).

Forward: one kernel over tiles of the output seen as rows of channels (channels_last, as
ATen lays out the result of a channels_last input) or rows of W: the source map of a row's
dims is worked out once per row, and lanes read and write along the contiguous dim. The
input is read through its strides: any layout, nothing copied. The spatial dims an op
lacks are size 1.

Backward: a gather over grad_input, tiled the same way, deterministic (no atomics). Input
coordinate ``i`` sums the outputs that read it, weighted as the forward weighs them; along
each dim these lie in a window ``[lo(i), lo(i) + K)`` with ``lo(i) = max(floor(i * out /
in) - off, 0)``, where ``off`` and ``K`` are worked out on the host from the same source
map (once per size pair and scale). Sums are in float32 (float64 for float64).

Arguments ATen refuses (a rank other than the op's, empty spatial dims, sizes that do not
match) go to ATen, which raises its own error.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
import triton
import triton.language as tl
from torch._prims_common import suggest_memory_format

from ..codegen.layout import max_offset
from ..codegen.overlap import assert_no_internal_overlap, assert_no_overlap
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .factory import f64_bits
from .kernel_lib import ncdhw_tile
from .masked import write_out


def tile_tunable(name: str, block_m: int, what: str) -> Tunable:
    """A kernel over :func:`ncdhw_tile` tiles: BLOCK_M rows x BLOCK_N channels or columns."""
    return Tunable(name, params=("BLOCK_M", "BLOCK_N"),
                   defaults=[KernelConfig({"BLOCK_M": block_m, "BLOCK_N": 64}, num_warps=4)],
                   description=f"{what}: BLOCK_M rows x BLOCK_N channels (channels_last) or columns a program")


RESAMPLE = tile_tunable("resample", 16, "upsample nearest/linear/bicubic, output rows")
RESAMPLE_BACKWARD = tile_tunable("resample_backward", 8, "upsample backward, grad_input rows")

NEAREST, NEAREST_EXACT, LINEAR, CUBIC = range(4)
_CUBIC_A = tl.constexpr(-0.75)  # the cubic convolution's parameter, as ATen's
#: modes that weigh several taps by a fractional source coordinate (float64 for float64)
_WEIGHING = (LINEAR, CUBIC)
_INT32 = 2**31 - 1
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def _scale(bits, F64: tl.constexpr):
    """A scale passed as its float64 bits, in the precision the source map uses."""
    scale = tl.cast(bits, tl.int64).to(tl.float64, bitcast=True)
    if not F64:
        scale = scale.to(tl.float32)
    return scale


@triton.jit
def _source(o, size, scale, MODE: tl.constexpr, ALIGN: tl.constexpr):
    """(i, t): the (bi)linear or cubic source ``src`` of output coordinate ``o`` as
    ``min(floor(src), size - 1)`` and ``clamp(src - i, 0, 1)``; linear clamps src at 0."""
    of = o.to(scale.dtype)
    if ALIGN:
        src = scale * of
    else:
        src = scale * (of + 0.5) - 0.5
        if MODE == 2:
            src = tl.maximum(src, 0.0)
    i = tl.minimum(tl.floor(src).to(o.dtype), size - 1)
    return i, tl.minimum(tl.maximum(src - i.to(src.dtype), 0.0), 1.0)


@triton.jit
def _cubic_coefficient(t, K: tl.constexpr):
    """The weight of tap K (input i - 1 + K) at fraction t: Keys' cubic convolution."""
    if K == 0 or K == 3:
        x = t + 1 if K == 0 else 2 - t
        return ((_CUBIC_A * x - 5 * _CUBIC_A) * x + 8 * _CUBIC_A) * x - 4 * _CUBIC_A
    else:
        x = t if K == 1 else 1 - t
        return ((_CUBIC_A + 2) * x - (_CUBIC_A + 3)) * x * x + 1


@triton.jit
def _cubic_hw(row, oh, ow, H, W, sH, sW, scale_h, scale_w, mask, ALIGN: tl.constexpr):
    """Bicubic interpolation at output (oh, ow): 4 x 4 taps, indices clamped to the input."""
    h, th = _source(oh, H, scale_h, 3, ALIGN)
    w, tw = _source(ow, W, scale_w, 3, ALIGN)
    value = tl.zeros_like(mask).to(th.dtype)
    for k in tl.static_range(4):
        line = tl.zeros_like(mask).to(th.dtype)
        hk = tl.minimum(tl.maximum(h - 1 + k, 0), H - 1) * sH
        for j in tl.static_range(4):
            wj = tl.minimum(tl.maximum(w - 1 + j, 0), W - 1) * sW
            line += _cubic_coefficient(tw, j) * tl.load(row + hk + wj, mask=mask).to(th.dtype)
        value += _cubic_coefficient(th, k) * line
    return value


@triton.jit
def _taps(o, size, out_size, scale, MODE: tl.constexpr, ALIGN: tl.constexpr):
    """(i0, i1, l): output coordinate ``o`` reads input coordinates ``i0`` and ``i1`` with
    weights ``1 - l`` and ``l`` (nearest: i1 = i0, l = 0)."""
    if MODE >= 2:
        i0, lam = _source(o, size, scale, MODE, ALIGN)
        return i0, i0 + (i0 < size - 1).to(o.dtype), lam
    else:
        of = o.to(tl.float32)
        if MODE == 1:
            of = of + 0.5
        i0 = tl.minimum(tl.floor(of * scale).to(o.dtype), size - 1)
        if MODE == 0:
            i0 = tl.where(out_size == size, o, tl.where(out_size == 2 * size, o // 2, i0))
        return i0, i0, tl.zeros_like(of)


@triton.jit
def _lerp_hw(row, h0, h1, w0, w1, lh, lw, mask, SPATIAL: tl.constexpr):
    """Linear interpolation over W (and H where SPATIAL >= 2) at pointer offsets h*, w*."""
    top = (1 - lw) * tl.load(row + h0 + w0, mask=mask).to(lw.dtype) + lw * tl.load(row + h0 + w1, mask=mask).to(lw.dtype)
    if SPATIAL >= 2:
        bottom = ((1 - lw) * tl.load(row + h1 + w0, mask=mask).to(lw.dtype)
                  + lw * tl.load(row + h1 + w1, mask=mask).to(lw.dtype))
        top = (1 - lh) * top + lh * bottom
    return top


@triton.jit
def _resample_kernel(
    x_ptr,  # (N, C, D, H, W) through strides sN, sC, sD, sH, sW
    out_ptr,  # (N, C, OD, OH, OW), dense in NCDHW or (CHANNELS_LAST) NDHWC order
    M, INNER,  # the output as M rows of INNER (channels or OW) elements
    C, D, H, W,
    OD, OH, OW,
    sN, sC, sD, sH, sW,
    scale_d, scale_h, scale_w,  # input step per output step, as float64 bits
    MODE: tl.constexpr,  # NEAREST, NEAREST_EXACT, LINEAR, CUBIC (2-d)
    ALIGN: tl.constexpr,
    SPATIAL: tl.constexpr,  # interpolated dims (LINEAR): W, H and W, or D, H and W
    CHANNELS_LAST: tl.constexpr,
    F64: tl.constexpr,  # LINEAR, CUBIC in float64
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # out[n, c, od, oh, ow] = x[n, c, i(od), i(oh), i(ow)] (LINEAR: weighed over i0/i1 per dim)
    p, live, n, c, od, oh, ow = ncdhw_tile(M, INNER, C, OD, OH, OW, CHANNELS_LAST, INT64, BLOCK_M, BLOCK_N)
    row = x_ptr + n * sN + c * sC
    d0, d1, ld = _taps(od, D, OD, _scale(scale_d, F64), MODE, ALIGN)
    h0, h1, lh = _taps(oh, H, OH, _scale(scale_h, F64), MODE, ALIGN)
    w0, w1, lw = _taps(ow, W, OW, _scale(scale_w, F64), MODE, ALIGN)
    if MODE == 3:
        value = _cubic_hw(row, oh, ow, H, W, sH, sW, _scale(scale_h, F64), _scale(scale_w, F64), live, ALIGN)
    elif MODE == 2:
        value = _lerp_hw(row + d0 * sD, h0 * sH, h1 * sH, w0 * sW, w1 * sW, lh, lw, live, SPATIAL)
        if SPATIAL == 3:
            far = _lerp_hw(row + d1 * sD, h0 * sH, h1 * sH, w0 * sW, w1 * sW, lh, lw, live, SPATIAL)
            value = (1 - ld) * value + ld * far
    else:
        value = tl.load(row + d0 * sD + h0 * sH + w0 * sW, mask=live)
    tl.store(out_ptr + p, value.to(out_ptr.dtype.element_ty), mask=live)


@triton.jit
def _weight(o, i, size, out_size, scale, MODE: tl.constexpr, ALIGN: tl.constexpr):
    """The weight output coordinate ``o`` gives input coordinate ``i`` (0 past the output)."""
    if MODE == 3:
        src, t = _source(o, size, scale, MODE, ALIGN)
        weight = tl.zeros_like(t)
        for k in tl.static_range(4):
            tap = tl.minimum(tl.maximum(src - 1 + k, 0), size - 1)
            weight += tl.where(tap == i, _cubic_coefficient(t, k), 0.0)
    else:
        i0, i1, lam = _taps(o, size, out_size, scale, MODE, ALIGN)
        weight = tl.where(i0 == i, 1 - lam, 0.0) + tl.where(i1 == i, lam, 0.0)
    return tl.where(o < out_size, weight, 0.0)


@triton.jit
def _resample_backward_kernel(
    go_ptr,  # grad_output (N, C, OD, OH, OW) through strides gN, gC, gD, gH, gW
    gi_ptr,  # grad_input (N, C, D, H, W), dense in NCDHW or (CHANNELS_LAST) NDHWC order
    M, INNER,  # grad_input as M rows of INNER (channels or W) elements
    C, D, H, W,
    OD, OH, OW,
    gN, gC, gD, gH, gW,
    scale_d, scale_h, scale_w,  # as the forward's
    ratio_d, ratio_h, ratio_w,  # out / in (float32): the windows' positions
    off_d, off_h, off_w,  # lo(i) = max(floor(i * ratio) - off, 0)
    KD, KH, KW,  # the windows' lengths
    MODE: tl.constexpr,
    ALIGN: tl.constexpr,
    CHANNELS_LAST: tl.constexpr,
    F64: tl.constexpr,
    ACC: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # gi[n, c, d, h, w] = sum over (od, oh, ow) of go[n, c, od, oh, ow] * wd * wh * ww
    p, live, n, c, d, h, w = ncdhw_tile(M, INNER, C, D, H, W, CHANNELS_LAST, INT64, BLOCK_M, BLOCK_N)
    row = go_ptr + n * gN + c * gC
    sd, sh, sw = _scale(scale_d, F64), _scale(scale_h, F64), _scale(scale_w, F64)
    lo_d = tl.maximum(tl.floor(d.to(tl.float32) * ratio_d).to(d.dtype) - off_d, 0)
    lo_h = tl.maximum(tl.floor(h.to(tl.float32) * ratio_h).to(h.dtype) - off_h, 0)
    lo_w = tl.maximum(tl.floor(w.to(tl.float32) * ratio_w).to(w.dtype) - off_w, 0)
    acc = tl.zeros((BLOCK_M, BLOCK_N), ACC)
    for td in range(0, KD):
        od = lo_d + td
        wd = _weight(od, d, D, OD, sd, MODE, ALIGN)
        for th in range(0, KH):
            oh = lo_h + th
            wh = wd * _weight(oh, h, H, OH, sh, MODE, ALIGN)
            for tw in range(0, KW):
                ow = lo_w + tw
                weight = (wh * _weight(ow, w, W, OW, sw, MODE, ALIGN)).to(ACC)
                hit = live & (weight != 0)
                g = tl.load(row + od * gD + oh * gH + ow * gW, mask=hit, other=0)
                acc += g.to(ACC) * weight
    tl.store(gi_ptr + p, acc.to(gi_ptr.dtype.element_ty), mask=live)


_resample = LaunchCache(_resample_kernel, name="resample")
_resample_backward = LaunchCache(_resample_backward_kernel, name="resample_backward")


# --- the source map on the host ----------------------------------------------------------


def _step(size: int, out_size: int, align: bool, given: float | None, f64: bool) -> float:
    """ATen's scale (input step per output step) in float32, or float64 where ``f64``."""
    real = np.float64 if f64 else np.float32
    if align:
        return float(real(size - 1) / real(out_size - 1)) if out_size > 1 else 0.0
    if given is not None and given > 0:
        return float(real(1.0 / given))
    return float(real(size) / real(out_size))


def _host_taps(size: int, out_size: int, scale: float, mode: int, align: bool, f64: bool,
               fused: bool = False) -> list[Any]:
    """The input coordinates each output coordinate reads (one array per tap), in the
    kernel's arithmetic (``fused``: the source's multiply-add rounded once, as a device may
    fuse it)."""
    o = np.arange(out_size)
    if mode in _WEIGHING:
        real = np.float64 if f64 else np.float32
        of, s = o.astype(real), real(scale)
        if align:
            src = s * of
        elif fused:
            src = (np.float64(s) * (of + real(0.5)).astype(np.float64) - 0.5).astype(real)
        else:
            src = s * (of + real(0.5)) - real(0.5)
        i0 = np.minimum(np.floor(np.maximum(src, real(0)) if mode == LINEAR else src).astype(np.int64), size - 1)
        if mode == CUBIC:
            return [np.clip(i0 - 1 + k, 0, size - 1) for k in range(4)]
        return [i0, i0 + (i0 < size - 1)]
    of = o.astype(np.float32) + np.float32(0.5 if mode == NEAREST_EXACT else 0)
    i0 = np.minimum(np.floor(of * np.float32(scale)).astype(np.int64), size - 1)
    if mode == NEAREST and out_size == size:
        i0 = o
    elif mode == NEAREST and out_size == 2 * size:
        i0 = o // 2
    return [i0]


@functools.lru_cache(maxsize=512)
def _window(size: int, out_size: int, scale: float, mode: int, align: bool, f64: bool) -> tuple[float, int, int]:
    """(ratio, off, K) such that every output coordinate that reads input coordinate ``i``
    lies in ``[lo(i), lo(i) + K)``, ``lo(i) = max(floor(i * ratio) - off, 0)``, whether or
    not the device fuses the linear map's multiply-add (float64: one more on each side,
    which the host cannot round as a fused float64 multiply-add does)."""
    o = np.arange(out_size)
    first = np.full(size, out_size, dtype=np.int64)
    last = np.full(size, -1, dtype=np.int64)
    for fused in (False, True) if mode in _WEIGHING else (False,):
        for taps in _host_taps(size, out_size, scale, mode, align, f64, fused):
            np.minimum.at(first, taps, o)
            np.maximum.at(last, taps, o)
    margin = int(f64 and mode in _WEIGHING)
    ratio = np.float32(out_size) / np.float32(size)
    raw = np.floor(np.arange(size).astype(np.float32) * ratio).astype(np.int64)
    read = last >= 0
    off = max(int((raw - first)[read].max(initial=0)), 0) + margin
    lo = np.maximum(raw - off, 0)
    span = int((last - lo + 1)[read].max(initial=1)) + margin
    return float(ratio), off, span


# --- host wrappers -----------------------------------------------------------------------


def tile_grid(t: torch.Tensor, channels_last: bool,
              config: KernelConfig) -> tuple[tuple[int, int], tuple[int, int], KernelConfig]:
    """The grid, (M, INNER) and the config with the tile fitted for :func:`ncdhw_tile` over
    the dense tensor ``t`` (channels innermost where ``channels_last``): BLOCK_N no wider
    than a row, BLOCK_M up to 4 times taller to keep the tile's size (the per-row state of
    a bicubic tap set would not fit registers at more)."""
    inner = t.size(1) if channels_last else t.size(-1)
    rows = t.numel() // inner
    block_n = min(config.params["BLOCK_N"], next_power_of_2(inner))
    block_m = config.params["BLOCK_M"] * min(config.params["BLOCK_N"] // block_n, 4)
    fitted = KernelConfig({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=config.num_warps,
                          num_stages=config.num_stages, options=config.options)
    return (cdiv(rows, block_m), cdiv(inner, block_n)), (rows, inner), fitted


def _padded(values: list[int], dims: int, fill: int) -> list[int]:
    """(N, C, D, H, W) values of a tensor with ``dims`` spatial dims."""
    return values[:2] + [fill] * (3 - dims) + values[2:]


def _sizes_ok(input_size: list[int], output_size: list[int], dims: int) -> bool:
    """ATen's checks: ``dims`` output sizes and non-empty spatial sizes on both sides."""
    return (len(input_size) == dims + 2 and len(output_size) == dims
            and all(s > 0 for s in input_size[2:]) and all(s > 0 for s in output_size))


def _scales(input_size: list[int], output_size: list[int], scales: tuple[Any, ...], mode: int, align: bool,
            f64: bool) -> list[float]:
    """The (D, H, W) scales; a missing spatial dim maps 1 to 1."""
    dims = len(output_size)
    given = list(scales[:dims]) + [None] * (dims - len(scales[:dims]))
    steps = [_step(n, m, align, s, f64 and mode in _WEIGHING) for n, m, s in zip(input_size[2:], output_size, given)]
    return [1.0] * (3 - dims) + steps


def _forward(self: torch.Tensor, output_size: list[int], scales: tuple[Any, ...], mode: int, align: bool,
             out: torch.Tensor | None) -> Any:
    dims = len(output_size)
    dtypes = _FLOAT_DTYPES if mode in _WEIGHING else (*_FLOAT_DTYPES, torch.uint8)
    if self.dtype not in dtypes or self.dim() != dims + 2 or not _sizes_ok(list(self.shape), output_size, dims):
        return NotImplemented
    if out is not None:
        if out.dtype != self.dtype or out.device != self.device:
            return NotImplemented  # ATen raises its own error
        assert_no_internal_overlap(out)
        assert_no_overlap(out, (self,))
    fmt = suggest_memory_format(self)
    result = torch.empty([*self.shape[:2], *output_size], dtype=self.dtype, device=self.device, memory_format=fmt)
    if result.numel():
        f64 = self.dtype == torch.float64 and mode in _WEIGHING
        steps = _scales(list(self.shape), output_size, scales, mode, align, f64)
        grid, rows, config = tile_grid(result, fmt != torch.contiguous_format, RESAMPLE.choose(mode))
        reach = max(result.numel(), max_offset(tuple(self.shape), self.stride()) + 1)
        _resample(
            grid, self, result, *rows, *_padded(list(self.shape), dims, 1)[1:], *([1] * (3 - dims) + output_size),
            *_padded(list(self.stride()), dims, 0),
            *(f64_bits(s) for s in steps),
            config=config, options=RESAMPLE.options(), MODE=mode, ALIGN=align, SPATIAL=dims,
            CHANNELS_LAST=fmt != torch.contiguous_format, F64=f64, INT64=reach > _INT32,
        )
    return result if out is None else write_out(out, result)


def _backward(grad_output: torch.Tensor, output_size: list[int], input_size: list[int], scales: tuple[Any, ...],
              mode: int, align: bool, grad_input: torch.Tensor | None) -> Any:
    dims = len(output_size)
    if (grad_output.dtype not in _FLOAT_DTYPES or not _sizes_ok(list(input_size), output_size, dims)
            or list(grad_output.shape) != [*input_size[:2], *output_size]):
        return NotImplemented  # ATen raises its own error
    if grad_input is not None:
        if grad_input.dtype != grad_output.dtype or grad_input.device != grad_output.device:
            return NotImplemented
        assert_no_internal_overlap(grad_input)
        assert_no_overlap(grad_input, (grad_output,))
    # ATen's layout: grad_output's, but contiguous for bicubic and 3-d nearest
    keeps = mode == LINEAR or (dims == 2 and mode != CUBIC)
    fmt = suggest_memory_format(grad_output) if keeps else torch.contiguous_format
    result = torch.empty(list(input_size), dtype=grad_output.dtype, device=grad_output.device, memory_format=fmt)
    if result.numel():
        f64 = grad_output.dtype == torch.float64
        weighing_f64 = f64 and mode in _WEIGHING
        steps = _scales(list(input_size), output_size, scales, mode, align, weighing_f64)
        sizes = _padded(list(input_size), dims, 1)[2:]
        out_sizes = [1] * (3 - dims) + list(output_size)
        windows = [_window(n, m, s, mode, align, weighing_f64) for n, m, s in zip(sizes, out_sizes, steps)]
        grid, rows, config = tile_grid(result, fmt != torch.contiguous_format, RESAMPLE_BACKWARD.choose(mode))
        reach = max(result.numel(), max_offset(tuple(grad_output.shape), grad_output.stride()) + 1)
        _resample_backward(
            grid, grad_output, result, *rows, input_size[1], *sizes, *out_sizes,
            *_padded(list(grad_output.stride()), dims, 0), *(f64_bits(s) for s in steps),
            *(w[0] for w in windows), *(w[1] for w in windows), *(w[2] for w in windows),
            config=config, options=RESAMPLE_BACKWARD.options(), MODE=mode, ALIGN=align,
            CHANNELS_LAST=fmt != torch.contiguous_format, F64=weighing_f64,
            ACC=tl.float64 if f64 else tl.float32, INT64=reach > _INT32,
        )
    return result if grad_input is None else write_out(grad_input, result)


# --- registration ------------------------------------------------------------------------


def _register(name: str, dims: int, mode: int) -> None:
    """The functional, out=, backward and backward grad_input= overloads of one upsample
    (linear and cubic ones take align_corners before the scales)."""
    aligns = mode in _WEIGHING

    def split(args: tuple[Any, ...]) -> tuple[bool, tuple[Any, ...]]:
        return (bool(args[0]), args[1:]) if aligns else (False, args)

    def forward(self: torch.Tensor, output_size: list[int], *args: Any) -> Any:
        align, scales = split(args)
        return _forward(self, list(output_size), scales, mode, align, None)

    def forward_out(self: torch.Tensor, output_size: list[int], *args: Any, out: torch.Tensor) -> Any:
        align, scales = split(args)
        return _forward(self, list(output_size), scales, mode, align, out)

    def backward(grad_output: torch.Tensor, output_size: list[int], input_size: list[int], *args: Any) -> Any:
        align, scales = split(args)
        return _backward(grad_output, list(output_size), list(input_size), scales, mode, align, None)

    def backward_out(grad_output: torch.Tensor, output_size: list[int], input_size: list[int], *args: Any,
                     grad_input: torch.Tensor) -> Any:
        align, scales = split(args)
        return _backward(grad_output, list(output_size), list(input_size), scales, mode, align, grad_input)

    kind = ("nearest", "nearest-exact", "linear", "bicubic")[mode]
    forward.__doc__ = f"F.interpolate(mode={kind!r}) of a ({dims + 2})-d tensor to ``output_size``."
    register_forms(name, forward, forward_out, backward, backward_out)


def register_forms(name: str, forward: Any, forward_out: Any, backward: Any, backward_out: Any) -> None:
    """Register an op's functional, out=, backward and backward grad_input= overloads
    (functions made per op, named after their overload)."""
    for fn, suffix in ((forward, ""), (forward_out, ".out"), (backward, "_backward"),
                       (backward_out, "_backward.grad_input")):
        fn.__name__ = fn.__qualname__ = f"{name}{suffix.replace('.', '_')}"
        aten_op(f"{name}{suffix}")(fn)


for _dims, _linear in ((1, "upsample_linear1d"), (2, "upsample_bilinear2d"), (3, "upsample_trilinear3d")):
    _register(f"upsample_nearest{_dims}d", _dims, NEAREST)
    _register(f"_upsample_nearest_exact{_dims}d", _dims, NEAREST_EXACT)
    _register(_linear, _dims, LINEAR)
_register("upsample_bicubic2d", 2, CUBIC)
