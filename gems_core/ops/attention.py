"""scaled_dot_product_attention: flash attention forward, a split-key kernel for decoding,
and the backward in :mod:`.attention_backward`.

    O = softmax(scale * Q K^T + mask) V

Prefill. One program per (BLOCK_M query rows, batch * query head) walks the keys in BLOCK_N
blocks with an online softmax: a running row max ``m`` and denominator ``l`` in fp32, the
output accumulator rescaled by ``exp2(m_old - m_new)`` as the max grows. Scores are base 2:
``scale * log2(e)`` is applied to the fp32 scores in the same multiply-add that subtracts the
row max (one FMA per score, as cheap as pre-scaling Q and without rounding ``scale * Q`` to
16 bits); a negative scale is moved into Q's sign on the host (exact), so the row max of the
scaled scores is the scaled row max. The row's log-sum-exp (base 2) is kept for the
backward, which recomputes the probabilities from it.

The key loop has two parts. The blocks that need no mask, below the causal diagonal for
every row of the program and wholly inside S, run a bare step: loads without key bounds,
no ``-inf`` bookkeeping. The rest, the one or two blocks on a causal program's diagonal and
a last partial block, run the masked step. A user mask is read in every block. Head dims
that are a power of two (at least 16) load without head-dim masks.

Grid order. Programs run along one grid axis, in an order meant for L2. Without causal
masking every program walks all keys: heads one after another, the query blocks of a head
adjacent, so the programs that run together read the same keys and values at about the
same time. With causal masking the block of rows ``[i, i + BLOCK_M)`` walks about ``i``
keys: heads are taken in sections, and in a section the longest blocks of all its heads
start first, the shortest last (longest-processing-time order), so short programs fill the
tail instead of one long one running alone. A section holds about two programs per compute
unit, so its keys and values (``2 * units * BLOCK_M * (D + DV)`` elements: 17 MB in bf16 at
head dim 128 on an H100) stay in L2 while its programs read them.

Grouped-query attention (``enable_gqa``) maps query head ``h`` to key/value head
``h // group`` in the kernels; nothing is repeated in memory. Causal masking is top-left
aligned, as in ATen: query ``i`` attends keys ``j <= i`` for any L and S. A mask is read in
place through its broadcast strides. A row that attends nothing gives zeros (and zero
gradients), as ATen's.

Decoding (L <= 16, not causal: one new token, or a few speculative ones). The prefill grid
would hold one program per query head, too few to fill a chip, each reading its key/value
head again. The decode kernel gives one program all the query rows that share a key/value
head, ``G = H / HKV`` heads times L queries (at most 64 rows per program; more take several
programs), padded to at least 16 rows so the scores are one ``tl.dot`` of
``[rows, D] x [D, BLOCK_N]``, and a contiguous range of keys: each key and value byte is
read once per group. The keys are split over programs so the grid fills the chip: about
two waves of programs over the compute units, the split count rounded to the one that
leaves the last wave fullest, and each split at least two BLOCK_N blocks long
(:func:`decode_splits`). With one split the kernel writes the output itself; otherwise each
program writes its rows' normalized partial output and log-sum-exp, and a second kernel
merges the splits: ``O = sum_s w_s O_s / sum_s w_s`` with ``w_s = exp2(lse_s - max lse)``.

Configs. Three tunables: "attention" (the prefill kernel: BLOCK_M, BLOCK_N, warps,
stages), "attention_decode" (BLOCK_N, warps, stages; the split count follows from the
grid) and "attention_backward" (its own BLOCK_M and BLOCK_N: the backward holds more tiles
than the forward, and Hopper's large forward tiles do not suit it). Each is autotuned per
shape bucket on a device; a config whose tiles do not fit the chip's shared memory for the
call's dtype, head dims and mask is not tried (:func:`_fits`, :func:`_fits_backward`).

``scaled_dot_product_attention`` is a composite in ATen, so it is registered on the Autograd
key and brings its own backward. Dropout, fp64, ranks other than 3 and 4, broadcast batch
dims and a mask that needs a gradient are left to ATen.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from .. import runtime
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .attention_backward import (
    LOG2E,
    MASK_ADD,
    MASK_BOOL,
    MASK_NONE,
    launch_backward,
)
from .mm import _input_precision
from .reduction import bench_ms

ATTENTION = Tunable(
    "attention",
    params=("BLOCK_M", "BLOCK_N"),
    defaults=[
        KernelConfig({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=2),
        KernelConfig({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=2),
        KernelConfig({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=3),
    ],
    description="attention forward: BLOCK_M query rows per program, keys in BLOCK_N steps; "
    "shared memory ~ (BLOCK_M * D + num_stages * BLOCK_N * (D + DV)) elements",
)
ATTENTION_BACKWARD = Tunable(
    "attention_backward",
    params=("BLOCK_M", "BLOCK_N"),
    defaults=[
        KernelConfig({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=2),
        KernelConfig({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=2),
        KernelConfig({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=3),
    ],
    description="attention backward: the dK/dV programs own BLOCK_N keys and walk the queries "
    "in BLOCK_M steps, the dQ programs own BLOCK_M queries and walk the keys in BLOCK_N steps",
)
ATTENTION_DECODE = Tunable(
    "attention_decode",
    params=("BLOCK_N",),
    defaults=[
        KernelConfig({"BLOCK_N": 64}, num_warps=4, num_stages=2),
        KernelConfig({"BLOCK_N": 32}, num_warps=4, num_stages=2),
    ],
    description="attention of few queries (decoding): one program per key/value head's group "
    "of query rows and split of the keys, walking its keys in BLOCK_N steps; the split count "
    "follows from the grid and the chip's compute units",
)

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_HEAD_DIM = 256
#: query rows per head (L) the decode kernel serves, and rows per decode program at most
_DECODE_MAX_LENGTH = 16
_DECODE_MAX_ROWS = 64
#: decode grids aim at this many waves of programs over the compute units ...
_DECODE_WAVES = 2
#: ... with every split at least this many BLOCK_N blocks long, and this many splits at most
_DECODE_MIN_SPLIT_BLOCKS = 2
_DECODE_MAX_SPLITS = 256
#: splits the combine kernel merges per step
_COMBINE_CHUNK = 16
#: a causal section of heads holds about this many programs per compute unit
_CAUSAL_SECTION_PROGRAMS = 2
_dropout_noted = False


@triton.jit
def _load_keys(ptrs, cols, end, dims, width, EDGE: tl.constexpr, EXACT: tl.constexpr):
    """A (BLOCK_N, dims) tile of keys or values; rows past ``end`` (only checked on an EDGE
    block) and dims past ``width`` (unless the head dim is EXACT, a power of two) read 0."""
    if EDGE:
        if EXACT:
            tile = tl.load(ptrs, mask=cols[:, None] < end, other=0.0)
        else:
            tile = tl.load(ptrs, mask=(cols[:, None] < end) & (dims[None, :] < width), other=0.0)
    elif EXACT:
        tile = tl.load(ptrs)
    else:
        tile = tl.load(ptrs, mask=dims[None, :] < width, other=0.0)
    return tile


@triton.jit
def _attend_block(
    acc,  # (R, BLOCK_DV) fp32: sum of exp2(s - m) * v so far
    m_i,  # (R,) fp32: running max of the base-2 scores (-inf before any key)
    l_i,  # (R,) fp32: running sum of exp2(s - m)
    q,  # (R, BLOCK_D)
    k_base,  # this program's key head
    v_base,
    mask_base,  # this program's batch in the mask; unused unless MASK
    row_pos,  # (R,) query positions, for the causal test
    row_mask,  # (R,) offsets of each row in the mask (head and query position)
    row_ok,  # (R,) rows that exist
    start_n,
    end,  # keys >= end are not attended
    sk_s, sk_d, sv_s, sv_d, sm_s,
    D,
    DV,
    qk_scale,  # |scale| * log2(e)
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    EDGE: tl.constexpr,  # the block may reach past ``end`` or the causal diagonal
    CAUSAL: tl.constexpr,
    MASK: tl.constexpr,
    HEAD_EXACT: tl.constexpr,  # D == BLOCK_D and DV == BLOCK_DV: no head-dim masks
    INPUT_PRECISION: tl.constexpr,
):
    """One BLOCK_N step of the online softmax over keys ``[start_n, start_n + BLOCK_N)``."""
    cols = start_n + tl.arange(0, BLOCK_N)
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    k = _load_keys(k_base + cols[:, None] * sk_s + d[None, :] * sk_d, cols, end, d, D, EDGE, HEAD_EXACT)
    qk = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION)
    if EDGE or MASK != 0:
        # base-2 scores, -inf where the key is not attended (past ``end``, above the
        # top-left causal diagonal, a False in a bool mask); a row may attend nothing yet
        valid = row_ok[:, None] & (cols[None, :] < end)
        if CAUSAL:
            valid = valid & (cols[None, :] <= row_pos[:, None])
        s = qk * qk_scale
        if MASK != 0:
            m_ptrs = mask_base + row_mask[:, None] + cols[None, :] * sm_s
            if MASK == 1:
                valid = valid & (tl.load(m_ptrs, mask=valid, other=0) != 0)
            else:
                s += tl.load(m_ptrs, mask=valid, other=0.0).to(tl.float32) * 1.4426950408889634
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
    else:
        # every score is attended and finite: the scale folds into the max subtraction
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = _load_keys(v_base + cols[:, None] * sv_s + dv[None, :] * sv_d, cols, end, dv, DV, EDGE, HEAD_EXACT)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=INPUT_PRECISION)
    return acc, m_new, l_i


@triton.jit
def _attention_forward_kernel(
    q_ptr,  # (B, H, L, D)
    k_ptr,  # (B, HKV, S, D)
    v_ptr,  # (B, HKV, S, DV)
    mask_ptr,  # (B, H, L, S) broadcast view; unused unless MASK
    o_ptr,  # (B, H, L, DV)
    lse_ptr,  # (B * H, L) fp32 contiguous: base-2 log-sum-exp of each row's scores
    sq_b, sq_h, sq_l, sq_d,
    sk_b, sk_h, sk_s, sk_d,
    sv_b, sv_h, sv_s, sv_d,
    sm_b, sm_h, sm_l, sm_s,
    so_b, so_h, so_l, so_d,
    H,
    GROUP,  # query heads per key/value head
    L,
    S,
    D,
    DV,
    qk_scale,  # |scale| * log2(e)
    SECTION,  # heads per section of the grid order (1: head-major)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    CAUSAL: tl.constexpr,
    MASK: tl.constexpr,
    HEAD_EXACT: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    # the grid order (module docstring): sections of SECTION heads; in a section, block
    # index major and head minor, the longest causal blocks first
    pid = tl.program_id(0)
    blocks_m = tl.cdiv(L, BLOCK_M)
    heads = tl.num_programs(0) // blocks_m
    section = pid // (SECTION * blocks_m)
    first_head = section * SECTION
    in_section = tl.minimum(SECTION, heads - first_head)
    index = pid - first_head * blocks_m
    bh = first_head + index % in_section
    block_m = index // in_section
    if CAUSAL:
        block_m = blocks_m - 1 - block_m
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    hk = h // GROUP
    start_m = block_m * BLOCK_M
    rows = start_m + tl.arange(0, BLOCK_M)
    row_ok = rows < L
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    q = tl.load(q_ptr + b * sq_b + h * sq_h + rows[:, None] * sq_l + d[None, :] * sq_d,
                mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
    k_base = k_ptr + b * sk_b + hk * sk_h
    v_base = v_ptr + b * sv_b + hk * sv_h
    mask_base = mask_ptr + b * sm_b + h * sm_h
    row_mask = rows * sm_l
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    whole = (S // BLOCK_N) * BLOCK_N  # keys in whole blocks
    if CAUSAL:
        # blocks before this program's first row are attended by all its rows; keys past
        # its last row by none
        bare_end = tl.minimum((start_m // BLOCK_N) * BLOCK_N, whole)
        end = tl.minimum(S, start_m + BLOCK_M)
    else:
        bare_end = whole
        end = S
    for start_n in range(0, bare_end, BLOCK_N):
        acc, m_i, l_i = _attend_block(
            acc, m_i, l_i, q, k_base, v_base, mask_base, rows, row_mask, row_ok, start_n, S,
            sk_s, sk_d, sv_s, sv_d, sm_s, D, DV, qk_scale,
            BLOCK_N, BLOCK_D, BLOCK_DV, False, False, MASK, HEAD_EXACT, INPUT_PRECISION,
        )
    for start_n in range(bare_end, end, BLOCK_N):
        acc, m_i, l_i = _attend_block(
            acc, m_i, l_i, q, k_base, v_base, mask_base, rows, row_mask, row_ok, start_n, S,
            sk_s, sk_d, sv_s, sv_d, sm_s, D, DV, qk_scale,
            BLOCK_N, BLOCK_D, BLOCK_DV, True, CAUSAL, MASK, HEAD_EXACT, INPUT_PRECISION,
        )
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    tl.store(o_ptr + b * so_b + h * so_h + rows[:, None] * so_l + dv[None, :] * so_d,
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & (dv[None, :] < DV))
    # +inf for a row that attends nothing: the backward's exp2(s - lse) is then 0
    tl.store(lse_ptr + bh * L + rows, tl.where(empty, float("inf"), m_i + tl.log2(l_i)), mask=row_ok)


@triton.jit
def _attention_decode_kernel(
    q_ptr,  # (B, H, L, D)
    k_ptr,  # (B, HKV, S, D)
    v_ptr,  # (B, HKV, S, DV)
    mask_ptr,  # (B, H, L, S) broadcast view; unused unless MASK
    o_ptr,  # (B, H, L, DV): written when there is one split
    lse_ptr,  # (B * H * L,) fp32: written when there is one split
    part_o_ptr,  # (B * H * L, splits, BLOCK_DV) fp32: each split's normalized output
    part_lse_ptr,  # (B * H * L, splits) fp32: each split's base-2 log-sum-exp
    sq_b, sq_h, sq_l, sq_d,
    sk_b, sk_h, sk_s, sk_d,
    sv_b, sv_h, sv_s, sv_d,
    sm_b, sm_h, sm_l, sm_s,
    so_b, so_h, so_l, so_d,
    HKV,
    GROUP,
    L,
    S,
    D,
    DV,
    keys_per_split,  # a multiple of BLOCK_N
    qk_scale,  # |scale| * log2(e)
    BLOCK_R: tl.constexpr,  # query rows per program: (head in the group, query) pairs
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    MASK: tl.constexpr,
    HEAD_EXACT: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    # programs: (batch * key/value head * row block, split); row r of a group is query
    # r % L of head r // L in it, so a group's rows are its heads' rows in (H, L) order
    pid = tl.program_id(0)
    split = tl.program_id(1)
    splits = tl.num_programs(1)
    group_rows = GROUP * L
    row_blocks = tl.cdiv(group_rows, BLOCK_R)
    bhk = pid // row_blocks
    b = (bhk // HKV).to(tl.int64)
    hk = (bhk % HKV).to(tl.int64)
    r = (pid % row_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = r < group_rows
    query = r % L
    h = hk * GROUP + r // L
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    q = tl.load(q_ptr + b * sq_b + h[:, None] * sq_h + query[:, None] * sq_l + d[None, :] * sq_d,
                mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
    k_base = k_ptr + b * sk_b + hk * sk_h
    v_base = v_ptr + b * sv_b + hk * sv_h
    mask_base = mask_ptr + b * sm_b
    row_mask = h * sm_h + query * sm_l
    m_i = tl.full((BLOCK_R,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_R,), tl.float32)
    acc = tl.zeros((BLOCK_R, BLOCK_DV), tl.float32)
    first = split * keys_per_split
    last = tl.minimum(S, first + keys_per_split)
    whole = first + ((last - first) // BLOCK_N) * BLOCK_N
    for start_n in range(first, whole, BLOCK_N):
        acc, m_i, l_i = _attend_block(
            acc, m_i, l_i, q, k_base, v_base, mask_base, query, row_mask, row_ok, start_n, last,
            sk_s, sk_d, sv_s, sv_d, sm_s, D, DV, qk_scale,
            BLOCK_N, BLOCK_D, BLOCK_DV, False, False, MASK, HEAD_EXACT, INPUT_PRECISION,
        )
    for start_n in range(whole, last, BLOCK_N):
        acc, m_i, l_i = _attend_block(
            acc, m_i, l_i, q, k_base, v_base, mask_base, query, row_mask, row_ok, start_n, last,
            sk_s, sk_d, sv_s, sv_d, sm_s, D, DV, qk_scale,
            BLOCK_N, BLOCK_D, BLOCK_DV, True, False, MASK, HEAD_EXACT, INPUT_PRECISION,
        )
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    row = bhk.to(tl.int64) * group_rows + r  # (b * H + h) * L + query
    if splits == 1:
        tl.store(o_ptr + b * so_b + h[:, None] * so_h + query[:, None] * so_l + dv[None, :] * so_d,
                 out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & (dv[None, :] < DV))
        tl.store(lse_ptr + row, tl.where(empty, float("inf"), m_i + tl.log2(l_i)), mask=row_ok)
    else:
        part = row * splits + split
        tl.store(part_o_ptr + part[:, None] * BLOCK_DV + dv[None, :], out, mask=row_ok[:, None])
        tl.store(part_lse_ptr + part, tl.where(empty, float("-inf"), m_i + tl.log2(l_i)), mask=row_ok)


@triton.jit
def _attention_decode_combine_kernel(
    part_o_ptr,  # (B * H * L, splits, BLOCK_DV) fp32 contiguous
    part_lse_ptr,  # (B * H * L, splits) fp32 contiguous
    o_ptr,  # (B, H, L, DV)
    lse_ptr,  # (B * H * L,) fp32: the whole row's base-2 log-sum-exp
    so_b, so_h, so_l, so_d,
    H,
    L,
    DV,
    splits,
    BLOCK_SPLITS: tl.constexpr,  # >= splits: every split's lse at once, for the max
    CHUNK: tl.constexpr,  # splits merged per step
    BLOCK_DV: tl.constexpr,
):
    # O = sum_s w_s O_s / sum_s w_s with w_s = exp2(lse_s - max lse)
    row = tl.program_id(0).to(tl.int64)
    query = row % L
    b = row // L // H
    h = row // L % H
    base = row * splits
    sp = tl.arange(0, BLOCK_SPLITS)
    lse = tl.load(part_lse_ptr + base + sp, mask=sp < splits, other=float("-inf"))
    top = tl.max(lse, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    total = tl.sum(tl.exp2(lse - top), 0)
    dv = tl.arange(0, BLOCK_DV)
    acc = tl.zeros((BLOCK_DV,), tl.float32)
    for start in range(0, splits, CHUNK):
        chunk = start + tl.arange(0, CHUNK)
        w = tl.exp2(tl.load(part_lse_ptr + base + chunk, mask=chunk < splits, other=float("-inf")) - top)
        parts = tl.load(part_o_ptr + (base + chunk[:, None]) * BLOCK_DV + dv[None, :],
                        mask=chunk[:, None] < splits, other=0.0)
        acc += tl.sum(parts * w[:, None], 0)
    out = acc / tl.where(total == 0.0, 1.0, total)
    tl.store(o_ptr + b * so_b + h * so_h + query * so_l + dv * so_d, out.to(o_ptr.dtype.element_ty), mask=dv < DV)
    tl.store(lse_ptr + row, tl.where(total == 0.0, float("inf"), top + tl.log2(total)))


_forward = LaunchCache(_attention_forward_kernel, name="attention")
_decode = LaunchCache(_attention_decode_kernel, name="attention_decode")
_combine = LaunchCache(_attention_decode_combine_kernel, name="attention_decode_combine")


def _head_blocks(q: torch.Tensor, v: torch.Tensor) -> dict[str, Any]:
    # at least 16: the smallest K (and N) of tl.dot on most chips
    return {
        "BLOCK_D": max(16, next_power_of_2(q.shape[-1])),
        "BLOCK_DV": max(16, next_power_of_2(v.shape[-1])),
        "INPUT_PRECISION": _input_precision(q.dtype),
    }


def _bucket(n: int) -> int:
    return min(next_power_of_2(n), 16384)


def _fits(dtype: torch.dtype, rows: int | None, blocks: dict[str, Any], masked: bool) -> Callable[[KernelConfig], bool]:
    """Whether a config's tiles fit the chip's shared memory, ``rows`` being the Q tile's
    rows (None: the config's BLOCK_M). Triton's NVIDIA pipeliner keeps the Q tile and
    ``num_stages`` buffers of a K and a V tile there; with a mask, add a score tile per
    buffer (the pipelined mask loads, the masked scores' layout change), with fp32 inputs
    one fp32 score tile (a layout change). Measured by the compile check on sm_90: exact
    for 16-bit inputs without a mask, above it otherwise. AMD's stream pipeliner keeps
    ``num_stages - 1`` K/V buffers and the probabilities P in LDS, Q in registers (exact
    on gfx942 for the core's default configs)."""
    size, block_d, block_dv = dtype.itemsize, blocks["BLOCK_D"], blocks["BLOCK_DV"]

    def admit(config: KernelConfig) -> bool:  # called only when a config is chosen
        rt = runtime.current()
        block_n, stages = config.params["BLOCK_N"], config.num_stages
        scores = (rows if rows is not None else config.params["BLOCK_M"]) * block_n
        if rt.selection.execution.triton_backend == "hip":
            buffers = max(1, stages - 1)
            tiles = (buffers * block_n * (block_d + block_dv) + scores) * size
        else:
            buffers = max(1, stages)
            tiles = (scores // block_n * block_d + buffers * block_n * (block_d + block_dv)) * size
            tiles += scores * 4 if size == 4 else 0
        tiles += buffers * scores * size if masked else 0
        return tiles <= rt.limits.shared_memory_per_block

    return admit


def _fits_backward(dtype: torch.dtype, blocks: dict[str, Any], masked: bool) -> Callable[[KernelConfig], bool]:
    """:func:`_fits` for the backward's two kernels. On NVIDIA the dQ kernel keeps its Q and
    dO tiles and ``num_stages`` K/V buffers, the dK/dV kernel up to ``num_stages`` buffers of
    its Q, O and dO tiles (the compile check on sm_80 and sm_90: exact for dQ in 16 bits,
    above both otherwise); on AMD both fit where the forward's tiles do."""
    size, block_d, block_dv = dtype.itemsize, blocks["BLOCK_D"], blocks["BLOCK_DV"]

    def admit(config: KernelConfig) -> bool:
        rt = runtime.current()
        block_m, block_n, stages = config.params["BLOCK_M"], config.params["BLOCK_N"], config.num_stages
        if rt.selection.execution.triton_backend == "hip":
            buffers = max(1, stages - 1)
            tiles = buffers * block_n * (block_d + block_dv) + block_m * block_n
        else:
            buffers = max(1, stages)
            dq = (block_m + buffers * block_n) * (block_d + block_dv)
            tiles = max(dq, buffers * block_m * (block_d + 2 * block_dv))
        tiles += buffers * block_m * block_n if masked else 0
        return tiles * size <= rt.limits.shared_memory_per_block

    return admit


def _causal_section(heads: int, blocks_m: int, units: int) -> int:
    """Heads per section of a causal grid: about _CAUSAL_SECTION_PROGRAMS programs per
    compute unit (module docstring)."""
    return max(1, min(heads, cdiv(_CAUSAL_SECTION_PROGRAMS * units, blocks_m)))


@functools.lru_cache(maxsize=4096)
def decode_splits(programs: int, keys: int, block_n: int, units: int) -> tuple[int, int]:
    """(splits, keys per split) of a decode grid of ``programs`` programs per split over
    ``units`` compute units: about _DECODE_WAVES waves of programs, the split count rounded
    down or up to whichever leaves the last wave fuller, at most one split per
    _DECODE_MIN_SPLIT_BLOCKS blocks of keys. One split where the programs alone make the
    waves. Splits cover whole BLOCK_N blocks; none is empty."""
    blocks = cdiv(keys, block_n)
    ideal = _DECODE_WAVES * units / programs
    if ideal < 2:
        splits = 1
    else:
        def fill(n: int) -> float:  # share of the last wave's slots that hold a program
            waves = programs * n / units
            return waves / math.ceil(waves)

        low = int(ideal)
        splits = low if fill(low) >= fill(low + 1) else low + 1
    splits = max(1, min(splits, blocks // _DECODE_MIN_SPLIT_BLOCKS, _DECODE_MAX_SPLITS))
    keys_per_split = cdiv(blocks, splits) * block_n
    return cdiv(keys, keys_per_split), keys_per_split


def _forward_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                    causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of attention over (B, H, L, D) queries; ``mask`` is a (B, H, L, S) view or
    a placeholder when ``mask_kind`` is MASK_NONE."""
    (batch, heads, length, _), (kv_heads, keys), value_dim = q.shape, k.shape[1:3], v.shape[-1]
    # ATen's layout: (B, L, H, DV) memory seen as (B, H, L, DV)
    out = torch.empty((batch, length, heads, value_dim), dtype=q.dtype, device=q.device).transpose(1, 2)
    lse = torch.empty((batch * heads, length), dtype=torch.float32, device=q.device)
    blocks = _head_blocks(q, v)
    exact = blocks["BLOCK_D"] == q.shape[-1] and blocks["BLOCK_DV"] == value_dim
    if scale < 0:  # the kernels take |scale|: the row max of the scaled scores is then the scaled max
        q = q.neg()
    qk_scale = abs(scale) * LOG2E
    units = runtime.compute_units(q.device.type, q.device.index)
    if length <= _DECODE_MAX_LENGTH and not causal:
        _decode_launch(q, k, v, mask, mask_kind, qk_scale, out, lse, {**blocks, "HEAD_EXACT": exact}, units)
        return out, lse
    args = (*q.stride(), *k.stride(), *v.stride(), *mask.stride()[:4])
    tail = (heads, heads // kv_heads, length, keys, q.shape[-1], value_dim, qk_scale)

    def run(config: KernelConfig, target: torch.Tensor = out) -> None:
        blocks_m = cdiv(length, config.params["BLOCK_M"])
        section = _causal_section(batch * heads, blocks_m, units) if causal else 1
        _forward((blocks_m * batch * heads,), q, k, v, mask, target, lse, *args, *target.stride(), *tail, section,
                 config=config, options=ATTENTION.options(), CAUSAL=causal, MASK=mask_kind, HEAD_EXACT=exact, **blocks)

    key = ("forward", str(q.dtype), _bucket(length), _bucket(keys), blocks["BLOCK_D"], blocks["BLOCK_DV"], causal,
           mask_kind)
    config = ATTENTION.choose(key, lambda c: bench_ms(lambda: run(c, torch.empty_like(out))),
                              _fits(q.dtype, None, blocks, mask_kind != MASK_NONE))
    run(config)
    return out, lse


def _decode_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                   qk_scale: float, out: torch.Tensor, lse: torch.Tensor, blocks: dict[str, Any],
                   units: int) -> None:
    """The decode path (module docstring): programs over (batch, key/value head, block of
    the group's query rows) and key splits, then one combining program per query row when
    there are several splits."""
    (batch, heads, length, head_dim), (kv_heads, keys), value_dim = q.shape, k.shape[1:3], v.shape[-1]
    group_rows = heads // kv_heads * length
    block_r = max(16, next_power_of_2(min(group_rows, _DECODE_MAX_ROWS)))
    programs = batch * kv_heads * cdiv(group_rows, block_r)
    rows = batch * heads * length
    block_dv = blocks["BLOCK_DV"]
    strides = (*q.stride(), *k.stride(), *v.stride(), *mask.stride()[:4])
    tail = (kv_heads, heads // kv_heads, length, keys, head_dim, value_dim)
    options = ATTENTION_DECODE.options()

    def run(config: KernelConfig, target: torch.Tensor, target_lse: torch.Tensor) -> None:
        splits, keys_per_split = decode_splits(programs, keys, config.params["BLOCK_N"], units)
        if splits == 1:  # the kernel writes the output: the partial buffers are placeholders
            part_o = part_lse = target_lse
        else:
            part_o = torch.empty((rows, splits, block_dv), dtype=torch.float32, device=q.device)
            part_lse = torch.empty((rows, splits), dtype=torch.float32, device=q.device)
        _decode((programs, splits), q, k, v, mask, target, target_lse, part_o, part_lse, *strides,
                *target.stride(), *tail, keys_per_split, qk_scale, config=config, options=options,
                BLOCK_R=block_r, MASK=mask_kind, **blocks)
        if splits > 1:
            block_splits = next_power_of_2(splits)
            _combine((rows,), part_o, part_lse, target, target_lse, *target.stride(), heads, length, value_dim,
                     splits, options=options, BLOCK_SPLITS=block_splits, CHUNK=min(block_splits, _COMBINE_CHUNK),
                     BLOCK_DV=block_dv)

    def bench(config: KernelConfig) -> float:
        scratch, scratch_lse = torch.empty_like(out), torch.empty_like(lse)
        return bench_ms(lambda: run(config, scratch, scratch_lse))

    key = ("decode", str(q.dtype), _bucket(keys), _bucket(programs), block_r, blocks["BLOCK_D"], block_dv, mask_kind)
    run(ATTENTION_DECODE.choose(key, bench, _fits(q.dtype, block_r, blocks, mask_kind != MASK_NONE)), out, lse)


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                mask_kind: int, causal: bool, scale: float) -> torch.Tensor:
        out, lse = _forward_launch(q, k, v, mask, mask_kind, causal, scale)
        ctx.save_for_backward(q, k, v, mask, out, lse)
        ctx.settings = (mask_kind, causal, scale)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        q, k, v, mask, out, lse = ctx.saved_tensors
        mask_kind, causal, scale = ctx.settings
        blocks = _head_blocks(q, v)
        options = ATTENTION_BACKWARD.options()

        def run(config: KernelConfig) -> tuple[torch.Tensor, ...]:
            return launch_backward(q, k, v, mask, out, grad, lse, scale, causal, mask_kind, config, blocks, options)

        key = ("backward", str(q.dtype), _bucket(q.shape[2]), _bucket(k.shape[2]), blocks["BLOCK_D"],
               blocks["BLOCK_DV"], mask_kind)
        admit = _fits_backward(q.dtype, blocks, mask_kind != MASK_NONE)
        dq, dk, dv = run(ATTENTION_BACKWARD.choose(key, lambda config: bench_ms(lambda: run(config)), admit))
        return dq, dk, dv, None, None, None, None


def _note_dropout() -> None:
    global _dropout_noted
    if not _dropout_noted:
        _dropout_noted = True
        warnings.warn("gems: scaled_dot_product_attention with dropout_p > 0 runs on ATen "
                      "(gems has no dropout in its attention kernel)", RuntimeWarning, stacklevel=3)


def _served(q: Any, k: Any, v: Any, mask: Any, enable_gqa: bool) -> bool:
    """Inputs the kernels serve; anything else (including every invalid call) is ATen's."""
    tensors = (q, k, v) if mask is None else (q, k, v, mask)
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return False
    if q.dim() not in (3, 4) or k.dim() != q.dim() or v.dim() != q.dim() or q.dtype not in _DTYPES:
        return False
    if k.dtype != q.dtype or v.dtype != q.dtype or any(t.device != q.device for t in tensors):
        return False
    if q.shape[0] != k.shape[0] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        return False
    if q.shape[-2] == 0 or k.shape[-2] == 0 or q.shape[0] == 0 or min(q.shape[-1], v.shape[-1]) == 0:
        return False
    if max(q.shape[-1], v.shape[-1]) > _MAX_HEAD_DIM:
        return False
    if q.dim() == 4:
        heads, kv_heads = q.shape[1], k.shape[1]
        if kv_heads == 0 or heads % kv_heads or (heads != kv_heads and not enable_gqa):
            return False
    if mask is not None:
        if mask.dtype not in (torch.bool, q.dtype) or mask.requires_grad:
            return False
        target = (*q.shape[:-1], k.shape[-2])
        try:
            if not 2 <= mask.dim() <= q.dim() or torch.broadcast_shapes(mask.shape, target) != target:
                return False
        except RuntimeError:
            return False
    return True


@aten_op("scaled_dot_product_attention", autograd=True)
def scaled_dot_product_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """softmax(scale * query @ key^T + mask) @ value over (B, H, L, E) queries (or (B, L, E))
    and (B, HKV, S, E) keys; ``attn_mask`` is bool (True attends) or additive, broadcast to
    (B, H, L, S); ``is_causal`` is top-left aligned; ``scale`` defaults to 1/sqrt(E)."""
    if dropout_p > 0:
        _note_dropout()
        return NotImplemented
    if (attn_mask is not None and is_causal) or not _served(query, key, value, attn_mask, enable_gqa):
        return NotImplemented
    q, k, v = (t.unsqueeze(1) if t.dim() == 3 else t for t in (query, key, value))
    full = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    if attn_mask is None:
        mask, mask_kind = q, MASK_NONE  # a placeholder the kernels never read
    else:
        mask = attn_mask.view(torch.uint8) if attn_mask.dtype == torch.bool else attn_mask
        mask = mask.expand(query.shape[:-1] + (k.shape[2],))
        mask = mask.unsqueeze(1) if query.dim() == 3 else mask
        mask = mask.expand(full)
        mask_kind = MASK_BOOL if attn_mask.dtype == torch.bool else MASK_ADD
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                                    or (mask_kind == MASK_ADD and mask.requires_grad)):
        out = _Attention.apply(q, k, v, mask, mask_kind, bool(is_causal), scale)
    else:  # nothing to differentiate: no autograd node (its creation costs more than a launch)
        out = _forward_launch(q, k, v, mask, mask_kind, bool(is_causal), scale)[0]
    return out.squeeze(1) if query.dim() == 3 else out
