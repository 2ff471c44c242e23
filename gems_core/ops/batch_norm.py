"""batch_norm: ``native_batch_norm`` and its backward (the CPU route of ``F.batch_norm`` and
the GPU route where cuDNN or MIOpen does not take the call), ``cudnn_batch_norm`` and
``miopen_batch_norm`` and their backwards (the NVIDIA and AMD GPU routes otherwise), and the
``_native_batch_norm_legit`` / ``_batch_norm_with_update`` / ``batch_norm_backward`` forms
that export and compilation reach.

The input (N, C, *) is read where it lies in one of two dense layouts: channels outermost
below the batch (contiguous: each channel is N runs of HW positions) or innermost
(channels-last, and any (N, C) input: a matrix of N * HW rows by C channels). Other layouts
are copied first. Three kernels:

- per-channel sums over the N * HW positions, split over ``SPLITS`` programs a channel (or a
  block of channels) so that the chip fills also when C is small and N * HW large; the
  forward sums ``x - k`` and its square (``k``, the channel's first value, keeps the
  fp32 sums from cancelling when the mean is large against the spread), the backward
  ``dy`` and ``dy * (x - mean)``;
- a per-channel step that adds the splits' sums and turns them into the statistics, the
  running-statistics update (``momentum``; the unbiased variance), the weight and bias
  gradients and the coefficients of the elementwise step;
- the elementwise step, ``out = (x - mean[c]) * a[c] + b[c] (+ dy * d[c])``: the
  normalized output in the forward, the input gradient in the backward.

Statistics (save_mean, save_invstd) have the input dtype on the CPU, as ATen's CPU kernel
keeps them (float32 where the parameters are float32 and the input half precision), and the
accumulation type on other devices, as ATen's GPU kernels do; cuDNN's and MIOpen's have the
weight's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
from .reduction import acc_dtype, bench_ms, write_out

BATCH_NORM = Tunable(
    "batch_norm",
    params=("BLOCK_M", "BLOCK_N"),
    defaults=[
        KernelConfig({"BLOCK_M": 16, "BLOCK_N": 128}, num_warps=4),
        KernelConfig({"BLOCK_M": 32, "BLOCK_N": 128}, num_warps=8),
        KernelConfig({"BLOCK_M": 8, "BLOCK_N": 256}, num_warps=4),
        KernelConfig({"BLOCK_M": 4, "BLOCK_N": 1024}, num_warps=8),
    ],
    description="batch_norm sums and elementwise step: tiles of BLOCK_M rows (positions, or "
    "batch entries of a contiguous input) by BLOCK_N contiguous columns (channels of a "
    "channels-last input, positions of a contiguous one)",
)

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_HALVES = (torch.float16, torch.bfloat16)
_STEP_SPLITS, _STEP_CHANNELS = 64, 32  # the per-channel step's tile: splits x channels
_FORWARD, _EVAL, _BACKWARD = 0, 1, 2  # modes of the per-channel step


@triton.jit
def _batch_norm_sums_kernel(
    x_ptr,  # (N, C, HW) contiguous, or (N * HW, C) contiguous when CHANNELS_LAST (N: its rows)
    dy_ptr,  # laid out as x, when BACKWARD
    center_ptr,  # (C,): k (forward) or the mean (backward)
    partial_ptr,  # (2, SPLITS, C) ACC
    N,
    C,
    HW,  # 1 when CHANNELS_LAST
    SPLITS,
    tiles_per_split,
    CENTER_FIRST: tl.constexpr,  # forward: k = x[0, c] (center_ptr is x)
    BACKWARD: tl.constexpr,
    CHANNELS_LAST: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 data, else float32
):
    # forward:  s1 = sum(x - k),  s2 = sum((x - k)^2)     over the N * HW positions of a channel
    # backward: s1 = sum(dy),     s2 = sum(dy * (x - mean))
    pid = tl.program_id(0)
    split = pid % SPLITS
    group = pid // SPLITS  # the channel, or the block of channels when CHANNELS_LAST
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    acc1 = tl.zeros((BLOCK_M, BLOCK_N), ACC)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), ACC)
    if CHANNELS_LAST:
        channels = group * BLOCK_N + cols
        channel_mask = channels < C
        center = tl.load(center_ptr + channels, mask=channel_mask, other=0.0).to(ACC)
        tiles = tl.cdiv(N, BLOCK_M)
    else:
        channel = group.to(tl.int64)
        center = tl.load(center_ptr + channel * (HW if CENTER_FIRST else 1)).to(ACC)
        col_tiles = tl.cdiv(HW, BLOCK_N)
        tiles = tl.cdiv(N, BLOCK_M) * col_tiles
    start = split * tiles_per_split
    for t in range(start, tl.minimum(start + tiles_per_split, tiles)):
        if CHANNELS_LAST:
            r = (t * BLOCK_M + rows).to(tl.int64)
            mask = (r < N)[:, None] & channel_mask[None, :]
            offsets = r[:, None] * C + channels[None, :]
        else:
            n = ((t // col_tiles) * BLOCK_M + rows).to(tl.int64)
            hw = (t % col_tiles) * BLOCK_N + cols
            mask = (n < N)[:, None] & (hw < HW)[None, :]
            offsets = (n[:, None] * C + channel) * HW + hw[None, :]
        d = tl.where(mask, tl.load(x_ptr + offsets, mask=mask, other=0.0).to(ACC) - center, 0.0)
        if BACKWARD:
            g = tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(ACC)
            acc1 += g
            acc2 += g * d
        else:
            acc1 += d
            acc2 += d * d
    if CHANNELS_LAST:
        tl.store(partial_ptr + split * C + channels, tl.sum(acc1, 0), mask=channel_mask)
        tl.store(partial_ptr + (SPLITS + split) * C + channels, tl.sum(acc2, 0), mask=channel_mask)
    else:
        tl.store(partial_ptr + split * C + channel, tl.sum(tl.sum(acc1, 1), 0))
        tl.store(partial_ptr + (SPLITS + split) * C + channel, tl.sum(tl.sum(acc2, 1), 0))


@triton.jit
def _batch_norm_channel_kernel(
    partial_ptr,  # (2, SPLITS, C) ACC
    center_ptr,  # (C,): k of the forward sums (FORWARD; x itself when CENTER_STRIDE > 0)
    mean_ptr,  # (C,): save_mean (written by a forward; read by a training backward)
    invstd_ptr,  # (C,): save_invstd (likewise)
    w_ptr,  # (C,) when HAS_W
    b_ptr,  # (C,) when HAS_B
    running_mean_ptr,  # (C,) when HAS_RUNNING (EVAL: the statistics used)
    running_var_ptr,  # (C,) when HAS_RUNNING
    coef_ptr,  # (4, C) ACC: mean, a, b, d of the elementwise step
    dw_ptr,  # (C,) when HAS_DW
    db_ptr,  # (C,) when HAS_DB
    C,
    SPLITS,
    CENTER_STRIDE,  # elements between the k of two channels (0: center_ptr is (C,))
    count,  # N * HW
    momentum,
    eps,
    MODE: tl.constexpr,  # 0: training forward, 1: forward with the running statistics, 2: backward
    TRAIN: tl.constexpr,  # backward: of a training forward (the input gradient sees the batch's mean)
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    HAS_RUNNING: tl.constexpr,
    HAS_DW: tl.constexpr,
    HAS_DB: tl.constexpr,
    STORE_STATS: tl.constexpr,  # forward with the running statistics: keep them as save_mean, save_invstd
    BLOCK_S: tl.constexpr,  # splits added a step
    BLOCK_C: tl.constexpr,
    ACC: tl.constexpr,
):
    # training forward: mean = k + s1 / n,  var = s2 / n - (s1 / n)^2,  invstd = 1 / sqrt(var + eps)
    #   running_mean += momentum * (mean - running_mean)
    #   running_var  += momentum * (var * n / (n - 1) - running_var)
    #   y = (x - mean) * invstd * w + b
    # backward, with s1 = sum(dy), s2 = sum(dy * (x - mean)):
    #   dw = s2 * invstd,  db = s1
    #   dx = w * invstd * (dy - s1 / n - (x - mean) * invstd^2 * s2 / n)   (training)
    #   dx = w * invstd * dy                                                (running statistics)
    channels = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = channels < C
    s1 = tl.zeros((BLOCK_S, BLOCK_C), ACC)
    s2 = tl.zeros((BLOCK_S, BLOCK_C), ACC)
    for start in range(0, SPLITS, BLOCK_S):
        splits = start + tl.arange(0, BLOCK_S)
        tile_mask = (splits < SPLITS)[:, None] & mask[None, :]
        offsets = splits[:, None] * C + channels[None, :]
        s1 += tl.load(partial_ptr + offsets, mask=tile_mask, other=0.0)
        s2 += tl.load(partial_ptr + SPLITS * C + offsets, mask=tile_mask, other=0.0)
    s1 = tl.sum(s1, 0)
    s2 = tl.sum(s2, 0)
    w = tl.full((BLOCK_C,), 1.0, ACC)
    if HAS_W:
        w = tl.load(w_ptr + channels, mask=mask, other=1.0).to(ACC)
    if MODE == 0:
        center = tl.load(center_ptr + channels.to(tl.int64) * CENTER_STRIDE, mask=mask, other=0.0).to(ACC)
        mean = center + s1 / count
        squares = tl.maximum(s2 - s1 * (s1 / count), 0.0)  # sum((x - mean)^2)
        invstd = 1.0 / tl.sqrt(squares / count + eps)
        tl.store(mean_ptr + channels, mean.to(mean_ptr.dtype.element_ty), mask=mask)
        tl.store(invstd_ptr + channels, invstd.to(invstd_ptr.dtype.element_ty), mask=mask)
        if HAS_RUNNING:
            running_mean = tl.load(running_mean_ptr + channels, mask=mask, other=0.0).to(ACC)
            running_var = tl.load(running_var_ptr + channels, mask=mask, other=0.0).to(ACC)
            running_mean = momentum * mean + (1 - momentum) * running_mean
            running_var = momentum * (squares / (count - 1)) + (1 - momentum) * running_var
            tl.store(running_mean_ptr + channels, running_mean.to(running_mean_ptr.dtype.element_ty), mask=mask)
            tl.store(running_var_ptr + channels, running_var.to(running_var_ptr.dtype.element_ty), mask=mask)
    elif MODE == 1:
        mean = tl.load(running_mean_ptr + channels, mask=mask, other=0.0).to(ACC)
        invstd = 1.0 / tl.sqrt(tl.load(running_var_ptr + channels, mask=mask, other=1.0).to(ACC) + eps)
        if STORE_STATS:
            tl.store(mean_ptr + channels, mean.to(mean_ptr.dtype.element_ty), mask=mask)
            tl.store(invstd_ptr + channels, invstd.to(invstd_ptr.dtype.element_ty), mask=mask)
    else:
        if TRAIN:
            mean = tl.load(mean_ptr + channels, mask=mask, other=0.0).to(ACC)
            invstd = tl.load(invstd_ptr + channels, mask=mask, other=0.0).to(ACC)
        else:
            mean = tl.load(running_mean_ptr + channels, mask=mask, other=0.0).to(ACC)
            invstd = 1.0 / tl.sqrt(tl.load(running_var_ptr + channels, mask=mask, other=1.0).to(ACC) + eps)
        if HAS_DW:
            tl.store(dw_ptr + channels, (s2 * invstd).to(dw_ptr.dtype.element_ty), mask=mask)
        if HAS_DB:
            tl.store(db_ptr + channels, s1.to(db_ptr.dtype.element_ty), mask=mask)
    scale = w * invstd
    if MODE == 2:
        a = tl.zeros((BLOCK_C,), ACC)
        b = tl.zeros((BLOCK_C,), ACC)
        if TRAIN:
            a = -scale * invstd * invstd * (s2 / count)
            b = -scale * (s1 / count)
        d = scale
    else:
        a = scale
        b = tl.zeros((BLOCK_C,), ACC)
        if HAS_B:
            b = tl.load(b_ptr + channels, mask=mask, other=0.0).to(ACC)
        d = tl.zeros((BLOCK_C,), ACC)
    tl.store(coef_ptr + channels, mean, mask=mask)
    tl.store(coef_ptr + C + channels, a, mask=mask)
    tl.store(coef_ptr + 2 * C + channels, b, mask=mask)
    tl.store(coef_ptr + 3 * C + channels, d, mask=mask)


@triton.jit
def _batch_norm_apply_kernel(
    x_ptr,  # (N, C, HW) contiguous, or (N * HW, C) contiguous when CHANNELS_LAST
    dy_ptr,  # laid out as x, when BACKWARD
    coef_ptr,  # (4, C) ACC: mean, a, b, d
    out_ptr,  # laid out as x
    N,
    C,
    HW,  # 1 when CHANNELS_LAST
    BACKWARD: tl.constexpr,
    CHANNELS_LAST: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC: tl.constexpr,
):
    # out = (x - mean[c]) * a[c] + b[c]  (+ dy * d[c] when BACKWARD)
    pid = tl.program_id(0)
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    if CHANNELS_LAST:
        row_tiles = tl.cdiv(N, BLOCK_M)
        channels = (pid // row_tiles) * BLOCK_N + cols
        channel_mask = channels < C
        r = ((pid % row_tiles) * BLOCK_M + rows).to(tl.int64)
        mask = (r < N)[:, None] & channel_mask[None, :]
        offsets = r[:, None] * C + channels[None, :]
        mean = tl.load(coef_ptr + channels, mask=channel_mask, other=0.0)[None, :]
        a = tl.load(coef_ptr + C + channels, mask=channel_mask, other=0.0)[None, :]
        b = tl.load(coef_ptr + 2 * C + channels, mask=channel_mask, other=0.0)[None, :]
        d = tl.load(coef_ptr + 3 * C + channels, mask=channel_mask, other=0.0)[None, :]
    else:
        col_tiles = tl.cdiv(HW, BLOCK_N)
        tiles = tl.cdiv(N, BLOCK_M) * col_tiles
        channel = (pid // tiles).to(tl.int64)
        t = pid % tiles
        n = ((t // col_tiles) * BLOCK_M + rows).to(tl.int64)
        hw = (t % col_tiles) * BLOCK_N + cols
        mask = (n < N)[:, None] & (hw < HW)[None, :]
        offsets = (n[:, None] * C + channel) * HW + hw[None, :]
        mean = tl.load(coef_ptr + channel)
        a = tl.load(coef_ptr + C + channel)
        b = tl.load(coef_ptr + 2 * C + channel)
        d = tl.load(coef_ptr + 3 * C + channel)
    out = (tl.load(x_ptr + offsets, mask=mask, other=0.0).to(ACC) - mean) * a + b
    if BACKWARD:
        out += tl.load(dy_ptr + offsets, mask=mask, other=0.0).to(ACC) * d
    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)


_sums = LaunchCache(_batch_norm_sums_kernel, name="batch_norm")
_per_channel = LaunchCache(_batch_norm_channel_kernel, name="batch_norm_channel")
_apply = LaunchCache(_batch_norm_apply_kernel, name="batch_norm_apply")

_MAX_SPLITS = 1024
_TILES_PER_SPLIT = 4  # fewest tiles a split sums: fewer would cost more in partials than they save


class _Layout:
    """How the kernels see a dense input: N rows (N * HW when channels are innermost) by C
    channels by HW positions (1 when channels are innermost), and the tile a config gives
    for that shape: its area, the contiguous axis at most its own length, rows the rest."""

    __slots__ = ("c", "channels_last", "hw", "n")

    def __init__(self, x: torch.Tensor, channels_last: bool) -> None:
        n, c = x.shape[0], x.shape[1]
        hw = math.prod(x.shape[2:])
        self.channels_last = channels_last
        self.n, self.c, self.hw = (n * hw, c, 1) if channels_last else (n, c, hw)

    def blocks(self, config: KernelConfig) -> tuple[int, int]:
        block_m, block_n = config.params["BLOCK_M"], config.params["BLOCK_N"]
        area = block_m * block_n
        width = next_power_of_2(self.c if self.channels_last else self.hw)
        cols = min(block_n, width)
        rows = min(area // cols, next_power_of_2(self.n))
        return rows, min(area // rows, width)  # few rows (one image, say): wider tiles

    def key(self, dtype: torch.dtype) -> tuple[Any, ...]:
        return (self.channels_last, str(dtype), self.n.bit_length(), self.c.bit_length(), self.hw.bit_length())


def _channels_innermost(x: torch.Tensor) -> bool:
    """Whether ``x`` is dense with its channels (dim 1) innermost: (N, *, C) in memory, as a
    channels-last tensor and any contiguous (N, C) or (N, C, 1, ...) one is."""
    expected = 1
    for d in (1, *range(x.dim() - 1, 1, -1), 0):
        if x.size(d) != 1 and x.stride(d) != expected:
            return False
        expected *= x.size(d)
    return True


def _dense(x: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """``x`` in a layout the kernels read (copied where it is neither) and whether its
    channels are innermost."""
    if _channels_innermost(x):
        return x, True
    x = x.contiguous()
    return x, _channels_innermost(x)


def _like(t: torch.Tensor, x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """``t`` (of ``x``'s shape) laid out as ``x``: a gradient that arrives in another layout."""
    if channels_last:
        if _channels_innermost(t):
            return t
        order = (0, *range(2, t.dim()), 1)
        return t.permute(order).contiguous().permute(0, t.dim() - 1, *range(1, t.dim() - 1))
    return t.contiguous()


def _serves(x: torch.Tensor, *params: torch.Tensor | None) -> bool:
    """Whether gems serves an input and its per-channel tensors: floating, 2 dims or more,
    the parameters of the input dtype or all float32 with a half-precision input (ATen's
    mixed types); ATen answers (and raises) otherwise."""
    if x.dtype not in _FLOATS or x.dim() < 2:
        return False
    dtypes = {p.dtype for p in params if p is not None}
    return dtypes <= {x.dtype} or (x.dtype in _HALVES and dtypes == {torch.float32})


def _check_sizes(x: torch.Tensor, **params: torch.Tensor | None) -> None:
    channels = x.shape[1]
    for name, p in params.items():
        if p is not None and p.numel() != channels:
            raise RuntimeError(f"{name} should contain {channels} elements not {p.numel()}")


def _stats_dtype(x: torch.Tensor, *params: torch.Tensor | None) -> torch.dtype:
    if x.device.type == "cpu":
        mixed = any(p is not None and p.dtype != x.dtype for p in params)
        return torch.float32 if mixed else x.dtype
    return acc_dtype(x.dtype)


def _flat(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return t.contiguous() if t is not None else like  # a placeholder pointer the kernel never reads


def _launch_tiles(layout: _Layout, x: torch.Tensor, dy: torch.Tensor | None, center: torch.Tensor,
                  coef_or_partials: torch.Tensor, out: torch.Tensor | None, center_first: bool) -> None:
    """The sums kernel (``out`` None: into partials, one row of splits a channel) or the
    elementwise step (into ``out``), with the config chosen for this shape."""
    acc = TL_DTYPES[acc_dtype(x.dtype)]
    backward = dy is not None

    def launch(config: KernelConfig) -> None:
        block_m, block_n = layout.blocks(config)
        row_tiles = cdiv(layout.n, block_m)
        col_tiles = 1 if layout.channels_last else cdiv(layout.hw, block_n)
        groups = cdiv(layout.c, block_n) if layout.channels_last else layout.c
        common = {"config": config, "options": BATCH_NORM.options(), "BACKWARD": backward,
                  "CHANNELS_LAST": layout.channels_last, "BLOCK_M": block_m, "BLOCK_N": block_n, "ACC": acc}
        if out is not None:
            _apply((groups * row_tiles * col_tiles,), x, dy if backward else x, coef_or_partials, out,
                   layout.n, layout.c, layout.hw, **common)
            return
        splits = coef_or_partials.shape[1]
        tiles_per_split = cdiv(row_tiles * col_tiles, splits)
        _sums((groups * splits,), x, dy if backward else x, center, coef_or_partials, layout.n, layout.c,
              layout.hw, splits, tiles_per_split, CENTER_FIRST=center_first, **common)

    key = ("apply" if out is not None else "sums", backward, *layout.key(x.dtype))
    launch(BATCH_NORM.choose(key, lambda config: bench_ms(lambda: launch(config))))


def _splits(layout: _Layout, x: torch.Tensor) -> int:
    """Programs a channel's sums are split over: enough for eight programs a compute unit,
    each summing at least a few tiles (of the smallest config's size)."""
    config = BATCH_NORM.configs()[0]
    block_m, block_n = layout.blocks(config)
    tiles = max(cdiv(layout.n, block_m) * (1 if layout.channels_last else cdiv(layout.hw, block_n)), 1)
    groups = cdiv(layout.c, block_n) if layout.channels_last else layout.c
    target = 8 * runtime.compute_units(x.device.type, x.device.index)
    splits = min(_MAX_SPLITS, cdiv(target, groups), max(tiles // _TILES_PER_SPLIT, 1))
    return cdiv(tiles, cdiv(tiles, max(splits, 1)))


def _per_channel_step(
    layout: _Layout, partials: torch.Tensor | None, center: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor,
    weight: torch.Tensor | None, bias: torch.Tensor | None, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, coef: torch.Tensor, dw: torch.Tensor | None, db: torch.Tensor | None,
    momentum: float, eps: float, mode: int, train: bool = True, store_stats: bool = False,
) -> None:
    """The per-channel step over the sums in ``partials`` (None: no sums, as the forward
    with running statistics needs none)."""
    c = layout.c
    if not c:
        return
    splits = 0 if partials is None else partials.shape[1]
    _per_channel(
        (cdiv(c, _STEP_CHANNELS),), coef if partials is None else partials, center, mean, invstd,
        _flat(weight, coef), _flat(bias, coef), _flat(running_mean, coef), _flat(running_var, coef), coef,
        _flat(dw, coef), _flat(db, coef), c, splits, 1 if layout.channels_last else layout.hw,
        float(layout.n * layout.hw), float(momentum), float(eps), MODE=mode, TRAIN=train,
        HAS_W=weight is not None, HAS_B=bias is not None, HAS_RUNNING=running_mean is not None,
        HAS_DW=dw is not None, HAS_DB=db is not None, STORE_STATS=store_stats,
        BLOCK_S=min(_STEP_SPLITS, next_power_of_2(max(splits, 1))), BLOCK_C=_STEP_CHANNELS,
        ACC=TL_DTYPES[coef.dtype], options=BATCH_NORM.options(),
    )


def _sum_tiles(layout: _Layout, x: torch.Tensor, dy: torch.Tensor | None, center: torch.Tensor) -> torch.Tensor:
    """(2, splits, C) partial sums of the forward (``dy`` None) or the backward."""
    partials = torch.empty((2, _splits(layout, x), layout.c), dtype=acc_dtype(x.dtype), device=x.device)
    _launch_tiles(layout, x, dy, center, partials, None, center_first=dy is None)
    return partials


def _forward(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
    running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool, momentum: float,
    eps: float, stats_dtype: torch.dtype, eval_stats: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, save_mean, save_invstd); ``eval_stats``: a forward with the running statistics
    returns them (mean and invstd) rather than empty tensors."""
    x, channels_last = _dense(input)
    layout = _Layout(x, channels_last)
    out = torch.empty_like(x)
    stats = (layout.c,) if training or eval_stats else (0,)
    save_mean = torch.empty(stats, dtype=stats_dtype, device=x.device)
    save_invstd = torch.empty(stats, dtype=stats_dtype, device=x.device)
    coef = torch.empty((4, layout.c), dtype=acc_dtype(x.dtype), device=x.device)
    if training:
        partials = _sum_tiles(layout, x, None, x)
        _per_channel_step(layout, partials, x, save_mean, save_invstd, weight, bias, running_mean, running_var,
                          coef, None, None, momentum, eps, _FORWARD)
    else:
        _per_channel_step(layout, None, x, save_mean, save_invstd, weight, bias, running_mean, running_var,
                          coef, None, None, momentum, eps, _EVAL, store_stats=eval_stats)
    if x.numel():
        _launch_tiles(layout, x, None, x, coef, out, center_first=False)
    return out, save_mean, save_invstd


def _backward(
    grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, save_mean: torch.Tensor | None, save_invstd: torch.Tensor | None,
    train: bool, eps: float, output_mask: Sequence[bool], param_dtype: torch.dtype,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """(grad_input, grad_weight, grad_bias), each None where ``output_mask`` says so."""
    x, channels_last = _dense(input)
    grad = _like(grad_out, x, channels_last)
    layout = _Layout(x, channels_last)
    c = layout.c
    dw = torch.empty((c,), dtype=param_dtype, device=x.device) if output_mask[1] else None
    db = torch.empty((c,), dtype=param_dtype, device=x.device) if output_mask[2] else None
    mean = save_mean if train else running_mean
    assert mean is not None
    mean = mean.contiguous()
    invstd = save_invstd.contiguous() if save_invstd is not None else mean
    coef = torch.empty((4, c), dtype=acc_dtype(x.dtype), device=x.device)
    partials = None
    if c and (output_mask[1] or output_mask[2] or (train and output_mask[0])):
        partials = _sum_tiles(layout, x, grad, mean)
    if partials is not None or output_mask[0]:
        _per_channel_step(layout, partials, mean, mean, invstd, weight, None, running_mean, running_var, coef,
                          dw, db, 0.0, eps, _BACKWARD, train=train)
    dx = None
    if output_mask[0]:
        dx = torch.empty_like(x)
        if x.numel():
            _launch_tiles(layout, x, grad, mean, coef, dx, center_first=False)
    return dx, dw, db


def _check_forward(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
    running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool,
) -> bool:
    """Whether gems serves a forward; raises ATen's errors for what no kernel may serve."""
    params = (weight, bias, running_mean, running_var)
    if not _serves(input, *params) or (training and input.numel() == 0):
        return False  # statistics of no positions: ATen's answer (its CPU kernel raises)
    _check_sizes(input, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError(
            f"running_{'mean' if running_mean is None else 'var'} must be defined in the evaluation mode")
    running = [t for t in (running_mean, running_var) if t is not None]
    # the training forward updates the running statistics in place: both, each contiguous
    return not training or not running or (len(running) == 2 and all(t.is_contiguous() for t in running))


def _check_backward(
    grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, save_mean: torch.Tensor | None, save_invstd: torch.Tensor | None,
    train: bool,
) -> bool:
    """Whether gems serves a backward; raises ATen's errors for what no kernel may serve."""
    if not _serves(input, weight, running_mean, running_var) or grad_out.shape != input.shape \
            or grad_out.dtype != input.dtype:
        return False
    stats = {"save_mean": save_mean, "save_invstd": save_invstd} if train else {
        "running_mean": running_mean, "running_var": running_var}
    for name, t in stats.items():
        if t is None:
            mode = "training" if train else "evaluation"
            raise RuntimeError(f"{name} must be defined in the {mode} mode")
        if t.dtype not in _FLOATS:
            return False
    _check_sizes(input, weight=weight, **stats)
    return True


def _param_dtype(x: torch.Tensor, weight: torch.Tensor | None, *others: torch.Tensor | None) -> torch.dtype:
    """The dtype of the weight and bias gradients: the weight's, else float32 where the
    other per-channel tensors are (mixed types), else the input's."""
    if weight is not None:
        return weight.dtype
    return torch.float32 if any(t is not None and t.dtype != x.dtype for t in others) else x.dtype


def _backward_param_dtype(x: torch.Tensor, weight: torch.Tensor | None, running_mean: torch.Tensor | None,
                          running_var: torch.Tensor | None, save_mean: torch.Tensor | None) -> torch.dtype:
    """:func:`_param_dtype` of the backward as ATen decides it on the input's device: its CPU
    kernel counts the saved mean among the mixed types, its accelerator kernels only the
    weight and running statistics (a half input without a weight gets half gradients there,
    though its saved statistics are float32)."""
    others = (running_mean, running_var) + ((save_mean,) if x.device.type == "cpu" else ())
    return _param_dtype(x, weight, *others)


@aten_op("native_batch_norm", "_native_batch_norm_legit")
def native_batch_norm(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
    running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool, momentum: float,
    eps: float,
) -> Any:
    """(out, save_mean, save_invstd): the batch's statistics per channel in training (the
    running ones updated with ``momentum``), else the running statistics."""
    if not _check_forward(input, weight, bias, running_mean, running_var, training):
        return NotImplemented
    stats_dtype = _stats_dtype(input, weight, bias, running_mean, running_var)
    return _forward(input, weight, bias, running_mean, running_var, training, momentum, eps, stats_dtype,
                    eval_stats=input.device.type != "cpu")


def _write_outs(outs: Sequence[torch.Tensor], results: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return tuple(write_out(out, result) for out, result in zip(outs, results))


def _outs_fit(outs: Sequence[torch.Tensor], dtypes: Sequence[torch.dtype]) -> bool:
    """Whether ``out=`` tensors take results of these dtypes (ATen raises otherwise)."""
    return all(out.dtype == dtype for out, dtype in zip(outs, dtypes))


@aten_op("native_batch_norm.out", "_native_batch_norm_legit.out")
def native_batch_norm_out(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
    running_mean: torch.Tensor | None, running_var: torch.Tensor | None, training: bool, momentum: float,
    eps: float, *, out: torch.Tensor, save_mean: torch.Tensor, save_invstd: torch.Tensor,
) -> Any:
    outs = (out, save_mean, save_invstd)
    if not _check_forward(input, weight, bias, running_mean, running_var, training):
        return NotImplemented
    stats_dtype = _stats_dtype(input, weight, bias, running_mean, running_var)
    if not _outs_fit(outs, (input.dtype, stats_dtype, stats_dtype)):
        return NotImplemented
    results = _forward(input, weight, bias, running_mean, running_var, training, momentum, eps, stats_dtype,
                       eval_stats=input.device.type != "cpu")
    return _write_outs(outs, results)


@aten_op("_native_batch_norm_legit.no_stats")
def native_batch_norm_no_stats(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, training: bool, momentum: float,
    eps: float,
) -> Any:
    """native_batch_norm without running statistics."""
    return native_batch_norm(input, weight, bias, None, None, training, momentum, eps)


@aten_op("_native_batch_norm_legit.no_stats_out")
def native_batch_norm_no_stats_out(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, training: bool, momentum: float,
    eps: float, *, out: torch.Tensor, save_mean: torch.Tensor, save_invstd: torch.Tensor,
) -> Any:
    return native_batch_norm_out(input, weight, bias, None, None, training, momentum, eps, out=out,
                                 save_mean=save_mean, save_invstd=save_invstd)


@aten_op("_batch_norm_with_update")
def batch_norm_with_update(
    input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, running_mean: torch.Tensor,
    running_var: torch.Tensor, momentum: float, eps: float,
) -> Any:
    """(out, save_mean, save_invstd, reserve): a training forward that updates the running
    statistics; the reserve is empty."""
    result = native_batch_norm(input, weight, bias, running_mean, running_var, True, momentum, eps)
    if result is NotImplemented:
        return NotImplemented
    return (*result, torch.empty((0,), dtype=torch.uint8, device=input.device))


@aten_op("native_batch_norm_backward")
def native_batch_norm_backward(
    grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, save_mean: torch.Tensor | None, save_invstd: torch.Tensor | None,
    train: bool, eps: float, output_mask: Sequence[bool],
) -> Any:
    """(grad_input, grad_weight, grad_bias), each None where ``output_mask`` says so; a
    training backward differentiates through the batch's statistics."""
    if not _check_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train):
        return NotImplemented
    return _backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                     output_mask, _backward_param_dtype(input, weight, running_mean, running_var, save_mean))


@aten_op("native_batch_norm_backward.out")
def native_batch_norm_backward_out(
    grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor | None, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, save_mean: torch.Tensor | None, save_invstd: torch.Tensor | None,
    train: bool, eps: float, output_mask: Sequence[bool], *, out0: torch.Tensor, out1: torch.Tensor,
    out2: torch.Tensor,
) -> Any:
    if not all(output_mask):
        return NotImplemented
    param_dtype = _backward_param_dtype(input, weight, running_mean, running_var, save_mean)
    if not _outs_fit((out0, out1, out2), (input.dtype, param_dtype, param_dtype)):
        return NotImplemented
    results = native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
                                         save_invstd, train, eps, output_mask)
    if results is NotImplemented:
        return NotImplemented
    return _write_outs((out0, out1, out2), results)


@aten_op("miopen_batch_norm")
def miopen_batch_norm(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, training: bool, exponential_average_factor: float, epsilon: float,
) -> Any:
    """(out, save_mean, save_invstd) as cuDNN and MIOpen give them: statistics in the
    weight's dtype, empty outside training."""
    if not _check_forward(input, weight, bias, running_mean, running_var, training):
        return NotImplemented
    return _forward(input, weight, bias, running_mean, running_var, training, exponential_average_factor, epsilon,
                    weight.dtype, eval_stats=False)


@aten_op("cudnn_batch_norm")
def cudnn_batch_norm(
    input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, training: bool, exponential_average_factor: float, epsilon: float,
) -> Any:
    """miopen_batch_norm's results and a reserve, empty (the backward recomputes)."""
    result = miopen_batch_norm(input, weight, bias, running_mean, running_var, training, exponential_average_factor,
                               epsilon)
    if result is NotImplemented:
        return NotImplemented
    return (*result, torch.empty((0,), dtype=torch.uint8, device=input.device))


@aten_op("miopen_batch_norm_backward")
def miopen_batch_norm_backward(
    input: torch.Tensor, grad_output: torch.Tensor, weight: torch.Tensor, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, save_mean: torch.Tensor | None, save_var: torch.Tensor | None,
    epsilon: float,
) -> Any:
    """(grad_input, grad_weight, grad_bias) of a training forward (``save_var``: its invstd)."""
    if not _check_backward(grad_output, input, weight, running_mean, running_var, save_mean, save_var, True):
        return NotImplemented
    return _backward(grad_output, input, weight, running_mean, running_var, save_mean, save_var, True, epsilon,
                     (True, True, True), weight.dtype)


@aten_op("cudnn_batch_norm_backward")
def cudnn_batch_norm_backward(
    input: torch.Tensor, grad_output: torch.Tensor, weight: torch.Tensor, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, save_mean: torch.Tensor | None, save_var: torch.Tensor | None,
    epsilon: float, reserveSpace: torch.Tensor,
) -> Any:
    """miopen_batch_norm_backward's gradients (the reserve is not read)."""
    return miopen_batch_norm_backward(input, grad_output, weight, running_mean, running_var, save_mean, save_var,
                                      epsilon)


@aten_op("batch_norm_backward")
def batch_norm_backward(
    grad_out: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None, save_mean: torch.Tensor | None, save_var: torch.Tensor | None,
    update: bool, eps: float, output_mask: Sequence[bool], reserve: torch.Tensor,
) -> Any:
    """native_batch_norm_backward of ``_batch_norm_with_update`` (``update``) or of a forward
    with the running statistics (``save_var``: the invstd)."""
    return native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var,
                                      update, eps, output_mask)
