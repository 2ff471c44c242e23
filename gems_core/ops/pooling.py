"""2-d pooling: max_pool2d_with_indices, avg_pool2d, _adaptive_avg_pool2d and
adaptive_max_pool2d, each with its backward; functional and out= forms. The 1-d poolings reach
these through ATen's composites (a unit dim added); adaptive_avg_pool2d to 1x1 is a mean
(``mean.dim``) before it reaches a backend.

Inputs are (N, C, H, W) or (C, H, W), read through their strides (no copy); results take the
input's suggested memory format, as ATen's do. One program computes a tile of BLOCK_P
positions x BLOCK_C channels: for a channels-last input the channels are the contiguous axis
and a tile reads them in coalesced rows; otherwise a tile is BLOCK_P positions of one plane.

Forward: each output walks its window (kernel x kernel steps of ``dilation`` from
``o * stride - padding``; adaptive: ``[floor(o * H / OH), ceil((o + 1) * H / OH))``) and
keeps the maximum (NaN wins, and a later NaN moves the index, as in ATen; ties keep the first)
with its flat index ``h * W + w`` in the plane, or the sum over ATen's divisor.
Backward gathers: each input element sums the gradients of the outputs whose windows hold
it (max: those whose index names it), so no atomics and a fixed order. An output 1x1
adaptive average is a mean over each plane: its own kernel reads the plane in contiguous runs.

Arguments ATen refuses (bad kernel, stride, padding or output sizes, a wrong rank), integer
dtypes and indices tensors of another shape go to ATen, which raises or serves them. The
backward of max pooling reads the indices its forward wrote: an index naming an element
outside its output's window (ATen adds the gradient there) is not looked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
import triton
import triton.language as tl

from .. import runtime
from ..codegen.layout import max_offset
from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .masked import write_out
from .reduction import acc_dtype, add_combine, bench_ms

POOL = Tunable(
    "pool",
    params=("BLOCK_M", "BLOCK_N"),
    defaults=[KernelConfig({"BLOCK_M": 16, "BLOCK_N": 64}, num_warps=4),
              KernelConfig({"BLOCK_M": 8, "BLOCK_N": 128}, num_warps=4),
              KernelConfig({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=8)],
    description="pooling forward and backward: BLOCK_M positions x BLOCK_N channels a program for "
    "channels-last inputs, BLOCK_M * BLOCK_N positions of one plane otherwise",
)

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_INT32 = 2**31 - 1


@triton.jit
def _window(o, size, out_size, stride, pad, dil, kernel, ADAPTIVE: tl.constexpr):
    """Output ``o``'s window along one dim: its first index inside the input, and the end
    (exclusive) of its span there."""
    if ADAPTIVE:
        start = (o * size) // out_size
        end = ((o + 1) * size + out_size - 1) // out_size
    else:
        start = o * stride - pad
        end = tl.minimum(start + (kernel - 1) * dil + 1, size)
        start = tl.where(start < 0, start + ((dil - 1 - start) // dil) * dil, start)
    return start, end


@triton.jit
def _outputs(i, size, out_size, stride, pad, dil, kernel, ADAPTIVE: tl.constexpr):
    """The outputs whose windows span input index ``i`` along one dim: first, end (exclusive)."""
    if ADAPTIVE:
        first = (i * out_size) // size
        end = ((i + 1) * out_size + size - 1) // size
    else:
        reach = i + pad - (kernel - 1) * dil
        first = tl.where(reach > 0, (reach + stride - 1) // stride, 0)
        end = tl.minimum((i + pad) // stride + 1, out_size)
    return first, end


@triton.jit
def _divisor(oh, ow, H, W, OH, OW, SH, SW, PH, PW, KH, KW, override, ADAPTIVE: tl.constexpr,
             COUNT_PAD: tl.constexpr):
    """An average's divisor: ``override`` unless 0, else the window's size counting the
    padding (COUNT_PAD) or only the input elements."""
    if COUNT_PAD:
        rh = oh * SH - PH
        rw = ow * SW - PW
        count = (tl.minimum(rh + KH, H + PH) - rh) * (tl.minimum(rw + KW, W + PW) - rw)
    else:
        h0, h1 = _window(oh, H, OH, SH, PH, 1, KH, ADAPTIVE)
        w0, w1 = _window(ow, W, OW, SW, PW, 1, KW, ADAPTIVE)
        count = (h1 - h0) * (w1 - w0)
    return tl.where(override != 0, override, count)


@triton.jit
def _program_tile(c_blocks, p_blocks, INT64: tl.constexpr, BLOCK_P: tl.constexpr,
                  BLOCK_C: tl.constexpr):
    """This program's image n, its BLOCK_P positions and its BLOCK_C channels; programs walk
    the channel blocks first, then the position blocks, then the images."""
    pid = tl.program_id(0)
    if INT64:
        pid = pid.to(tl.int64)
    rest = pid // c_blocks
    p = (rest % p_blocks) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = (pid % c_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    if INT64:
        p = p.to(tl.int64)
        c = c.to(tl.int64)
    return rest // p_blocks, p, c


@triton.jit
def _pool_kernel(
    x_ptr,  # (N, C, H, W) through strides sx*
    y_ptr,  # (N, C, OH, OW) through strides sy*
    idx_ptr,  # (N, C, OH, OW) int64 through strides sy*, when MAX: the argmax's h * W + w
    C, H, W, OH, OW,
    c_blocks, p_blocks,
    sxn, sxc, sxh, sxw,
    syn, syc, syh, syw,
    KH, KW, SH, SW, PH, PW, DH, DW,
    LH, LW,  # window steps walked along h and w
    override,  # an average's divisor_override, 0 for none
    MAX: tl.constexpr,
    ADAPTIVE: tl.constexpr,
    COUNT_PAD: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 data, else float32
    INT64: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # y[n, c, oh, ow] = max (or sum / divisor) of x[n, c, h, w] over the window of (oh, ow)
    n, p, c = _program_tile(c_blocks, p_blocks, INT64, BLOCK_P, BLOCK_C)
    oh = p // OW
    ow = p % OW
    live = p < OH * OW
    c_live = c < C
    h0, h1 = _window(oh, H, OH, SH, PH, DH, KH, ADAPTIVE)
    w0, w1 = _window(ow, W, OW, SW, PW, DW, KW, ADAPTIVE)
    x_base = x_ptr + n * sxn + c[None, :] * sxc
    best = tl.full((BLOCK_P, BLOCK_C), float("-inf"), ACC)
    where = tl.broadcast_to((h0 * W + w0)[:, None], (BLOCK_P, BLOCK_C))
    total = tl.zeros((BLOCK_P, BLOCK_C), ACC)
    for kh in range(LH):
        ih = h0 + kh * DH
        for kw in range(LW):
            iw = w0 + kw * DW
            mask = (live & (ih < h1) & (iw < w1))[:, None] & c_live[None, :]
            v = tl.load(x_base + (ih * sxh + iw * sxw)[:, None], mask=mask, other=0.0).to(ACC)
            if MAX:
                take = mask & ((v > best) | (v != v))
                best = tl.where(take, v, best)
                where = tl.where(take, (ih * W + iw)[:, None], where)
            else:
                total += v
    out_mask = live[:, None] & c_live[None, :]
    y_off = n * syn + c[None, :] * syc + (oh * syh + ow * syw)[:, None]
    if MAX:
        tl.store(y_ptr + y_off, best.to(y_ptr.dtype.element_ty), mask=out_mask)
        tl.store(idx_ptr + y_off, where.to(tl.int64), mask=out_mask)
    else:
        count = _divisor(oh, ow, H, W, OH, OW, SH, SW, PH, PW, KH, KW, override, ADAPTIVE,
                         COUNT_PAD)
        mean = total / count.to(ACC)[:, None]
        tl.store(y_ptr + y_off, mean.to(y_ptr.dtype.element_ty), mask=out_mask)


@triton.jit
def _pool_backward_kernel(
    grad_ptr,  # (N, C, OH, OW) through strides sg*
    idx_ptr,  # (N, C, OH, OW) int64 through strides si*, when MAX
    dx_ptr,  # (N, C, H, W) through strides sd*
    C, H, W, OH, OW,
    c_blocks, p_blocks,
    sgn, sgc, sgh, sgw,
    sin, sic, sih, siw,
    sdn, sdc, sdh, sdw,
    KH, KW, SH, SW, PH, PW, DH, DW,
    LH, LW,  # outputs visited along h and w
    override,
    MAX: tl.constexpr,
    ADAPTIVE: tl.constexpr,
    COUNT_PAD: tl.constexpr,
    ACC: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    # dx[n, c, h, w] = sum over outputs o whose window spans (h, w) of
    #   g[o] where idx[o] == h * W + w (MAX),  else g[o] / divisor(o)
    n, p, c = _program_tile(c_blocks, p_blocks, INT64, BLOCK_P, BLOCK_C)
    h = p // W
    w = p % W
    live = p < H * W
    c_live = c < C
    oh0, oh1 = _outputs(h, H, OH, SH, PH, DH, KH, ADAPTIVE)
    ow0, ow1 = _outputs(w, W, OW, SW, PW, DW, KW, ADAPTIVE)
    acc = tl.zeros((BLOCK_P, BLOCK_C), ACC)
    for i in range(LH):
        oh = oh0 + i
        for j in range(LW):
            ow = ow0 + j
            mask = (live & (oh < oh1) & (ow < ow1))[:, None] & c_live[None, :]
            g_off = n * sgn + c[None, :] * sgc + (oh * sgh + ow * sgw)[:, None]
            g = tl.load(grad_ptr + g_off, mask=mask, other=0.0).to(ACC)
            if MAX:
                i_off = n * sin + c[None, :] * sic + (oh * sih + ow * siw)[:, None]
                at = tl.load(idx_ptr + i_off, mask=mask, other=-1)
                acc += tl.where(at == (h * W + w)[:, None], g, 0.0)
            else:
                count = _divisor(oh, ow, H, W, OH, OW, SH, SW, PH, PW, KH, KW, override, ADAPTIVE,
                                 COUNT_PAD)
                acc += tl.where(mask, g / count.to(ACC)[:, None], 0.0)
    d_off = n * sdn + c[None, :] * sdc + (h * sdh + w * sdw)[:, None]
    tl.store(dx_ptr + d_off, acc.to(dx_ptr.dtype.element_ty), mask=live[:, None] & c_live[None, :])


@triton.jit
def _plane_mean_kernel(
    x_ptr,  # (N, C, HW) through strides: a plane's positions s_hw apart
    y_ptr,  # (N, C) through strides
    C, HW, c_blocks,
    sxn, sxc, s_hw,
    syn, syc,
    ACC: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    # y[n, c] = sum over q of x[n, c, q] / HW
    pid = tl.program_id(0)
    if INT64:
        pid = pid.to(tl.int64)
    n = pid // c_blocks
    c = (pid % c_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    q = tl.arange(0, BLOCK_P)
    if INT64:
        c = c.to(tl.int64)
        q = q.to(tl.int64)
    c_live = c < C
    base = x_ptr + n * sxn + c[:, None] * sxc
    acc = tl.zeros((BLOCK_C, BLOCK_P), ACC)
    for start in range(0, HW, BLOCK_P):
        mask = c_live[:, None] & (start + q < HW)[None, :]
        acc += tl.load(base + (start + q)[None, :] * s_hw, mask=mask, other=0.0).to(ACC)
    mean = tl.reduce(acc, 1, add_combine) / HW
    tl.store(y_ptr + n * syn + c * syc, mean.to(y_ptr.dtype.element_ty), mask=c_live)


_forward = LaunchCache(_pool_kernel, name="pool")
_backward = LaunchCache(_pool_backward_kernel, name="pool_backward")
_plane_mean = LaunchCache(_plane_mean_kernel, name="plane_mean")

MAX_POOL, AVG_POOL, ADAPTIVE_AVG, ADAPTIVE_MAX = range(4)


def _pair(values: Any, default: tuple[int, int] | None = None) -> tuple[int, int] | None:
    """An int[2] argument as (h, w); ``default`` for an empty list; None where ATen refuses it."""
    values = [values] if isinstance(values, int) else list(values)
    if not values and default is not None:
        return default
    if len(values) == 1:
        return values[0], values[0]
    return (values[0], values[1]) if len(values) == 2 else None


def _out_size(size: int, kernel: int, stride: int, pad: int, dil: int, ceil_mode: bool) -> int:
    """ATen's pooling output size: the last window must start inside the input or the left
    padding."""
    out = (size + 2 * pad - dil * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _served_input(x: torch.Tensor) -> bool:
    """(N, C, H, W) with C, H, W > 0 or (C, H, W) with all > 0, of a floating dtype."""
    return x.dtype in _FLOATS and x.dim() in (3, 4) and all(s > 0 for s in x.shape[-3:])


@dataclass(frozen=True)
class _Geometry:
    """One pooling's mode, window arguments and output size, each as (h, w)."""

    mode: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    out: tuple[int, int]

    @property
    def adaptive(self) -> bool:
        return self.mode in (ADAPTIVE_AVG, ADAPTIVE_MAX)

    @property
    def is_max(self) -> bool:
        return self.mode in (MAX_POOL, ADAPTIVE_MAX)

    def args(self) -> tuple[int, ...]:
        return (*self.kernel, *self.stride, *self.padding, *self.dilation)

    def steps(self, sizes: tuple[int, int], backward: bool) -> tuple[int, int]:
        """How far the kernels' loops walk along h and w: window positions (forward), or
        outputs whose windows may hold one input element (backward)."""
        if self.adaptive:
            return (_adaptive_span(sizes[0], self.out[0], backward),
                    _adaptive_span(sizes[1], self.out[1], backward))
        if not backward:
            return self.kernel
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        return (kh - 1) * dh // sh + 1, (kw - 1) * dw // sw + 1


