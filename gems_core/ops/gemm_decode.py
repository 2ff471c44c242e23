"""GEMM variants for decode-shaped products, dispatched to by mm.py (see its docstring for
the rules): a skinny tile with optional split-K for few rows (M <= 64), and a GEMV for a
single row or column (and for mv).

Skinny tiles rather than swap-AB. With M <= 64 the result has few tile rows, so the work is
spread over N and, when N alone does not give every compute unit a program, over K. The
tile's M side is small (16 to 64 rows: ``tl.dot`` needs at least 16), its N and K sides
large, so each program streams a wide, deep panel of B, the large operand, through a
multi-stage pipeline. Computing C^T = B^T A^T instead (swap-AB) would put N on the MMA's M
side, which matters where the instruction's M is large (Hopper's wgmma: 64 per warp group;
a 16-row tile runs on mma.sync). It is not done: these products are bound by the bytes of
B, not by MMA throughput (a 16 x 128 x 128 bf16 step moves 36 KB for 0.5 MFLOP, ~20x below
the H100's flop/byte balance), both orientations read the same bytes, and one orientation
keeps one kernel, one epilogue and one config space; the tile shape is the tuned choice.

Split-K. Programs are (N tiles, M tiles, K slices). Slices cover whole BLOCK_K steps; their
count is chosen so that the programs fill the chip's compute units once
(:func:`gems_core.runtime.compute_units`), with at least two BLOCK_K steps per slice. With
one slice the kernel applies the epilogue itself. With several, each program writes its
fp32 partial tile to a workspace (slices, M, N) and a second small kernel sums the slices
in a fixed order (deterministic: no atomics), applies alpha, beta * bias and the cast, and
writes C through its strides.

GEMV. For M == 1 (or N == 1, run as the transposed product) and mv, y = alpha * x @ W +
beta * bias streams W once: each program owns BLOCK_N columns and walks K in BLOCK_K steps
of wide loads, multiplying by the slice of x into a (BLOCK_K, BLOCK_N) fp32 tile that is
summed over K once at the end. Whichever of W's dims is contiguous, Triton's coalescing
follows the unit stride; the "gemv" tunable has tall (K-contiguous, a Linear weight) and
wide (N-contiguous) tiles and the layout is part of its tuning key.

Every variant accumulates in fp32 (the GEMV in fp64 for fp64 inputs) and fuses the addmm
epilogue; none copies an operand.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .. import runtime
from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import LaunchCache
from ..tuning import Tunable
from .gemm_common import (
    _INT32_MAX,
    _bucket,
    _input_precision,
    _needs_int64,
    _scalar_arg,
    fits_shared_memory,
    store_epilogue,
)

MM_DECODE = Tunable(
    "mm_decode",
    params=("BLOCK_M", "BLOCK_N", "BLOCK_K"),
    defaults=[
        # the first is used where no benchmarking happens: fits 64 KiB of shared memory in
        # fp32; the others fit it in 16-bit types
        KernelConfig({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_M": 16, "BLOCK_N": 256, "BLOCK_K": 32}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=4, num_stages=3),
    ],
    description="mm/addmm with M <= 64: a BLOCK_M x BLOCK_N tile per program over one K slice "
    "(split-K to fill the chip), K in BLOCK_K steps",
)

GEMV = Tunable(
    "gemv",
    params=("BLOCK_N", "BLOCK_K"),
    defaults=[
        # the first is used where no benchmarking happens
        KernelConfig({"BLOCK_N": 16, "BLOCK_K": 64}, num_warps=4, num_stages=2),
        KernelConfig({"BLOCK_N": 4, "BLOCK_K": 512}, num_warps=4, num_stages=2),
        KernelConfig({"BLOCK_N": 8, "BLOCK_K": 256}, num_warps=4, num_stages=2),
        KernelConfig({"BLOCK_N": 16, "BLOCK_K": 256}, num_warps=8, num_stages=2),
        KernelConfig({"BLOCK_N": 128, "BLOCK_K": 32}, num_warps=4, num_stages=2),
        KernelConfig({"BLOCK_N": 256, "BLOCK_K": 16}, num_warps=8, num_stages=2),
    ],
    description="mv and mm/addmm with one row or column: BLOCK_N result columns per program, "
    "the weight streamed once in BLOCK_K steps",
)

#: split-K: the fewest BLOCK_K steps per slice, and the most slices
_MIN_STEPS_PER_SLICE = 2
_MAX_SLICES = 64
#: elements of C per program of the split-K reduction
_REDUCE_BLOCK = 512


@triton.jit
def _mm_decode_kernel(
    a_ptr,  # (M, K), strides (stride_am, stride_ak)
    b_ptr,  # (K, N), strides (stride_bk, stride_bn)
    c_ptr,  # (M, N), strides (stride_cm, stride_cn); the result, unused when SPLIT
    bias_ptr,  # (M, N) addmm's input, broadcast (stride 0); unused unless HAS_BIAS
    ws_ptr,  # (slices, M, N) fp32 partials, contiguous; used only when SPLIT
    M,
    N,
    K,
    k_per_slice,  # a multiple of BLOCK_K
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_biasm,
    stride_biasn,
    alpha,
    beta,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    INT64: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    # the K slice [k_start, k_start + k_len) of one BLOCK_M x BLOCK_N tile of A @ B, in fp32
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    k_start = pid_k * k_per_slice
    if INT64:
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
        rk = rk.to(tl.int64)
        k_start = k_start.to(tl.int64)
    k_len = tl.minimum(K - k_start, k_per_slice)
    # rows/columns past the edge read a valid row/column (wrapped) and are not stored
    am = rm % M
    bn = rn % N
    a_base = a_ptr + k_start * stride_ak
    b_base = b_ptr + k_start * stride_bk
    a_ptrs = a_base + am[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_base + rk[:, None] * stride_bk + bn[None, :] * stride_bn
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k in range(0, k_len, BLOCK_K):
        a = tl.load(a_ptrs, mask=rk[None, :] < k_len - k, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < k_len - k, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION, out_dtype=tl.float32)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT:
        tl.store(ws_ptr + (pid_k * M + rm[:, None]) * N + rn[None, :], acc, mask=mask)
    else:
        store_epilogue(acc, c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
                       bias_ptr + rm[:, None] * stride_biasm + rn[None, :] * stride_biasn,
                       mask, alpha, beta, HAS_BIAS)


@triton.jit
def _split_k_reduce_kernel(
    ws_ptr,  # (slices, M, N) fp32 partials, contiguous
    c_ptr,  # (M, N), strides (stride_cm, stride_cn)
    bias_ptr,  # (M, N), broadcast; unused unless HAS_BIAS
    M,
    N,
    slices,
    stride_cm,
    stride_cn,
    stride_biasm,
    stride_biasn,
    alpha,
    beta,
    BLOCK: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    INT64: tl.constexpr,
):
    # C = alpha * (sum of the slices, in slice order) + beta * bias, for BLOCK elements of C
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if INT64:
        offs = offs.to(tl.int64)
    size = M * N
    mask = offs < size
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in range(1, slices):
        acc += tl.load(ws_ptr + s * size + offs, mask=mask, other=0.0)
    m = offs // N
    n = offs % N
    store_epilogue(acc, c_ptr + m * stride_cm + n * stride_cn, bias_ptr + m * stride_biasm + n * stride_biasn,
                   mask, alpha, beta, HAS_BIAS)


@triton.jit
def _gemv_kernel(
    x_ptr,  # (K,), stride stride_x
    w_ptr,  # (K, N), strides (stride_wk, stride_wn)
    y_ptr,  # (N,), stride stride_y; the result
    bias_ptr,  # (N,), stride stride_bias (0 when broadcast); unused unless HAS_BIAS
    N,
    K,
    stride_x,
    stride_wk,
    stride_wn,
    stride_y,
    stride_bias,
    alpha,  # fp32, or the bits of an fp64 when ACC_FP64
    beta,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACC_FP64: tl.constexpr,
    INT64: tl.constexpr,
):
    # y[n] = alpha * sum_k x[k] * W[k, n] + beta * bias[n], for BLOCK_N columns n
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    if INT64:
        rn = rn.to(tl.int64)
        rk = rk.to(tl.int64)
    n_mask = rn < N
    wn = rn % N  # columns past the edge read a valid column and are not stored
    if ACC_FP64:
        acc = tl.full((BLOCK_K, BLOCK_N), 0.0, tl.float64)
    else:
        acc = tl.full((BLOCK_K, BLOCK_N), 0.0, tl.float32)
    w_ptrs = w_ptr + rk[:, None] * stride_wk + wn[None, :] * stride_wn
    x_ptrs = x_ptr + rk * stride_x
    # products are summed per K slot across the steps, and across slots once at the end
    for k in range(0, K, BLOCK_K):
        k_mask = rk < K - k
        w = tl.load(w_ptrs, mask=k_mask[:, None], other=0.0)
        x = tl.load(x_ptrs, mask=k_mask, other=0.0)
        acc += w.to(acc.dtype) * x.to(acc.dtype)[:, None]
        w_ptrs += BLOCK_K * stride_wk
        x_ptrs += BLOCK_K * stride_x
    y = tl.sum(acc, axis=0)
    if ACC_FP64:
        alpha = tl.cast(alpha, tl.int64).to(tl.float64, bitcast=True)
        beta = tl.cast(beta, tl.int64).to(tl.float64, bitcast=True)
    y = y * alpha
    if HAS_BIAS:
        bias = tl.load(bias_ptr + rn * stride_bias, mask=n_mask)
        y += bias.to(y.dtype) * beta
    tl.store(y_ptr + rn * stride_y, y.to(y_ptr.dtype.element_ty), mask=n_mask)


_launch_decode = LaunchCache(_mm_decode_kernel, name="mm_decode")
_launch_reduce = LaunchCache(_split_k_reduce_kernel, name="mm_split_k_reduce")
_launch_gemv = LaunchCache(_gemv_kernel, name="gemv")


def slice_partials(target: torch.Tensor, slices: int, dtype: torch.dtype) -> torch.Tensor:
    """Where the ``slices`` partial sums of ``target`` (dense) go: a view of target itself for
    one slice, else ``dtype`` buffers in target's layout, one after another, so that
    :func:`sum_slices` adds them as flat arrays."""
    if slices == 1:
        return target.unsqueeze(0)
    return torch.empty_strided((slices, *target.shape), (target.numel(), *target.stride()), dtype=dtype,
                               device=target.device)


def sum_slices(partials: torch.Tensor, target: torch.Tensor, slices: int, options: Any) -> None:
    """target = the sum of :func:`slice_partials`' buffers, in slice order (nothing to do for one)."""
    if slices > 1:
        size = target.numel()
        _launch_reduce((cdiv(size, _REDUCE_BLOCK),), partials, target, target, 1, size, slices, 0, 1, 0, 0, 1.0,
                       0.0, options=options, BLOCK=_REDUCE_BLOCK, HAS_BIAS=False, INT64=slices * size > _INT32_MAX)


