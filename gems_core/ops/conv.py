"""Convolution: ``convolution`` (1-d, 2-d, 3-d; grouped, depthwise, transposed) and
``convolution_backward``, as implicit GEMMs on tensor cores.

``F.conv1d/2d/3d`` and ``F.conv_transpose*d`` reach ``aten::convolution`` on every device (a
CompositeExplicitAutograd op that picks cuDNN, MKLDNN or a slow kernel below it), and its
autograd formula calls ``aten::convolution_backward``: gems serves both at the backend key.
Every call is computed in 3-d form: a 1-d or 2-d tensor is viewed with unit depth (and
height), through its strides, so any layout (NCHW, channels-last, slices) is read in place.

With ``A`` the activations (N, KC * groups, *) and ``W`` the weight, the kernels compute two
maps of a group (K = KC x taps, M = N x output positions, N of the GEMM = NC):

- gather (convolution): ``y[o, n] = sum_{tap, c} A[o * stride - pad + tap * dil, c] W[n, c, tap]``
- scatter (its data gradient, and transposed convolution):
  ``y[o, n] = sum_{tap, c} A[(o + pad - tap * dil) / stride, c] W[c, n, tap]`` over the taps
  whose quotient is exact.

The data gradient of a convolution and the forward of a transposed one are the scatter map,
the data gradient of a transposed convolution the gather map. The scatter map is run as one
gather map per phase of the stride (the output positions equal modulo the stride), each over
the taps that reach its phase, with unit stride and negative padding and dilation: no
product is masked off (a stride-2 data gradient would otherwise waste 3 products in 4).

The gather kernel walks K tap by tap in BLOCK_K channel slices (row addresses once per tap,
channel-contiguous loads in channels-last), or, when a group has fewer than 16 channels (the
3-channel stem of an image network), as one flat index over (tap, channel). A weight tile is
read along its contiguous side; an NCHW weight of several taps, contiguous along neither, is
repacked channels-last first. A 1x1 map with unit stride over matrix views (channels-last
activations, or one image) is a plain matrix product and goes to mm's kernels (and the
backend's GEMM variant); so is a map over non-overlapping patches (stride equal to the
kernel, a vision transformer's patch embedding), after one copy of the patches into a
(positions, patch) matrix. These are convolution's "unit" and "patches" forms
(:func:`unit_form`, :func:`patches_form`), which a backend that leaves convolution to ATen
may keep on gems. On chips with tensor descriptors, a 2-d map of stride 1 or 2 over
channels-last 16-bit tensors (and so its data gradient) takes conv_tma.py's kernel, whose
operand boxes the TMA unit copies, and its weight gradient conv_tma.py's other one. One channel per group
(depthwise) takes a direct kernel: a tile of positions x channels, one multiply-add per tap.
The bias is added in the epilogue.

The weight gradient is a GEMM over M: ``dW[o, c, tap] = sum_m dY[m, o] A[pos(m, tap), c]``,
split over M (fp32 partials, summed in order) when its tiles alone do not fill the chip; the
bias gradient is a sum of the output gradient.

Sums run in fp32 (fp64 for fp64); fp32 products follow torch's matmul precision setting.
Results take ATen's memory format: channels-last when the input or the weight is. Anything
ATen must judge (mixed dtypes, bad sizes, strides or padding, sizes that do not fit) goes to
ATen, which raises its own errors.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from .. import runtime
from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from . import conv_tma
from .copying import _suggested_format, copy_into
from .gemm_common import (
    _FLOATS,
    _INT32_MAX,
    _bucket,
    _input_precision,
    _max_offset,
    fits_shared_memory,
)
from .gemm_decode import slice_partials, sum_slices
from .mm import _launch as _mm_launch
from .mm import _prepare_out, _shares_memory
from .reduction import acc_dtype


def _gemm_configs(*tiles: tuple[int, int, int, int, int], grouped: bool = True) -> list[KernelConfig]:
    return [KernelConfig({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, **({"GROUP_M": 8} if grouped else {})},
                         num_warps=w, num_stages=s) for m, n, k, w, s in tiles]


CONV = Tunable(
    "conv",
    params=("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"),
    # the first is used where nothing is benchmarked: 16-bit and fp32 tiles fit 64 KiB of shared
    # memory, as the last one's fp64 tiles do
    defaults=_gemm_configs((64, 64, 32, 4, 3), (128, 128, 32, 4, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4),
                           (128, 128, 64, 8, 3), (64, 64, 32, 4, 2)),
    description="convolution and its data gradient as implicit GEMMs: BLOCK_M output positions x "
    "BLOCK_N channels a program, K (taps x channels) in BLOCK_K steps; GROUP_M tile rows a group",
)
CONV_WEIGHT = Tunable(
    "conv_weight_grad",
    params=("BLOCK_M", "BLOCK_N", "BLOCK_K"),
    defaults=_gemm_configs((64, 64, 32, 4, 3), (128, 128, 32, 4, 3), (64, 128, 64, 4, 3), (128, 64, 64, 4, 3),
                           (64, 64, 32, 4, 2), grouped=False),
    description="the weight gradient of convolution: BLOCK_M output channels x BLOCK_N input channels "
    "(of one tap, or flat over taps) a program, the positions in BLOCK_K steps, split to fill the chip",
)
CONV_DEPTHWISE = Tunable(
    "conv_depthwise",
    params=("BLOCK_M", "BLOCK_N"),
    defaults=[KernelConfig({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4), KernelConfig(
        {"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4), KernelConfig({"BLOCK_M": 16, "BLOCK_N": 128}, num_warps=4),
        KernelConfig({"BLOCK_M": 128, "BLOCK_N": 16}, num_warps=4)],
    description="depthwise convolution (one channel a group): BLOCK_M output positions x BLOCK_N channels "
    "a program, one multiply-add per tap",
)

#: the weight gradient's split over M: the fewest BLOCK_K steps a slice, and the most slices
_MIN_STEPS_PER_SLICE = 4
_MAX_SLICES = 64


@triton.jit
def _inside(first, offset, size):
    # whether the position first + offset (a row's first tap, plus a tap's offset) is in [0, size)
    pos = first + offset
    return (pos >= 0) & (pos < size)


@triton.jit
def _block(index, BLOCK: tl.constexpr, INT64: tl.constexpr):
    # the offsets of block ``index``: index * BLOCK + [0, BLOCK), in int64 where they may pass int32
    if INT64:
        index = tl.cast(index, tl.int64)
    return index * BLOCK + tl.arange(0, BLOCK)


@triton.jit
def _split_rows(r, OH, OW, OD):
    # r = ((n * OD + d) * OH + h) * OW + w
    w = r % OW
    t = r // OW
    h = t % OH
    t = t // OH
    return t // OD, t % OD, h, w


@triton.jit
def _split_taps(tap, KH, KW):
    return tap // (KH * KW), (tap // KW) % KH, tap % KW


@triton.jit
def _dot(a, b, acc, ACC: tl.constexpr, INPUT_PRECISION: tl.constexpr, WIDEN: tl.constexpr):
    if WIDEN:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee", out_dtype=ACC)
    else:
        return tl.dot(a, b, acc, input_precision=INPUT_PRECISION, out_dtype=ACC)


@triton.jit
def _conv_gemm_kernel(
    a_ptr,  # (N, KC * groups, AD, AH, AW), strides sa_*
    w_ptr,  # weight: B[c, n] of tap t of group g at g * sw_g + n * sw_n + c * sw_k + taps' strides
    bias_ptr,  # (NC * groups,) when HAS_BIAS
    y_ptr,  # (N, NC * groups, OD, OH, OW), strides sy_*
    M,  # N * OD * OH * OW
    NC,
    KC,
    TAPS,
    AD, AH, AW, OD, OH, OW, KH, KW,
    step_d, step_h, step_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    sa_n, sa_c, sa_d, sa_h, sa_w,
    sw_g, sw_n, sw_k, sw_d, sw_h, sw_w,
    sy_n, sy_c, sy_d, sy_h, sy_w,
    HAS_BIAS: tl.constexpr,
    FLAT_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    ACC: tl.constexpr,
    INT64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,  # the operands to fp32 before the product
):
    # y[m, g * NC + n] = sum over (tap, c) of A[position(m, tap), g * KC + c] * B_tap[c, n] (+ bias)
    pid = tl.program_id(0)
    group = tl.program_id(1)
    tiles_n = tl.cdiv(NC, BLOCK_N)
    # GROUP_M tile rows swept column by column, so programs running together share tiles
    pid_m, pid_n = tl.swizzle2d(pid // tiles_n, pid % tiles_n, tl.cdiv(M, BLOCK_M), tiles_n, GROUP_M)
    rm = _block(pid_m, BLOCK_M, INT64)
    rn = _block(pid_n, BLOCK_N, INT64)
    rk = _block(0, BLOCK_K, INT64)
    if INT64:
        group = group.to(tl.int64)
    nb, od, oh, ow = _split_rows(rm, OH, OW, OD)
    # each row's first tap (tap t adds t * dil along each dim), and its address
    fd, fh, fw = od * step_d - pad_d, oh * step_h - pad_h, ow * step_w - pad_w
    row_ok = rm < M
    n_ok = rn < NC
    a_rows = a_ptr + nb * sa_n + group * KC * sa_c + fd * sa_d + fh * sa_h + fw * sa_w
    w_cols = w_ptr + group * sw_g + rn * sw_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    if FLAT_K:
        # k = tap * KC + c: bounds per (row, k)
        for k0 in range(0, KC * TAPS, BLOCK_K):
            k = k0 + rk
            k_ok = k < KC * TAPS
            c = k % KC
            kd, kh, kw = _split_taps(k // KC, KH, KW)
            td, th, tw = kd * dil_d, kh * dil_h, kw * dil_w
            a_mask = (row_ok[:, None] & k_ok[None, :] & _inside(fd[:, None], td[None, :], AD)
                      & _inside(fh[:, None], th[None, :], AH) & _inside(fw[:, None], tw[None, :], AW))
            a_cols = c * sa_c + td * sa_d + th * sa_h + tw * sa_w
            a = tl.load(a_rows[:, None] + a_cols[None, :], mask=a_mask, other=0.0)
            w_rows = c * sw_k + kd * sw_d + kh * sw_h + kw * sw_w
            b = tl.load(w_cols[None, :] + w_rows[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            acc = _dot(a, b, acc, ACC, INPUT_PRECISION, WIDEN)
    else:
        # one tap's channels in BLOCK_K slices: row bounds and a row offset once per tap
        c_steps = tl.cdiv(KC, BLOCK_K)
        for i in range(0, TAPS * c_steps):
            kd, kh, kw = _split_taps(i // c_steps, KH, KW)
            td, th, tw = kd * dil_d, kh * dil_h, kw * dil_w
            c = (i % c_steps) * BLOCK_K + rk
            c_ok = c < KC
            ok = row_ok & _inside(fd, td, AD) & _inside(fh, th, AH) & _inside(fw, tw, AW)
            rows = a_rows + (td * sa_d + th * sa_h + tw * sa_w)
            a = tl.load(rows[:, None] + c[None, :] * sa_c, mask=ok[:, None] & c_ok[None, :], other=0.0)
            w_tap = w_cols + kd * sw_d + kh * sw_h + kw * sw_w
            b = tl.load(w_tap[None, :] + c[:, None] * sw_k, mask=c_ok[:, None] & n_ok[None, :], other=0.0)
            acc = _dot(a, b, acc, ACC, INPUT_PRECISION, WIDEN)
    channel = group * NC + rn
    if HAS_BIAS:
        acc += tl.load(bias_ptr + channel, mask=n_ok, other=0.0).to(ACC)[None, :]
    y_rows = nb * sy_n + od * sy_d + oh * sy_h + ow * sy_w
    tl.store(y_ptr + y_rows[:, None] + channel[None, :] * sy_c, acc.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & n_ok[None, :])


@triton.jit
def _conv_weight_grad_kernel(
    g_ptr,  # (N, MC * groups, OD, OH, OW), strides sg_*: the gradient of the gather map's result
    x_ptr,  # (N, NC * groups, XD, XH, XW), strides sx_*: the gather map's input
    dw_ptr,  # (slices, MC * groups, NC, KD, KH, KW), strides sd_*
    M,  # N * OD * OH * OW
    MC,
    NC,
    TAPS,
    m_per_slice,
    XD, XH, XW, OD, OH, OW, KH, KW,
    step_d, step_h, step_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    sg_n, sg_c, sg_d, sg_h, sg_w,
    sx_n, sx_c, sx_d, sx_h, sx_w,
    sd_s, sd_o, sd_c, sd_d, sd_h, sd_w,
    FLAT_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ACC: tl.constexpr,
    INT64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    WIDEN: tl.constexpr,  # the operands to fp32 before the product
):
    # dW[g * MC + o, c, tap] = sum over m of dY[m, g * MC + o] * X[position(m, tap), g * NC + c]
    # program (tile, group [x tap unless FLAT_N], slice); FLAT_N: columns j = tap * NC + c
    pid = tl.program_id(0)
    if FLAT_N:
        group = tl.program_id(1)
        cols = NC * TAPS
    else:
        group = tl.program_id(1) // TAPS
        tap = tl.program_id(1) % TAPS
        cols = NC
    piece = tl.program_id(2)
    tiles_n = tl.cdiv(cols, BLOCK_N)
    ro = _block(pid // tiles_n, BLOCK_M, INT64)
    rj = _block(pid % tiles_n, BLOCK_N, INT64)
    rk = _block(0, BLOCK_K, INT64)
    if INT64:
        group = group.to(tl.int64)
        piece = piece.to(tl.int64)
    o_ok = ro < MC
    j_ok = rj < cols
    if FLAT_N:
        c = rj % NC
        kd, kh, kw = _split_taps(rj // NC, KH, KW)
    else:
        c = rj
        kd, kh, kw = _split_taps(tap, KH, KW)
    td, th, tw = kd * dil_d, kh * dil_h, kw * dil_w
    g_cols = g_ptr + (group * MC + ro) * sg_c
    x_cols = x_ptr + (group * NC + c) * sx_c + td * sx_d + th * sx_h + tw * sx_w
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    start = piece * m_per_slice
    for m0 in range(start, tl.minimum(start + m_per_slice, M), BLOCK_K):
        rm = m0 + rk
        m_ok = rm < M
        nb, od, oh, ow = _split_rows(rm, OH, OW, OD)
        g = tl.load(g_cols[:, None] + (nb * sg_n + od * sg_d + oh * sg_h + ow * sg_w)[None, :],
                    mask=o_ok[:, None] & m_ok[None, :], other=0.0)
        fd, fh, fw = od * step_d - pad_d, oh * step_h - pad_h, ow * step_w - pad_w
        x_rows = nb * sx_n + fd * sx_d + fh * sx_h + fw * sx_w
        if FLAT_N:
            x_mask = (m_ok[:, None] & j_ok[None, :] & _inside(fd[:, None], td[None, :], XD)
                      & _inside(fh[:, None], th[None, :], XH) & _inside(fw[:, None], tw[None, :], XW))
        else:
            x_mask = (m_ok & _inside(fd, td, XD) & _inside(fh, th, XH) & _inside(fw, tw, XW))[:, None] & j_ok[None, :]
        x = tl.load(x_cols[None, :] + x_rows[:, None], mask=x_mask, other=0.0)
        acc = _dot(g, x, acc, ACC, INPUT_PRECISION, WIDEN)
    dw_cols = c * sd_c + kd * sd_d + kh * sd_h + kw * sd_w
    dw_rows = piece * sd_s + (group * MC + ro) * sd_o
    tl.store(dw_ptr + dw_rows[:, None] + dw_cols[None, :], acc.to(dw_ptr.dtype.element_ty),
             mask=o_ok[:, None] & j_ok[None, :])


@triton.jit
def _conv_depthwise_kernel(
    a_ptr,  # (N, channels / NC, AD, AH, AW), strides sa_*
    w_ptr,  # weight of channel q = g * NC + n at g * sw_g + n * sw_n + taps' strides
    bias_ptr,  # (channels,) when HAS_BIAS
    y_ptr,  # (N, channels, OD, OH, OW), strides sy_*
    M,  # N * OD * OH * OW
    CHANNELS,
    NC,
    TAPS,
    AD, AH, AW, OD, OH, OW, KH, KW,
    step_d, step_h, step_w, pad_d, pad_h, pad_w, dil_d, dil_h, dil_w,
    sa_n, sa_c, sa_d, sa_h, sa_w,
    sw_g, sw_n, sw_d, sw_h, sw_w,
    sy_n, sy_c, sy_d, sy_h, sy_w,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,
    INT64: tl.constexpr,
):
    # y[m, q] = sum over taps of A[position(m, tap), q // NC] * w[q, tap] (+ bias[q])
    rm = _block(tl.program_id(0), BLOCK_M, INT64)
    rq = _block(tl.program_id(1), BLOCK_N, INT64)
    nb, od, oh, ow = _split_rows(rm, OH, OW, OD)
    fd, fh, fw = od * step_d - pad_d, oh * step_h - pad_h, ow * step_w - pad_w
    row_ok = rm < M
    q_ok = rq < CHANNELS
    a_rows = a_ptr + nb * sa_n + fd * sa_d + fh * sa_h + fw * sa_w
    a_cols = (rq // NC) * sa_c
    w_cols = w_ptr + (rq // NC) * sw_g + (rq % NC) * sw_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC)
    for t in range(0, TAPS):
        kd, kh, kw = _split_taps(t, KH, KW)
        td, th, tw = kd * dil_d, kh * dil_h, kw * dil_w
        ok = row_ok & _inside(fd, td, AD) & _inside(fh, th, AH) & _inside(fw, tw, AW)
        rows = a_rows + (td * sa_d + th * sa_h + tw * sa_w)
        a = tl.load(rows[:, None] + a_cols[None, :], mask=ok[:, None] & q_ok[None, :], other=0.0)
        w = tl.load(w_cols + kd * sw_d + kh * sw_h + kw * sw_w, mask=q_ok, other=0.0)
        acc += a.to(ACC) * w.to(ACC)[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rq, mask=q_ok, other=0.0).to(ACC)[None, :]
    y_rows = nb * sy_n + od * sy_d + oh * sy_h + ow * sy_w
    tl.store(y_ptr + y_rows[:, None] + rq[None, :] * sy_c, acc.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & q_ok[None, :])


_launch_gemm = LaunchCache(_conv_gemm_kernel, name="conv")
_launch_weight_grad = LaunchCache(_conv_weight_grad_kernel, name="conv_weight_grad")
_launch_depthwise = LaunchCache(_conv_depthwise_kernel, name="conv_depthwise")


@dataclass(frozen=True)
class _Geometry:
    """A convolution in 3-d form: spatial triples are (depth, height, width)."""

    stride: tuple[int, int, int]
    padding: tuple[int, int, int]
    dilation: tuple[int, int, int]
    kernel: tuple[int, int, int]
    groups: int

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1] * self.kernel[2]

    def args(self) -> tuple[int, ...]:
        return (*self.stride, *self.padding, *self.dilation)


def _as_3d(t: torch.Tensor) -> torch.Tensor:
    """A view of an (N, C, *spatial) tensor with 1 to 3 spatial dims as (N, C, D, H, W)."""
    while t.dim() < 5:
        t = t.unsqueeze(2)
    return t


def _triple(values: Sequence[int], spatial: int, fill: int) -> tuple[int, int, int] | None:
    """A per-dim argument (one value for every dim, or one a dim) in 3-d form; None if it does
    not fit ``spatial`` dims."""
    values = [int(v) for v in values]
    if len(values) == 1:
        values = values * spatial
    if len(values) != spatial:
        return None
    return tuple([fill] * (3 - spatial) + values)  # type: ignore[return-value]


def _geometry(input: Any, weight: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
              dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int,
              ) -> tuple[_Geometry, list[int]] | None:
    """The convolution in 3-d form and its output shape, or None for a call ATen must judge."""
    if not (isinstance(input, torch.Tensor) and isinstance(weight, torch.Tensor)):
        return None
    spatial = input.dim() - 2
    if input.dtype not in _FLOATS or weight.dtype != input.dtype or weight.device != input.device:
        return None
    if spatial not in (1, 2, 3) or weight.dim() != input.dim():
        return None
    if input.layout != torch.strided or weight.layout != torch.strided:
        return None
    triples = [_triple(v, spatial, f) for v, f in ((stride, 1), (padding, 0), (dilation, 1), (output_padding, 0))]
    if any(t is None for t in triples) or groups <= 0:
        return None
    steps, pads, dils, extra = triples
    if min(steps) <= 0 or min(dils) <= 0 or min(pads) < 0 or min(extra) < 0:
        return None
    c, out_c = input.shape[1], weight.shape[0]
    if transposed:
        # ATen's rule: the output padding must be smaller than the stride or the dilation
        if c != out_c or c % groups or any(e >= max(s, d) for e, s, d in zip(extra, steps, dils)):
            return None
        out_c = weight.shape[1] * groups
    elif weight.shape[1] * groups != c or out_c % groups:
        return None
    if weight.shape[1] == 0 or out_c == 0 or 0 in weight.shape[2:]:
        return None
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.dtype != input.dtype or bias.layout != torch.strided
                             or bias.device != input.device or tuple(bias.shape) != (out_c,)):
        return None
    kernel = tuple([1] * (3 - spatial) + list(weight.shape[2:]))
    sizes = [1] * (3 - spatial) + list(input.shape[2:])
    if transposed:
        out = [(i - 1) * s - 2 * p + d * (k - 1) + e + 1
               for i, s, p, d, k, e in zip(sizes, steps, pads, dils, kernel, extra)]
    else:
        out = [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, s, p, d, k in zip(sizes, steps, pads, dils, kernel)]
    if min(sizes) <= 0 or min(out) <= 0:
        return None
    geo = _Geometry(steps, pads, dils, kernel, groups)  # type: ignore[arg-type]
    return geo, [input.shape[0], out_c, *out[3 - spatial:]]


def _result_format(input: torch.Tensor, weight: torch.Tensor) -> torch.memory_format:
    """ATen's choice on a GPU: channels-last when the input or the weight suggests it."""
    for t in (input, weight):
        layout = _suggested_format(t)
        if layout != torch.contiguous_format:
            return layout
    return torch.contiguous_format