def _windowed(mode: int, x: torch.Tensor, kernel_size: Any, stride: Any, padding: Any,
              dilation: Any, ceil_mode: bool) -> _Geometry | None:
    """The geometry of a max or average pooling; None where ATen refuses the arguments."""
    k = _pair(kernel_size)
    s = _pair(stride, k) if k is not None else None
    p, d = _pair(padding), _pair(dilation)
    if not _served_input(x) or k is None or s is None or p is None or d is None:
        return None
    if min(*k, *s, *d) <= 0 or min(p) < 0 or p[0] > k[0] // 2 or p[1] > k[1] // 2:
        return None
    out = tuple(_out_size(size, *args, ceil_mode)
                for size, *args in zip(x.shape[-2:], k, s, p, d))
    return _Geometry(mode, k, s, p, d, out) if min(out) >= 1 else None  # type: ignore[arg-type]


def _adaptive(mode: int, x: torch.Tensor, output_size: Any) -> _Geometry | None:
    out = _pair(output_size)
    if not _served_input(x) or out is None or len(list(output_size)) != 2 or min(out) <= 0:
        return None
    return _Geometry(mode, (1, 1), (1, 1), (0, 0), (1, 1), (int(out[0]), int(out[1])))


@lru_cache(maxsize=256)
def _adaptive_span(size: int, out: int, backward: bool) -> int:
    """The most input elements an adaptive window holds (forward), or the most windows an
    input element lies in (backward)."""
    if backward:
        return max(-(-(i + 1) * out // size) - i * out // size for i in range(size))
    return max(-(-(o + 1) * size // out) - o * size // out for o in range(out))


def _memory_format(x: torch.Tensor) -> torch.memory_format:
    """ATen's suggested memory format of ``x``: channels-last where its strides order the
    dims N, H, W, C (stride 0 on C excluded)."""
    if x.dim() != 4 or x.stride(1) == 0:
        return torch.contiguous_format
    least = 0
    for d in (1, 3, 2, 0):
        if x.size(d) == 0 or x.stride(d) < least or (d == 0 and least == x.stride(1)):
            return torch.contiguous_format
        least = x.stride(d) * x.size(d) if x.size(d) > 1 else x.stride(d)
    return torch.channels_last


def _as_4d(t: torch.Tensor) -> torch.Tensor:
    return t if t.dim() == 4 else t.unsqueeze(0)


def _channels_last(x: torch.Tensor) -> bool:
    return x.dim() == 4 and x.size(1) > 1 and x.stride(1) == 1


def _tile(config: KernelConfig, channels_last: bool, positions: int,
          channels: int) -> tuple[int, int]:
    """(BLOCK_P, BLOCK_C) of ``config`` for these sizes, each within the chip's largest block
    along one axis."""
    size = config.params["BLOCK_M"] * config.params["BLOCK_N"]
    axis = runtime.current().limits.max_block_elements or size
    block_c = min(config.params["BLOCK_N"], next_power_of_2(channels), axis) if channels_last else 1
    return min(size // block_c, next_power_of_2(positions), axis), block_c


def _int64(*tensors: torch.Tensor) -> bool:
    return any(max_offset(t.shape, t.stride()) + t.numel() > _INT32 for t in tensors)


def _warps(config: KernelConfig) -> KernelConfig:
    """``config``'s launch settings; its block sizes reach the kernel as BLOCK_P, BLOCK_C."""
    return KernelConfig({}, num_warps=config.num_warps, num_stages=config.num_stages)


def _launch(kernel: LaunchCache, tensors: tuple[torch.Tensor, ...], strides: tuple[int, ...],
            g: _Geometry, sizes: tuple[int, int], count_pad: bool, override: int) -> None:
    """``kernel`` over the positions of its last tensor (the one written: 4-d, N x C x
    positions) in tiles of the chosen config; ``sizes``: the input's (H, W)."""
    target = tensors[-1] if kernel is _backward else tensors[1]
    n, c = target.shape[:2]
    positions = target.size(2) * target.size(3)
    channels_last = _channels_last(target)
    steps = g.steps(sizes, kernel is _backward)

    def run(config: KernelConfig) -> None:
        block_p, block_c = _tile(config, channels_last, positions, c)
        c_blocks, p_blocks = cdiv(c, block_c), cdiv(positions, block_p)
        kernel((n * c_blocks * p_blocks,), *tensors, c, *sizes, *g.out, c_blocks, p_blocks,
               *strides, *g.args(), *steps, override, config=_warps(config),
               options=POOL.options(), MAX=g.is_max, ADAPTIVE=g.adaptive, COUNT_PAD=count_pad,
               ACC=TL_DTYPES[acc_dtype(target.dtype)], INT64=_int64(*tensors),
               BLOCK_P=block_p, BLOCK_C=block_c)

    key = (kernel.name, str(target.dtype), channels_last, c.bit_length(), positions.bit_length())
    run(POOL.choose(key, lambda config: bench_ms(lambda: run(config))))


def _forward_pool(x: torch.Tensor, g: _Geometry, count_pad: bool = True,
                  override: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(output, indices or None) of the pooling ``g`` of ``x``."""
    shape = (*x.shape[:-2], *g.out)
    fmt = _memory_format(x)
    y = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=fmt)
    idx = (torch.empty(shape, dtype=torch.int64, device=x.device, memory_format=fmt)
           if g.is_max else None)
    if y.numel() == 0:
        return y, idx
    x4, y4 = _as_4d(x), _as_4d(y)
    h, w = x.shape[-2:]
    planes = h == 1 or w == 1 or x4.stride(2) == w * x4.stride(3)  # H and W merge into one axis
    if g.mode == ADAPTIVE_AVG and g.out == (1, 1) and planes:
        _mean_of_planes(x4, y4)
        return y, idx
    i4 = _as_4d(idx) if idx is not None else y4  # the indices share the output's strides
    _launch(_forward, (x4, y4, i4), (*x4.stride(), *y4.stride()), g, (h, w), count_pad, override)
    return y, idx


def _mean_of_planes(x: torch.Tensor, y: torch.Tensor) -> None:
    """y[n, c] = mean of x[n, c] over its H * W positions (a 1x1 adaptive average)."""
    n, c, h, w = x.shape
    hw = h * w
    s_hw = x.stride(3) if w > 1 else x.stride(2)
    channels_last = _channels_last(x)

    def run(config: KernelConfig) -> None:
        block_p, block_c = _tile(config, channels_last, hw, c)
        if not channels_last:  # whole planes a program: fill the tile with more of them
            size = config.params["BLOCK_M"] * config.params["BLOCK_N"]
            axis = runtime.current().limits.max_block_elements or size
            block_c = min(size // block_p, next_power_of_2(c), axis)
        c_blocks = cdiv(c, block_c)
        _plane_mean((n * c_blocks,), x, y, c, hw, c_blocks, x.stride(0), x.stride(1), s_hw,
                    y.stride(0), y.stride(1), config=_warps(config), options=POOL.options(),
                    ACC=TL_DTYPES[acc_dtype(x.dtype)], INT64=_int64(x, y), BLOCK_C=block_c,
                    BLOCK_P=block_p)

    key = (_plane_mean.name, str(x.dtype), channels_last, c.bit_length(), hw.bit_length())
    run(POOL.choose(key, lambda config: bench_ms(lambda: run(config))))


def _backward_pool(grad: torch.Tensor, x: torch.Tensor, g: _Geometry,
                   indices: torch.Tensor | None = None, count_pad: bool = True,
                   override: int = 0) -> torch.Tensor | None:
    """The input gradient of the pooling ``g`` of ``x``; None where the gradient (or the
    indices) do not have the output's shape and dtype, which ATen refuses."""
    shape = (*x.shape[:-2], *g.out)
    if grad.shape != shape or grad.dtype != x.dtype:
        return None
    if indices is not None and (indices.shape != shape or indices.dtype != torch.int64):
        return None
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=_memory_format(x))
    if dx.numel() == 0:
        return dx
    g4, dx4 = _as_4d(grad), _as_4d(dx)
    i4 = _as_4d(indices) if indices is not None else g4
    _launch(_backward, (g4, i4, dx4), (*g4.stride(), *i4.stride(), *dx4.stride()), g,
            x.shape[-2:], count_pad, override)
    return dx


def _override(divisor_override: int | None) -> int | None:
    """divisor_override as the kernels take it (0: none); None where ATen refuses it."""
    if divisor_override is None:
        return 0
    return divisor_override if divisor_override != 0 else None


def _into(out: torch.Tensor, dtype: torch.dtype, compute: Callable[[], Any]) -> Any:
    """An out= form: ``compute()`` written to ``out`` (resized); ATen's where ``out`` is not
    of ``dtype`` (it raises) or ``compute`` hands the call on."""
    result = NotImplemented if out.dtype != dtype else compute()
    return result if result is NotImplemented else write_out(out, result)


def _into_pair(out: torch.Tensor, indices: torch.Tensor, dtype: torch.dtype,
               compute: Callable[[], Any]) -> Any:
    """:func:`_into` for (output, indices)."""
    if out.dtype != dtype or indices.dtype != torch.int64:
        return NotImplemented
    result = compute()
    if result is NotImplemented:
        return result
    return write_out(out, result[0]), write_out(indices, result[1])


@aten_op("max_pool2d_with_indices")
def max_pool2d_with_indices(self: torch.Tensor, kernel_size: Any, stride: Any = (),
                            padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> Any:
    """(output, indices): each window's maximum and its flat index ``h * W + w`` in the
    input plane."""
    g = _windowed(MAX_POOL, self, kernel_size, stride, padding, dilation, ceil_mode)
    return NotImplemented if g is None else _forward_pool(self, g)


@aten_op("max_pool2d_with_indices.out")
def max_pool2d_with_indices_out(self: torch.Tensor, kernel_size: Any, stride: Any = (),
                                padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False, *,
                                out: torch.Tensor, indices: torch.Tensor) -> Any:
    return _into_pair(out, indices, self.dtype, lambda: max_pool2d_with_indices(
        self, kernel_size, stride, padding, dilation, ceil_mode))


@aten_op("max_pool2d_with_indices_backward")
def max_pool2d_with_indices_backward(grad_output: torch.Tensor, self: torch.Tensor,
                                     kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                                     ceil_mode: bool, indices: torch.Tensor) -> Any:
    """The input gradient: each output's gradient added where its index points."""
    g = _windowed(MAX_POOL, self, kernel_size, stride, padding, dilation, ceil_mode)
    dx = None if g is None else _backward_pool(grad_output, self, g, indices)
    return NotImplemented if dx is None else dx


@aten_op("max_pool2d_with_indices_backward.grad_input")
def max_pool2d_with_indices_backward_out(grad_output: torch.Tensor, self: torch.Tensor,
                                         kernel_size: Any, stride: Any, padding: Any,
                                         dilation: Any, ceil_mode: bool, indices: torch.Tensor,
                                         *, grad_input: torch.Tensor) -> Any:
    return _into(grad_input, self.dtype, lambda: max_pool2d_with_indices_backward(
        grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices))


@aten_op("avg_pool2d")
def avg_pool2d(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Any:
    """Each window's sum over ``divisor_override``, else over the window's size with
    (``count_include_pad``) or without the padding."""
    g = _windowed(AVG_POOL, self, kernel_size, stride, padding, 1, ceil_mode)
    override = _override(divisor_override)
    if g is None or override is None:
        return NotImplemented
    return _forward_pool(self, g, count_include_pad, override)[0]


@aten_op("avg_pool2d.out")
def avg_pool2d_out(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                   ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None, *, out: torch.Tensor) -> Any:
    return _into(out, self.dtype, lambda: avg_pool2d(
        self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override))


@aten_op("avg_pool2d_backward")
def avg_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any,
                        stride: Any, padding: Any, ceil_mode: bool, count_include_pad: bool,
                        divisor_override: int | None) -> Any:
    g = _windowed(AVG_POOL, self, kernel_size, stride, padding, 1, ceil_mode)
    override = _override(divisor_override)
    if g is None or override is None:
        return NotImplemented
    dx = _backward_pool(grad_output, self, g, None, count_include_pad, override)
    return NotImplemented if dx is None else dx


@aten_op("avg_pool2d_backward.grad_input")
def avg_pool2d_backward_out(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any,
                            stride: Any, padding: Any, ceil_mode: bool, count_include_pad: bool,
                            divisor_override: int | None, *, grad_input: torch.Tensor) -> Any:
    return _into(grad_input, self.dtype, lambda: avg_pool2d_backward(
        grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
        divisor_override))


@aten_op("_adaptive_avg_pool2d")
def adaptive_avg_pool2d(self: torch.Tensor, output_size: Any) -> Any:
    """The mean of each window ``[floor(o * H / OH), ceil((o + 1) * H / OH))`` (and in W)."""
    g = _adaptive(ADAPTIVE_AVG, self, output_size)
    return NotImplemented if g is None else _forward_pool(self, g, False)[0]


@aten_op("_adaptive_avg_pool2d.out")
def adaptive_avg_pool2d_out(self: torch.Tensor, output_size: Any, *, out: torch.Tensor) -> Any:
    return _into(out, self.dtype, lambda: adaptive_avg_pool2d(self, output_size))


def _adaptive_of(mode: int, grad_output: torch.Tensor, self: torch.Tensor) -> _Geometry | None:
    """The geometry of the adaptive pooling whose output ``grad_output`` is the gradient of."""
    if grad_output.dim() != self.dim():
        return None
    return _adaptive(mode, self, grad_output.shape[-2:])


@aten_op("_adaptive_avg_pool2d_backward")
def adaptive_avg_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor) -> Any:
    g = _adaptive_of(ADAPTIVE_AVG, grad_output, self)
    dx = None if g is None else _backward_pool(grad_output, self, g, None, False)
    return NotImplemented if dx is None else dx


@aten_op("_adaptive_avg_pool2d_backward.out")
def adaptive_avg_pool2d_backward_out(grad_output: torch.Tensor, self: torch.Tensor, *,
                                     out: torch.Tensor) -> Any:
    return _into(out, self.dtype, lambda: adaptive_avg_pool2d_backward(grad_output, self))


@aten_op("adaptive_max_pool2d")
def adaptive_max_pool2d(self: torch.Tensor, output_size: Any) -> Any:
    """(output, indices): each adaptive window's maximum and its flat index in the plane."""
    g = _adaptive(ADAPTIVE_MAX, self, output_size)
    return NotImplemented if g is None else _forward_pool(self, g)


@aten_op("adaptive_max_pool2d.out")
def adaptive_max_pool2d_out(self: torch.Tensor, output_size: Any, *, out: torch.Tensor,
                            indices: torch.Tensor) -> Any:
    return _into_pair(out, indices, self.dtype, lambda: adaptive_max_pool2d(self, output_size))


@aten_op("adaptive_max_pool2d_backward")
def adaptive_max_pool2d_backward(grad_output: torch.Tensor, self: torch.Tensor,
                                 indices: torch.Tensor) -> Any:
    g = _adaptive_of(ADAPTIVE_MAX, grad_output, self)
    dx = None if g is None else _backward_pool(grad_output, self, g, indices)
    return NotImplemented if dx is None else dx


@aten_op("adaptive_max_pool2d_backward.grad_input")
def adaptive_max_pool2d_backward_out(grad_output: torch.Tensor, self: torch.Tensor,
                                     indices: torch.Tensor, *, grad_input: torch.Tensor) -> Any:
    return _into(grad_input, self.dtype, lambda: adaptive_max_pool2d_backward(
        grad_output, self, indices))
