"""Convolution over tensor descriptors (TMA): 2-d convolutions of stride 1 or 2 over
channels-last 16-bit operands, their data and weight gradients, on chips whose limits declare
tensor descriptors (NVIDIA Hopper and later); conv.py takes these kernels where
:func:`applies`.

An implicit GEMM whose rows are a tile of output positions of one image, ``TILE_H`` rows by
``TILE_W`` columns, and whose K runs over the taps and, in ``BLOCK_K`` slices, the input
channels. With unit stride the input rows a tap needs for that tile are again a
``TILE_H x TILE_W`` box of the input, shifted by the tap: one bulk copy by the TMA unit from a
4-d descriptor of the input (N, H, W, C), at coordinates that may lie outside the image (the
padding), which the copy fills with zeros. So the kernel has no address arithmetic or masks
in its main loop, and the compiler pipelines the copies as it does a GEMM's. With a stride of
2 the input is read through one descriptor per phase (its even or odd rows and columns, a
strided view read in place): the taps of a phase are a box of that view, shifted by the
tap's offset halved; the kernel runs one loop per phase, one after the other (they share
their shared memory). The weight, (C_out, R, S, C) in channels-last, is read as
``(BLOCK_N, 1, 1, BLOCK_K)`` boxes; the result is written through a descriptor of the output
(N, P, Q, C_out), clipped at the image's edges. A box is reshaped to the (TILE_H * TILE_W,
BLOCK_K) operand of the product.

The data gradient of such a map is conv.py's scatter map, which runs as unit-stride gather
maps, one per phase of the output (negative padding and dilation, the weight's channel dims
swapped, which is repacked): this kernel again. The weight gradient is a second kernel over
the same boxes: a program sums, for one tap and a tile of (out, in) channels, the products of
the output gradient's box of positions with the input's box at the tap's offset, over a
slice of the boxes (slices fill the chip; their fp32 partials are summed in order); with a
stride of 2, one launch per phase, over that phase's taps.

Scope: ungrouped 2-d maps (3-d form with unit depth), strides of 1 or 2, any padding and
dilation, float16 and bfloat16, channels a multiple of 8 and at least 16 (a descriptor's
strides are multiples of 16 bytes; a product step is 16 wide), input, weight and output with
unit channel stride (channels-last; another weight is repacked). Sums in fp32, the bias added
in the epilogue. Other strides, groups, 1-d and 3-d keep conv.py's kernels. The launches go
through Triton's own launcher (descriptors are new objects per call, see
:func:`gemm_tma.run_described`). The tunables are "conv_tma" and "conv_tma_weight_grad";
``GEMS_CONV_TMA=0`` turns both kernels off.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from .. import configs, runtime, settings
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..tuning import Tunable
from . import gemm_tma
from .gemm_common import _bucket


def _configs(*tiles: tuple[int, int, int, int, int, int]) -> list[KernelConfig]:
    return [configs.conv_tma(h, w, n, k, num_warps=warps, num_stages=stages) for h, w, n, k, warps, stages in tiles]


CONV_TMA = Tunable(
    "conv_tma",
    params=("TILE_H", "TILE_W", "BLOCK_N", "BLOCK_K"),
    # the first is used where nothing is benchmarked; shared memory (16-bit): stages x the
    # input and weight boxes, plus the staged output box
    defaults=_configs((8, 16, 128, 64, 8, 3),  # 128 KB
                      (8, 8, 64, 64, 4, 4),  # 72 KB
                      (8, 16, 64, 64, 4, 4),  # 112 KB
                      (16, 8, 128, 64, 8, 3),  # 128 KB
                      (8, 16, 256, 64, 8, 3),  # 208 KB
                      (16, 16, 128, 64, 8, 3)),  # 208 KB
    description="2-d convolution of unit stride over tensor descriptors: TILE_H x TILE_W output "
    "positions of one image x BLOCK_N channels a program, K (taps x channels) in BLOCK_K slices",
)
CONV_TMA_WEIGHT = Tunable(
    "conv_tma_weight_grad",
    params=("TILE_H", "TILE_W", "BLOCK_M", "BLOCK_N"),
    defaults=[configs.conv_tma_weight_grad(h, w, m, n, num_warps=warps, num_stages=stages)
              for h, w, m, n, warps, stages in ((8, 16, 128, 64, 8, 3),  # 72 KB
                                                (8, 8, 64, 64, 4, 4),  # 64 KB
                                                (8, 16, 64, 64, 4, 4),  # 128 KB
                                                (8, 16, 128, 128, 8, 3),  # 192 KB
                                                (16, 8, 64, 128, 8, 3))],  # 144 KB
    description="the weight gradient of a 2-d convolution of unit stride over tensor descriptors: "
    "BLOCK_M output x BLOCK_N input channels of one tap a program, the positions in TILE_H x TILE_W "
    "boxes, split over the boxes to fill the chip",
)
DTYPES = (torch.float16, torch.bfloat16)
#: the weight gradient's split over position boxes: the fewest boxes a slice, the most slices
_MIN_BOXES_PER_SLICE = 4
_MAX_SLICES = 64


@triton.jit
def _phase_taps(acc, x_desc, w_desc, n, p0, q0, o0, C, r_first, r_count, r_step, s_first, s_count, s_step,
                pad_h, pad_w, dil_h, dil_w, PH: tl.constexpr, PW: tl.constexpr, STRIDE_H: tl.constexpr,
                STRIDE_W: tl.constexpr, TILE_H: tl.constexpr, TILE_W: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr):
    # acc + the products of the taps whose input rows and columns are of phase (PH, PW) modulo
    # the stride, read from that phase's descriptor: tap (r, s) at an offset of
    # (r * dil_h - pad_h - PH) / STRIDE_H rows (exact) from the output's positions
    c_steps = tl.cdiv(C, BLOCK_K)
    for i in range(0, r_count * s_count * c_steps):
        tap = i // c_steps
        c0 = (i - tap * c_steps) * BLOCK_K
        jr = tap // s_count
        r = r_first + jr * r_step
        s = s_first + (tap - jr * s_count) * s_step
        a = x_desc.load([n, p0 + (r * dil_h - pad_h - PH) // STRIDE_H, q0 + (s * dil_w - pad_w - PW) // STRIDE_W, c0])
        b = w_desc.load([o0, r, s, c0])
        acc = tl.dot(tl.reshape(a, (TILE_H * TILE_W, BLOCK_K)), tl.trans(tl.reshape(b, (BLOCK_N, BLOCK_K))), acc)
    return acc


@triton.jit
def _conv_tma_kernel(
    x00,  # the input (N, H, W, C) in (1, TILE_H, TILE_W, BLOCK_K) boxes; with a stride of 2, its
    x01,  # rows and columns of phase (0, 0), and of phases (0, 1), (1, 0), (1, 1) (x00 where
    x10,  # the stride is 1 along the dim)
    x11,
    w_desc,  # weight (C_out, R, S, C) in (BLOCK_N, 1, 1, BLOCK_K) boxes
    y_desc,  # output (N, P, Q, C_out) in (1, TILE_H, TILE_W, BLOCK_N) boxes
    bias_ptr,  # (C_out,) when HAS_BIAS
    P,
    Q,
    C,
    C_OUT,
    r_first0,  # the taps of each phase along the height: r_first + j * r_step, j < r_count
    r_count0,
    r_first1,
    r_count1,
    r_step,
    s_first0,  # and along the width
    s_count0,
    s_first1,
    s_count1,
    s_step,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    HAS_BIAS: tl.constexpr,
    STRIDE_H: tl.constexpr,
    STRIDE_W: tl.constexpr,
    TILE_H: tl.constexpr,
    TILE_W: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # y[n, p, q, o] = sum over (r, s, c) of x[n, p * STRIDE_H + r * dil_h - pad_h, q * STRIDE_W + s * dil_w - pad_w, c]
    #                 * w[o, r, s, c] (+ bias[o])
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(C_OUT, BLOCK_N)
    tiles_q = tl.cdiv(Q, TILE_W)
    tiles_p = tl.cdiv(P, TILE_H)
    # the channel tiles of one box of positions run side by side: they read the same input
    pid_n = pid % tiles_n
    rest = pid // tiles_n
    q0 = (rest % tiles_q) * TILE_W
    rest = rest // tiles_q
    p0 = (rest % tiles_p) * TILE_H
    n = rest // tiles_p
    o0 = pid_n * BLOCK_N
    acc = tl.zeros((TILE_H * TILE_W, BLOCK_N), dtype=tl.float32)
    acc = _phase_taps(acc, x00, w_desc, n, p0, q0, o0, C, r_first0, r_count0, r_step, s_first0, s_count0, s_step,
                      pad_h, pad_w, dil_h, dil_w, 0, 0, STRIDE_H, STRIDE_W, TILE_H, TILE_W, BLOCK_N, BLOCK_K)
    if STRIDE_W == 2:
        acc = _phase_taps(acc, x01, w_desc, n, p0, q0, o0, C, r_first0, r_count0, r_step, s_first1, s_count1,
                          s_step, pad_h, pad_w, dil_h, dil_w, 0, 1, STRIDE_H, STRIDE_W, TILE_H, TILE_W, BLOCK_N,
                          BLOCK_K)
    if STRIDE_H == 2:
        acc = _phase_taps(acc, x10, w_desc, n, p0, q0, o0, C, r_first1, r_count1, r_step, s_first0, s_count0,
                          s_step, pad_h, pad_w, dil_h, dil_w, 1, 0, STRIDE_H, STRIDE_W, TILE_H, TILE_W, BLOCK_N,
                          BLOCK_K)
        if STRIDE_W == 2:
            acc = _phase_taps(acc, x11, w_desc, n, p0, q0, o0, C, r_first1, r_count1, r_step, s_first1, s_count1,
                              s_step, pad_h, pad_w, dil_h, dil_w, 1, 1, STRIDE_H, STRIDE_W, TILE_H, TILE_W,
                              BLOCK_N, BLOCK_K)
    if HAS_BIAS:
        rn = o0 + tl.arange(0, BLOCK_N)
        acc += tl.load(bias_ptr + rn, mask=rn < C_OUT, other=0.0).to(tl.float32)[None, :]
    y_desc.store([n, p0, q0, o0], tl.reshape(acc.to(y_desc.dtype), (1, TILE_H, TILE_W, BLOCK_N)))


@triton.jit
def _conv_tma_weight_grad_kernel(
    g_desc,  # the output's gradient (N, P, Q, C_out) in (1, TILE_H, TILE_W, BLOCK_M) boxes
    x_desc,  # the input (N, H, W, C), or with a stride of 2 its rows and columns of phase
    #          (phase_h, phase_w), in (1, TILE_H, TILE_W, BLOCK_N) boxes
    dw_ptr,  # (slices, C_out, C, R, S) through strides sd_*: a slice's sum of its boxes
    P,
    Q,
    C,
    C_OUT,
    r_first,  # the phase's taps: (r_first + i * r_step, s_first + j * s_step), j < s_count
    r_step,
    s_first,
    s_count,
    s_step,
    phase_h,
    phase_w,
    pad_h,
    pad_w,
    dil_h,
    dil_w,
    boxes,  # N * cdiv(P, TILE_H) * cdiv(Q, TILE_W)
    boxes_per_slice,
    sd_slice,
    sd_o,
    sd_c,
    sd_r,
    sd_s,
    STRIDE_H: tl.constexpr,
    STRIDE_W: tl.constexpr,
    TILE_H: tl.constexpr,
    TILE_W: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    INT64: tl.constexpr,
):
    # dw[o, c, r, s] = sum over (n, p, q) of dy[n, p, q, o] * x[n, p * STRIDE_H + r * dil_h - pad_h,
    # q * STRIDE_W + s * dil_w - pad_w, c]; program (channel tile, tap of the phase, slice of
    # the position boxes). Positions past the output's edge read zeros from dy's descriptor,
    # so whatever x holds there adds nothing.
    tile = tl.program_id(0)
    tap = tl.program_id(1)
    piece = tl.program_id(2)
    tiles_c = tl.cdiv(C, BLOCK_N)
    o0 = (tile // tiles_c) * BLOCK_M
    c0 = (tile % tiles_c) * BLOCK_N
    i = tap // s_count
    r = r_first + i * r_step
    s = s_first + (tap - i * s_count) * s_step
    # the tap's offset in the phase's rows and columns (an exact quotient)
    shift_h = (r * dil_h - pad_h - phase_h) // STRIDE_H
    shift_w = (s * dil_w - pad_w - phase_w) // STRIDE_W
    tiles_q = tl.cdiv(Q, TILE_W)
    tiles_p = tl.cdiv(P, TILE_H)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    start = piece * boxes_per_slice
    for box in range(start, tl.minimum(start + boxes_per_slice, boxes)):
        q0 = (box % tiles_q) * TILE_W
        rest = box // tiles_q
        p0 = (rest % tiles_p) * TILE_H
        n = rest // tiles_p
        g = tl.reshape(g_desc.load([n, p0, q0, o0]), (TILE_H * TILE_W, BLOCK_M))
        x = tl.reshape(x_desc.load([n, p0 + shift_h, q0 + shift_w, c0]), (TILE_H * TILE_W, BLOCK_N))
        acc = tl.dot(tl.trans(g), x, acc)
    ro = o0 + tl.arange(0, BLOCK_M)
    rc = c0 + tl.arange(0, BLOCK_N)
    if INT64:
        piece = piece.to(tl.int64)
        ro = ro.to(tl.int64)
    offsets = piece * sd_slice + r * sd_r + s * sd_s + ro[:, None] * sd_o + rc[None, :] * sd_c
    tl.store(dw_ptr + offsets, acc.to(dw_ptr.dtype.element_ty), mask=(ro[:, None] < C_OUT) & (rc[None, :] < C))


#: the interpreter's launch paths (any argument types); compiled launches bypass them
_launch_interpreted = LaunchCache(_conv_tma_kernel, name="conv_tma")
_launch_weight_grad_interpreted = LaunchCache(_conv_tma_weight_grad_kernel, name="conv_tma_weight_grad")


def _channels_last(t: torch.Tensor) -> torch.Tensor | None:
    """(N, C, H, W) ``t`` as the (N, H, W, C) view a descriptor can describe (unit channel
    stride, the others multiples of 16 bytes, a 16-byte aligned base), or None."""
    view = t.permute(0, 2, 3, 1)
    if view.stride(3) != 1:
        return None
    # a dim of size one is never stepped along: its stride (any, e.g. a 1x1 weight's) is made
    # one a descriptor takes
    strides = list(view.stride())
    for d in (2, 1, 0):
        if view.shape[d] == 1:
            strides[d] = strides[d + 1] * view.shape[d + 1]
    if strides != list(view.stride()):
        view = view.as_strided(view.shape, strides)
    if view.data_ptr() % 16 or any(st * t.element_size() % 16 for st in strides[:3]):
        return None
    return view


def _fits(limit: int | None = None) -> Any:
    """Whether a config's pipeline (stages x the two boxes) and its staged output box fit
    ``limit`` bytes of shared memory (default: the chip's), 16-bit elements; for the weight
    gradient's configs the two position boxes, its result through registers."""
    if limit is None:
        limit = runtime.current().limits.shared_memory_per_block

    def admit(config: KernelConfig) -> bool:
        p = config.params
        rows = p["TILE_H"] * p["TILE_W"]
        if "BLOCK_K" not in p:
            return max(config.num_stages, 1) * rows * (p["BLOCK_M"] + p["BLOCK_N"]) * 2 <= limit
        staged = max(config.num_stages, 1) * (rows + p["BLOCK_N"]) * p["BLOCK_K"] * 2
        return staged + rows * p["BLOCK_N"] * 2 <= limit

    return admit


def _phases(x: torch.Tensor, stride: tuple[int, int, int]) -> list[torch.Tensor]:
    """(N, H, W, C) ``x``'s rows and columns of each phase modulo the stride (1 or 2 along
    each dim), as the kernels take them: phases (0, 0), (0, 1), (1, 0), (1, 1), x itself for a
    phase the stride does not have. Each is a strided view: a descriptor reads it in place."""
    views = {(ph, pw): x[:, ph::stride[1], pw::stride[2]] for ph in range(stride[1]) for pw in range(stride[2])}
    return [views.get(phase, views[0, 0]) for phase in ((0, 0), (0, 1), (1, 0), (1, 1))]


def _taps(size: int, stride: int, pad: int, dil: int) -> tuple[int, int, int, int, int]:
    """Along one dim, the taps of each phase modulo the stride (the phase of tap r is that of
    its offset r * dil - pad): (first of phase 0, their count, first of phase 1, their count,
    the step between a phase's taps)."""
    phases = [[r for r in range(size) if (r * dil - pad) % stride == phase] for phase in range(2)]
    step = 2 if stride == 2 and dil % 2 else 1
    assert all(b - a == step for taps in phases for a, b in zip(taps, taps[1:]))
    return (phases[0][0] if phases[0] else 0, len(phases[0]), phases[1][0] if phases[1] else 0, len(phases[1]),
            step)


def applies(a: torch.Tensor, y: torch.Tensor, stride: tuple[int, int, int], padding: tuple[int, int, int],
            kernel: tuple[int, int, int], groups: int) -> bool:
    """Whether this kernel computes a gather map of (N, C, D, H, W) ``a`` into ``y`` (see the
    module's scope); padding and dilation may be negative (the data gradient's)."""
    if a.dtype not in DTYPES or groups != 1 or kernel[0] != 1 or padding[0] != 0:
        return False
    if stride[0] != 1 or not {stride[1], stride[2]} <= {1, 2}:
        return False
    if any(step == 2 and size < 2 for size, step in zip(a.shape[3:], stride[1:])):
        return False  # a phase without rows or columns: nothing a descriptor can describe
    if a.shape[2] != 1 or y.shape[2] != 1 or a.shape[1] % 8 or y.shape[1] % 8 or a.shape[1] < 16:
        return False
    if not settings.get("GEMS_CONV_TMA") or gemm_tma.TensorDescriptor is None:
        return False
    if runtime.current().interpreter and a.dtype == torch.bfloat16:
        return False  # the interpreter multiplies bf16 storage bits in tl.dot
    if not gemm_tma.supported(a.device) or not _some_config_fits(runtime.current().limits.shared_memory_per_block):
        return False
    return _channels_last(a[:, :, 0]) is not None and _channels_last(y[:, :, 0]) is not None


@functools.lru_cache(maxsize=8)
def _some_config_fits(shared_memory: int) -> bool:
    """Whether a chip with this much shared memory a block runs one of the forward's configs."""
    return any(_fits(shared_memory)(config) for config in CONV_TMA.configs())


def launch(a: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor, stride: tuple[int, int, int],
           padding: tuple[int, int, int], dilation: tuple[int, int, int], weight_kc_dim: int) -> None:
    """y = the gather map of ``a`` by ``w`` (+ bias), all in 3-d form, where :func:`applies`;
    the weight's dim ``weight_kc_dim`` runs over a's channels (1: a convolution's weight; 0:
    its transpose, as the data gradient reads it), and is repacked channels-last where its
    (out channels, R, S, in channels) view does not have a unit channel stride."""
    TensorDescriptor = gemm_tma.TensorDescriptor
    x = _channels_last(a[:, :, 0])
    weight = w[:, :, 0] if weight_kc_dim == 1 else w[:, :, 0].transpose(0, 1)
    w4 = _channels_last(weight)
    if w4 is None:  # (out, R, S, in) in memory (channels-last strides, also for 1x1)
        w4 = _channels_last(weight.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2))
    assert x is not None and w4 is not None
    out = _channels_last(y[:, :, 0])
    assert out is not None
    (n, _, _, c), (c_out, r, s, _), (_, p, q, _) = x.shape, w4.shape, out.shape
    bias_arg = y if bias is None else bias  # a placeholder pointer when there is no bias
    rt = runtime.current()
    phases = _phases(x, stride)
    sizes = (p, q, c, c_out, *_taps(r, stride[1], padding[1], dilation[1]),
             *_taps(s, stride[2], padding[2], dilation[2]), padding[1], padding[2], dilation[1], dilation[2])

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        params = config.params
        th, tw, block_n, block_k = params["TILE_H"], params["TILE_W"], params["BLOCK_N"], params["BLOCK_K"]
        block_k = min(block_k, max(16, next_power_of_2(c)))
        block_n = min(block_n, max(16, next_power_of_2(c_out)))
        target_view = out if target is y else _channels_last(target[:, :, 0])
        assert target_view is not None
        inputs = {id(v): v for v in phases}  # (a stride of 1 repeats x)
        made = {key: TensorDescriptor(v, list(v.shape), list(v.stride()), [1, th, tw, block_k])
                for key, v in inputs.items()}
        descriptors = (*(made[id(v)] for v in phases),
                       TensorDescriptor(w4, list(w4.shape), list(w4.stride()), [block_n, 1, 1, block_k]),
                       TensorDescriptor(target_view, list(target_view.shape), list(target_view.stride()),
                                        [1, th, tw, block_n]))
        grid = (n * cdiv(p, th) * cdiv(q, tw) * cdiv(c_out, block_n),)
        constexprs = {"HAS_BIAS": bias is not None, "STRIDE_H": stride[1], "STRIDE_W": stride[2], "TILE_H": th,
                      "TILE_W": tw, "BLOCK_N": block_n, "BLOCK_K": block_k}
        gemm_tma.run_described(_conv_tma_kernel, _launch_interpreted, CONV_TMA, rt, grid,
                               (*descriptors, bias_arg, *sizes), constexprs, config, target.device)

    def bench(config: KernelConfig) -> float:
        scratch = torch.empty_strided(y.shape, y.stride(), dtype=y.dtype, device=y.device)
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    key = (str(a.dtype), _bucket(n * p * q), _bucket(c_out), _bucket(c), r, s, stride[1:])
    run(CONV_TMA.choose(key, bench, _fits()), y)