def split_k_slices(tiles: int, K: int, block_k: int, units: int) -> tuple[int, int]:
    """(slices, K per slice) for ``tiles`` result tiles: enough slices that the programs
    fill ``units`` compute units once, each slice at least _MIN_STEPS_PER_SLICE BLOCK_K
    steps; a K per slice that is a whole number of steps, and no empty slice."""
    steps = cdiv(K, block_k)
    slices = max(1, min(cdiv(units, max(tiles, 1)), steps // _MIN_STEPS_PER_SLICE, _MAX_SLICES))
    steps_per_slice = cdiv(steps, slices) if steps else 1
    slices = cdiv(steps, steps_per_slice) if steps else 1
    return slices, steps_per_slice * block_k


def launch_decode(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    bias: torch.Tensor | None,
    alpha: Any,
    beta: Any,
) -> None:
    """out = alpha * (a @ b) + beta * bias for few rows (M <= 64), fp16/bf16/fp32 operands;
    bias already expanded to out's shape."""
    (M, K), N = a.shape, b.shape[1]
    tensors = (a, b, out) if bias is None else (a, b, out, bias)
    bias_arg = out if bias is None else bias  # a placeholder pointer when there is no bias
    int64 = _needs_int64(*tensors)
    precision = _input_precision(a.dtype)
    has_bias = bias is not None
    scalars = (float(alpha), float(beta))
    units = runtime.compute_units(out.device.type, out.device.index)

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        p = config.params
        tiles_m, tiles_n = cdiv(M, p["BLOCK_M"]), cdiv(N, p["BLOCK_N"])
        slices, k_per_slice = split_k_slices(tiles_m * tiles_n, K, p["BLOCK_K"], units)
        split = slices > 1
        ws = torch.empty((slices, M, N), dtype=torch.float32, device=a.device) if split else target
        _launch_decode(
            (tiles_n, tiles_m, slices),
            a,
            b,
            target,
            bias_arg,
            ws,
            M,
            N,
            K,
            k_per_slice,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            target.stride(0),
            target.stride(1),
            bias_arg.stride(0),
            bias_arg.stride(1),
            *scalars,
            config=config,
            options=MM_DECODE.options(),
            SPLIT=split,
            HAS_BIAS=has_bias,
            INT64=int64,
            INPUT_PRECISION=precision,
        )
        if split:
            _launch_reduce(
                (cdiv(M * N, _REDUCE_BLOCK),),
                ws,
                target,
                bias_arg,
                M,
                N,
                slices,
                target.stride(0),
                target.stride(1),
                bias_arg.stride(0),
                bias_arg.stride(1),
                *scalars,
                options=MM_DECODE.options(),
                BLOCK=_REDUCE_BLOCK,
                HAS_BIAS=has_bias,
                INT64=int64,
            )

    def bench(config: KernelConfig) -> float:
        scratch = torch.empty_like(out)  # never the real output: it may be the bias itself
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    # a row-major and a column-major B (a Linear weight) favour different tiles
    layout = "n" if abs(b.stride(1)) <= abs(b.stride(0)) else "k"
    key = (str(a.dtype), layout, _bucket(M), _bucket(N), _bucket(K))
    run(MM_DECODE.choose(key, bench, fits_shared_memory(a.dtype)), out)


def launch_gemv(
    x: torch.Tensor,
    stride_x: int,
    w: torch.Tensor,
    stride_wk: int,
    stride_wn: int,
    out: torch.Tensor,
    stride_y: int,
    bias: torch.Tensor | None,
    stride_bias: int,
    K: int,
    N: int,
    alpha: Any,
    beta: Any,
) -> None:
    """out = alpha * (x @ w) + beta * bias for a K-vector ``x``, a (K, N) matrix ``w`` and
    N-vectors ``out`` and ``bias``, each given as a tensor whose data starts the operand and
    the operand's strides through it (no views are made: the host path stays short); a
    broadcast bias has stride 0."""
    if N == 0:
        return
    fp64 = x.dtype == torch.float64
    tensors = (x, w, out) if bias is None else (x, w, out, bias)
    bias_arg = out if bias is None else bias  # a placeholder pointer when there is no bias
    constexprs = {
        "HAS_BIAS": bias is not None,
        "ACC_FP64": fp64,
        "INT64": _needs_int64(*tensors),
    }
    scalars = (_scalar_arg(alpha, fp64), _scalar_arg(beta, fp64))

    def run(config: KernelConfig, target: torch.Tensor) -> None:
        _launch_gemv(
            (cdiv(N, config.params["BLOCK_N"]),),
            x,
            w,
            target,
            bias_arg,
            N,
            K,
            stride_x,
            stride_wk,
            stride_wn,
            stride_y,
            stride_bias,
            *scalars,
            config=config,
            options=GEMV.options(),
            **constexprs,
        )

    def bench(config: KernelConfig) -> float:
        # never the real output (it may be the bias itself); its strides, which run() uses
        scratch = torch.empty_strided(out.shape, out.stride(), dtype=out.dtype, device=out.device)
        return float(triton.testing.do_bench(lambda: run(config, scratch)))

    # K-contiguous (a Linear weight, mv of a row-major matrix) and N-contiguous weights
    # favour different tiles
    layout = "n" if abs(stride_wn) <= abs(stride_wk) else "k"
    key = (str(x.dtype), layout, _bucket(N), _bucket(K))
    run(GEMV.choose(key, bench), out)