def _interpreted_bf16(dtype: torch.dtype) -> bool:
    """Triton's interpreter multiplies bf16 operands' storage bits in ``tl.dot``."""
    return dtype == torch.bfloat16 and runtime.current().interpreter


def _product_args(dtype: torch.dtype) -> dict[str, Any]:
    """The constexprs of a kernel's products; interpreted bf16 operands are widened to fp32
    first (exact, as every bf16 product is in fp32, so the result is the tensor cores')."""
    return {"ACC": TL_DTYPES[acc_dtype(dtype)], "INPUT_PRECISION": _input_precision(dtype),
            "WIDEN": _interpreted_bf16(dtype)}


def _needs_int64(*tensors: torch.Tensor) -> bool:
    return any(_max_offset(t) >= _INT32_MAX // 2 for t in tensors)


def _clip(block: int, size: int) -> int:
    """A tile side no wider than ``size`` needs (16 at least, for the tensor cores)."""
    return min(block, max(16, next_power_of_2(size)))


def _flat(channels: int, geo: _Geometry) -> bool:
    """Whether K walks (tap, channel) as one index: for groups of fewer channels than the
    narrowest tensor-core step, which a tap-by-tap walk would mostly pad."""
    return geo.taps > 1 and channels < 16


def _along_channels(w: torch.Tensor, geo: _Geometry) -> torch.Tensor:
    """The weight, repacked channels-last where a tile of it would be contiguous along neither
    side (an NCHW weight of several taps)."""
    if geo.taps > 1 and 1 not in (w.stride(0), w.stride(1)):
        return w.contiguous(memory_format=torch.channels_last_3d)
    return w


def _phase_taps(phase: int, step: int, pad: int, dil: int, size: int) -> tuple[slice, int, int] | None:
    """Along one dim, the taps k of the scatter map that reach outputs o = q * step + phase,
    those with (phase + pad - k * dil) divisible by step: k = k0 + j * step / g (g the gcd of
    step and dil), read from A at q + (phase + pad - k0 * dil) / step - j * dil / g. As a
    gather: (the taps' slice, its padding, its dilation); None where no tap reaches them."""
    period = step // math.gcd(step, dil)
    first = next((k for k in range(min(period, size)) if (phase + pad - k * dil) % step == 0), None)
    if first is None:
        return None
    return slice(first, None, period), -((phase + pad - first * dil) // step), -(dil // math.gcd(step, dil))


def _scatter(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor, geo: _Geometry,
             weight_kc_dim: int) -> None:
    """y = the scatter map of ``a`` by ``w``: per output phase (position modulo the stride),
    a gather map over the taps that reach it, so that no product is masked off."""
    w = _along_channels(w, geo)  # once, not per phase
    for phase in itertools.product(*(range(step) for step in geo.stride)):
        out = y[(slice(None), slice(None), *(slice(r, None, step) for r, step in zip(phase, geo.stride)))]
        dims = [_phase_taps(*args) for args in zip(phase, geo.stride, geo.padding, geo.dilation, geo.kernel)]
        if out.numel() == 0:
            continue
        if None in dims:
            out.zero_() if bias is None else out.copy_(bias.view(1, -1, 1, 1, 1).expand_as(out))
            continue
        taps, pads, dils = zip(*dims)  # type: ignore[arg-type]
        view = w[(slice(None), slice(None), *taps)]
        _gemm(a, view, bias, out, _Geometry((1, 1, 1), pads, dils, tuple(view.shape[2:]), geo.groups), weight_kc_dim)


def _gemm(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor, geo: _Geometry,
          weight_kc_dim: int) -> None:
    """y = the gather map of ``a`` by ``w``, all (N, C, D, H, W) views; the weight's dim
    ``weight_kc_dim`` (0 or 1) runs over the GEMM's K channels, the other over its N
    channels, each per group."""
    kc, nc = a.shape[1] // geo.groups, y.shape[1] // geo.groups
    m = y.shape[0] * y.shape[2] * y.shape[3] * y.shape[4]
    if m == 0:
        return
    if _as_matmul(a, w, bias, y, geo, weight_kc_dim) or _as_patches(a, w, bias, y, geo, weight_kc_dim):
        return
    if kc == 1:
        _depthwise(a, w, bias, y, geo, weight_kc_dim)
        return
    if conv_tma.applies(a, y, geo.stride, geo.padding, geo.kernel, geo.groups):
        conv_tma.launch(a, w, bias, y, geo.stride, geo.padding, geo.dilation, weight_kc_dim)
        return
    w = _along_channels(w, geo)
    sw_k, sw_n = w.stride(weight_kc_dim), w.stride(1 - weight_kc_dim)
    sw_g = (kc if weight_kc_dim == 0 else nc) * w.stride(0)
    constexprs = {"HAS_BIAS": bias is not None, "INT64": _needs_int64(a, w, y), **_product_args(a.dtype)}
    sizes = (m, nc, kc, geo.taps, *a.shape[2:], *y.shape[2:], geo.kernel[1], geo.kernel[2], *geo.args())
    strides = (*a.stride(), sw_g, sw_n, sw_k, *w.stride()[2:])

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        p = config.params
        flat = _flat(kc, geo)
        block_n, block_k = _clip(p["BLOCK_N"], nc), _clip(p["BLOCK_K"], kc * geo.taps if flat else kc)
        grid = (cdiv(m, p["BLOCK_M"]) * cdiv(nc, block_n), geo.groups)
        _launch_gemm(grid, a, w, y if bias is None else bias, target, *sizes, *strides, *target.stride(),
                     config=config, options=CONV.options(), FLAT_K=flat, BLOCK_M=p["BLOCK_M"], BLOCK_N=block_n,
                     BLOCK_K=block_k, GROUP_M=p["GROUP_M"], **constexprs)

    def bench(config: KernelConfig) -> float:
        scratch = torch.empty_like(y)
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    key = (str(a.dtype), _bucket(m), _bucket(nc), _bucket(kc), geo.taps)
    run(CONV.choose(key, bench, fits_shared_memory(a.dtype)), y)


def _rows(t: torch.Tensor) -> torch.Tensor | None:
    """An (N, C, D, H, W) view as the (N * D * H * W, C) matrix of its positions, where its
    strides allow one (channels-last, or a single image)."""
    try:
        return t.permute(0, 2, 3, 4, 1).view(-1, t.shape[1])
    except RuntimeError:
        return None


def _mm_serves(dtype: torch.dtype) -> bool:
    """Whether mm's kernels take a convolution's product: not where the backend leaves mm in
    this dtype to ATen, nor where the interpreter would multiply bf16 storage bits."""
    gate = runtime.current().policy.gate_for("mm")
    return not (gate is not None and str(dtype).removeprefix("torch.") in gate or _interpreted_bf16(dtype))


def _patch_map(geo: _Geometry) -> bool:
    """Taps that tile the input without overlap or gaps (the stride is the kernel: a vision
    transformer's patch embedding), ungrouped, unpadded, undilated."""
    return (geo.groups == 1 and geo.taps > 1 and geo.stride == geo.kernel and geo.padding == (0, 0, 0)
            and geo.dilation == (1, 1, 1))


def _product_form(input: Any, weight: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
                  dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int,
                  taps: bool) -> _Geometry | None:
    """The geometry of a call gems computes as one matrix product on mm's kernels (``taps``:
    over patches of several taps, else a 1x1), or None. Rejects the other calls before it
    computes anything: a backend that keeps a form tests every call of the op."""
    if transposed or groups != 1 or any(padding) or not isinstance(weight, torch.Tensor):
        return None
    if (weight.dim() > 2 and math.prod(weight.shape[2:]) > 1) != taps:
        return None
    found = _geometry(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    if found is None or not _mm_serves(input.dtype):
        return None
    return found[0]


def patches_form(input: Any, weight: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
                 dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int,
                 **out: Any) -> bool:
    """convolution's "patches" form (a backend's ``OpGate(..., keep=("patches",))``): a map
    over non-overlapping patches (:func:`_patch_map`, a vision transformer's patch
    embedding), which gems computes as a patch copy and one matrix product."""
    geo = _product_form(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, True)
    return geo is not None and _patch_map(geo)


def unit_form(input: Any, weight: Any, bias: Any, stride: Sequence[int], padding: Sequence[int],
              dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int,
              **out: Any) -> bool:
    """convolution's "unit" form: a 1x1 map with unit stride over a matrix view of the input
    (channels-last, or one image), which is one matrix product on mm's kernels."""
    geo = _product_form(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, False)
    return geo is not None and geo.stride == (1, 1, 1) and _rows(_as_3d(input)) is not None


def _as_matmul(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor, geo: _Geometry,
               weight_kc_dim: int) -> bool:
    """A 1x1 map with unit stride and no padding over matrix views of its operands is a
    matrix product: mm's kernels (and the backend's GEMM variant) serve it, where
    :func:`_mm_serves`. False where that does not apply."""
    if geo.groups != 1 or geo.taps != 1 or geo.stride != (1, 1, 1) or geo.padding != (0, 0, 0):
        return False
    if not _mm_serves(a.dtype):
        return False
    if a.shape[2:] != y.shape[2:]:
        return False
    rows_a, rows_y = _rows(a), _rows(y)
    if rows_a is None or rows_y is None:
        return False
    matrix = w.reshape(w.shape[0], w.shape[1])
    _mm_launch(rows_a, matrix.t() if weight_kc_dim == 1 else matrix, rows_y,
               None if bias is None else bias.expand(rows_y.shape), 1, 1)
    return True


def _as_patches(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor, geo: _Geometry,
                weight_kc_dim: int) -> bool:
    """A map over non-overlapping patches (:func:`_patch_map`) is the product of the
    (positions, patch) matrix of the input's patches with the weight's (out channels,
    patch) matrix: the patches are copied into that matrix (one pass over the input), mm's
    kernels multiply (the backend's GEMM variant, the bias in its epilogue), and a result
    ``y`` that is not itself a (positions, channels) view (NCHW) is written from a
    channels-last one. The patch's elements go in the weight's memory order, so the weight
    is read in place. False where that does not apply."""
    if weight_kc_dim != 1 or not _patch_map(geo) or not _mm_serves(a.dtype):
        return False
    n, c = a.shape[:2]
    out_c, positions = y.shape[1], y.shape[2:]
    # (N, OD, OH, OW, C, KD, KH, KW): each position's patch, read in place
    sn, sc, *spatial = a.stride()
    patches = a.as_strided((n, *positions, c, *geo.kernel),
                           (sn, *(s * k for s, k in zip(spatial, geo.kernel)), sc, *spatial), a.storage_offset())
    order = sorted(range(1, 5), key=lambda d: -w.stride(d))  # the weight's patch dims, outermost first
    weight = w.permute(0, *order)
    k = c * geo.taps
    try:
        matrix = weight.view(out_c, k)
    except RuntimeError:
        matrix = torch.empty((out_c, k), dtype=w.dtype, device=w.device)
        copy_into(matrix.view(weight.shape), weight)
    rows = torch.empty((n * math.prod(positions), k), dtype=a.dtype, device=a.device)
    copy_into(rows.view(n, *positions, *weight.shape[1:]), patches.permute(0, 1, 2, 3, *(3 + d for d in order)))
    target = _rows(y)
    result = torch.empty((rows.shape[0], out_c), dtype=y.dtype, device=y.device) if target is None else target
    _mm_launch(rows, matrix.t(), result, None if bias is None else bias.expand(result.shape), 1, 1)
    if target is None:
        copy_into(y.permute(0, 2, 3, 4, 1), result.view(n, *positions, out_c))
    return True


def _depthwise(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor, geo: _Geometry,
               weight_kc_dim: int) -> None:
    """The gather map with one K channel a group: a direct kernel."""
    nc = y.shape[1] // geo.groups
    m = y.shape[0] * y.shape[2] * y.shape[3] * y.shape[4]
    sw_n = w.stride(1 - weight_kc_dim)
    sw_g = (1 if weight_kc_dim == 0 else nc) * w.stride(0)
    constexprs = {"HAS_BIAS": bias is not None, "ACC": TL_DTYPES[acc_dtype(a.dtype)], "INT64": _needs_int64(a, w, y)}
    args = (m, y.shape[1], nc, geo.taps, *a.shape[2:], *y.shape[2:], geo.kernel[1], geo.kernel[2], *geo.args(),
            *a.stride(), sw_g, sw_n, *w.stride()[2:])

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        p = config.params
        grid = (cdiv(m, p["BLOCK_M"]), cdiv(y.shape[1], p["BLOCK_N"]))
        _launch_depthwise(grid, a, w, y if bias is None else bias, target, *args, *target.stride(), config=config,
                          options=CONV_DEPTHWISE.options(), **constexprs, **p)

    def bench(config: KernelConfig) -> float:
        scratch = torch.empty_like(y)
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    key = (str(a.dtype), _bucket(m), _bucket(y.shape[1]), geo.taps)
    run(CONV_DEPTHWISE.choose(key, bench), y)


def _weight_grad(grad: torch.Tensor, x: torch.Tensor, dw: torch.Tensor, geo: _Geometry) -> None:
    """dw (MC * groups, NC, KD, KH, KW), dense = the weight gradient of the gather map from
    ``x`` to ``grad``'s positions, all 3-d views."""
    mc, nc = dw.shape[0] // geo.groups, dw.shape[1]
    m = grad.shape[0] * grad.shape[2] * grad.shape[3] * grad.shape[4]
    if m == 0:
        dw.zero_()
        return
    if mc >= 16 and conv_tma.applies(x, grad, geo.stride, geo.padding, geo.kernel, geo.groups):
        conv_tma.launch_weight_grad(grad, x, dw, geo.stride, geo.padding, geo.dilation)
        return
    acc = acc_dtype(x.dtype)
    constexprs = _product_args(x.dtype)
    sizes = (m, mc, nc, geo.taps)
    shapes = (*x.shape[2:], *grad.shape[2:], geo.kernel[1], geo.kernel[2], *geo.args(), *grad.stride(), *x.stride())
    units = runtime.compute_units(x.device.type, x.device.index)

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        p = config.params
        flat = _flat(nc, geo)
        block_m, block_n = _clip(p["BLOCK_M"], mc), _clip(p["BLOCK_N"], nc * geo.taps if flat else nc)
        tiles = cdiv(mc, block_m) * cdiv(nc * geo.taps if flat else nc, block_n)
        columns = geo.groups if flat else geo.groups * geo.taps
        steps = cdiv(m, p["BLOCK_K"])
        slices = max(1, min(cdiv(units, tiles * columns), steps // _MIN_STEPS_PER_SLICE, _MAX_SLICES))
        per_slice = cdiv(steps, slices) * p["BLOCK_K"]
        slices = cdiv(m, per_slice)
        out = slice_partials(target, slices, acc)
        _launch_weight_grad((tiles, columns, slices), grad, x, out, *sizes, per_slice, *shapes, *out.stride(),
                            config=config, options=CONV_WEIGHT.options(), FLAT_N=flat, BLOCK_M=block_m,
                            BLOCK_N=block_n, BLOCK_K=p["BLOCK_K"], INT64=_needs_int64(grad, x, out), **constexprs)
        sum_slices(out, target, slices, CONV_WEIGHT.options())

    def bench(config: KernelConfig) -> float:
        scratch = torch.empty_like(dw)
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    key = (str(x.dtype), _bucket(m), _bucket(mc), _bucket(nc), geo.taps)
    run(CONV_WEIGHT.choose(key, bench, fits_shared_memory(x.dtype)), dw)


def _forward(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
             geo: _Geometry, transposed: bool) -> None:
    if transposed:  # the scatter map, the weight's dim 0 over the input channels
        _scatter(_as_3d(input), _as_3d(weight), bias, _as_3d(out), geo, weight_kc_dim=0)
    else:
        _gemm(_as_3d(input), _as_3d(weight), bias, _as_3d(out), geo, weight_kc_dim=1)


@aten_op("convolution", forms={"patches": patches_form, "unit": unit_form})
def convolution(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                padding: Sequence[int], dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                groups: int) -> Any:
    """(N, C, *) convolved with the weight (OC, C / groups, *kernel) or, ``transposed``, its
    transpose (weight (C, OC / groups, *kernel)); 1 to 3 spatial dims."""
    found = _geometry(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    if found is None:
        return NotImplemented
    geo, shape = found
    out = torch.empty(shape, dtype=input.dtype, device=input.device,
                      memory_format=_result_format(input, weight) if len(shape) > 3 else torch.contiguous_format)
    _forward(input, weight, bias, out, geo, transposed)
    return out


@aten_op("convolution.out", forms={"patches": patches_form, "unit": unit_form})
def convolution_out(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                    padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                    output_padding: Sequence[int], groups: int, *, out: torch.Tensor) -> Any:
    """:func:`convolution` written into ``out`` (resized, with ATen's warning, when its shape
    differs; its strides kept otherwise)."""
    found = _geometry(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    if found is None or not isinstance(out, torch.Tensor) or 0 in out.stride():
        return NotImplemented
    operands = (input, weight) if bias is None else (input, weight, bias)
    if _shares_memory(out, *operands) or not _prepare_out(out, tuple(found[1]), input):
        return NotImplemented
    _forward(input, weight, bias, out, found[0], transposed)
    return out


@aten_op("convolution_backward")
def convolution_backward(grad_output: torch.Tensor, input: torch.Tensor, weight: torch.Tensor,
                         bias_sizes: Sequence[int] | None, stride: Sequence[int], padding: Sequence[int],
                         dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int,
                         output_mask: Sequence[bool]) -> Any:
    """(grad_input, grad_weight, grad_bias) of :func:`convolution`, each None where
    ``output_mask`` says so."""
    found = _geometry(input, weight, None, stride, padding, dilation, transposed, output_padding, groups)
    if found is None or not isinstance(grad_output, torch.Tensor) or grad_output.dtype != input.dtype:
        return NotImplemented
    geo, shape = found
    if list(grad_output.shape) != shape or grad_output.device != input.device:
        return NotImplemented
    grad_input = grad_weight = grad_bias = None
    g3, x3, w3 = _as_3d(grad_output), _as_3d(input), _as_3d(weight)
    spatial = input.dim() > 3
    if output_mask[0]:
        grad_input = torch.empty(input.shape, dtype=input.dtype, device=input.device,
                                 memory_format=_result_format(input, weight) if spatial else torch.contiguous_format)
        # the data gradient of the gather map is the scatter map and the other way round
        if transposed:
            _gemm(g3, w3, None, _as_3d(grad_input), geo, weight_kc_dim=1)
        else:
            _scatter(g3, w3, None, _as_3d(grad_input), geo, weight_kc_dim=0)
    if output_mask[1]:
        grad_weight = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device,
                                  memory_format=_result_format(input, weight) if spatial else torch.contiguous_format)
        if transposed:  # the gather map runs from the output gradient to the input's positions
            _weight_grad(x3, g3, _as_3d(grad_weight), geo)
        else:
            _weight_grad(g3, x3, _as_3d(grad_weight), geo)
    if output_mask[2]:
        grad_bias = grad_output.sum([0, *range(2, grad_output.dim())])
    return grad_input, grad_weight, grad_bias