def launch_weight_grad(grad: torch.Tensor, x: torch.Tensor, dw: torch.Tensor, stride: tuple[int, int, int],
                       padding: tuple[int, int, int], dilation: tuple[int, int, int]) -> None:
    """dw (C_out, C, 1, R, S) = the weight gradient of the gather map from ``x`` to ``grad``'s
    positions (3-d form), where :func:`applies` to (x, grad) and both have 16 channels or
    more. The positions are split into slices that fill the chip; their fp32 partials are
    summed in order."""
    from .gemm_common import _INT32_MAX
    from .gemm_decode import slice_partials, sum_slices

    TensorDescriptor = gemm_tma.TensorDescriptor
    g4, x4 = _channels_last(grad[:, :, 0]), _channels_last(x[:, :, 0])
    assert g4 is not None and x4 is not None
    (n, p, q, c_out), c = g4.shape, x4.shape[3]
    r, s = dw.shape[3], dw.shape[4]
    views, rows, cols = _phases(x4, stride), _taps(r, stride[1], padding[1], dilation[1]), _taps(
        s, stride[2], padding[2], dilation[2])
    # (the phase's view, the phase, its taps along the height, along the width) where it has taps
    phase_taps = [(views[2 * ph + pw], (ph, pw), (rows[2 * ph], rows[2 * ph + 1], rows[4]),
                   (cols[2 * pw], cols[2 * pw + 1], cols[4]))
                  for ph in range(stride[1]) for pw in range(stride[2]) if rows[2 * ph + 1] and cols[2 * pw + 1]]
    rt = runtime.current()
    units = runtime.compute_units(x.device.type, x.device.index)

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        params = config.params
        th, tw = params["TILE_H"], params["TILE_W"]
        block_m = min(params["BLOCK_M"], max(16, next_power_of_2(c_out)))
        block_n = min(params["BLOCK_N"], max(16, next_power_of_2(c)))
        tiles = cdiv(c_out, block_m) * cdiv(c, block_n)
        boxes = n * cdiv(p, th) * cdiv(q, tw)
        slices = max(1, min(cdiv(units, tiles * r * s), boxes // _MIN_BOXES_PER_SLICE, _MAX_SLICES))
        per_slice = cdiv(boxes, slices)
        slices = cdiv(boxes, per_slice)
        out = slice_partials(target, slices, torch.float32)
        g_desc = TensorDescriptor(g4, list(g4.shape), list(g4.stride()), [1, th, tw, block_m])
        strides = (out.stride(0), out.stride(1), out.stride(2), out.stride(4), out.stride(5))
        constexprs = {"STRIDE_H": stride[1], "STRIDE_W": stride[2], "TILE_H": th, "TILE_W": tw, "BLOCK_M": block_m,
                      "BLOCK_N": block_n, "INT64": max(slices * target.numel(), out.numel()) > _INT32_MAX // 2}
        # a launch per phase of the stride, over that phase's taps (one descriptor a launch:
        # branches over several would each hold their own pipeline's shared memory)
        for view, (ph, pw), (r_first, r_count, r_step), (s_first, s_count, s_step) in phase_taps:
            x_desc = TensorDescriptor(view, list(view.shape), list(view.stride()), [1, th, tw, block_n])
            args = (g_desc, x_desc, out, p, q, c, c_out, r_first, r_step, s_first, s_count, s_step, ph, pw,
                    padding[1], padding[2], dilation[1], dilation[2], boxes, per_slice, *strides)
            gemm_tma.run_described(_conv_tma_weight_grad_kernel, _launch_weight_grad_interpreted, CONV_TMA_WEIGHT,
                                   rt, (tiles, r_count * s_count, slices), args, constexprs, config, target.device)
        sum_slices(out, target, slices, CONV_TMA_WEIGHT.options())

    def bench(config: KernelConfig) -> float:
        scratch = torch.empty_like(dw)
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    key = (str(x.dtype), _bucket(n * p * q), _bucket(c_out), _bucket(c), r, s, stride[1:])
    run(CONV_TMA_WEIGHT.choose(key, bench, _fits()), dw)
