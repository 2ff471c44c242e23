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

A backend may serve the prefill path itself: a call without a mask is first offered to its
``attention_forward`` variant (:mod:`gems_core.variants`; the NVIDIA backend has a
warp-specialized Hopper kernel there), and the kernel here serves whatever it declines.

Decoding (L <= 16, not causal: one new token, or a few speculative ones). The prefill grid
would hold one program per query head, too few to fill a chip, each reading its key/value
head again. The decode kernel gives one program all the query rows that share a key/value
head, ``G = H / HKV`` heads times L queries (at most 64 rows per program; more take several
programs), padded to at least 16 rows (or a config's ``ROWS``: 64 makes both products wgmma
on Hopper) so the scores are one ``tl.dot`` of ``[rows, D] x [D, BLOCK_N]``, and a
contiguous range of keys: each key and value byte is read once per group. Where the key
count is a multiple of BLOCK_N (``EVEN_KEYS``) the kernel has no masked tail step: a second
loop is a second software pipeline, paid even when it runs no iteration. The keys are split
over programs so that the grid fills the chip once: a compute unit holds as many decode
programs as its shared memory and registers allow (:func:`decode_resident`), and the split
count is the fewest that fills those slots about as well as any (:func:`decode_splits`);
with enough programs, or keys that are one block, there is one split and the kernel writes
the output itself. Otherwise each program writes its rows' normalized partial output and
log-sum-exp to scratch and the splits are merged,
``O = sum_s w_s O_s / sum_s w_s`` with ``w_s = exp2(lse_s - max lse)``: on NVIDIA (and in
the interpreter) in the same launch, by the last split of each row block to finish (a
counter per program, counted with an acquire-release atomic after a barrier, read back past
L1, reset by that program: :func:`_merge_mode`), elsewhere by a second kernel. The lse is
written only where the backward needs it.

Host path. A decode call that needs no gradient keeps its launches per call signature
(:class:`DecodePlan`): a repeat call allocates its output (and the partials' scratch) and
launches, with no validation, tuning or split logic. A plan declares the key counts its
choices hold for (the same key blocks and tuning bucket: :func:`_same_choices`), so that the
native dispatch layer serves a growing KV cache's new lengths from one recipe.

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

from .. import compat, runtime, settings, variants
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache, keep_resident, recording
from ..plan_cache import Launch, PlanCache, signature
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
    params=("BLOCK_N", "SPLITS", "ROWS"),
    optional=("SPLITS", "ROWS"),
    defaults=[
        KernelConfig({"BLOCK_N": 64}, num_warps=4, num_stages=2),
        KernelConfig({"BLOCK_N": 64}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_N": 32}, num_warps=4, num_stages=3),
        KernelConfig({"BLOCK_N": 32}, num_warps=4, num_stages=2),
    ],
    description="attention of few queries (decoding): one program per key/value head's group "
    "of query rows and split of the keys, walking its keys in BLOCK_N steps; the split count "
    "follows from the programs a compute unit holds (shared memory, warps) so that the grid "
    "fills the chip once, or is SPLITS where a config sets it (1: no split, no merge); ROWS "
    "pads a program's query rows to at least that many (64: the products take Hopper's wgmma)",
)

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_HEAD_DIM = 256
#: query rows per head (L) the decode kernel serves, and rows per decode program at most
_DECODE_MAX_LENGTH = 16
_DECODE_MAX_ROWS = 64
#: attention_decode params chosen on the host (the split count, the rows' padding), not constexprs
_DECODE_HOST_PARAMS = ("SPLITS", "ROWS")
#: decode programs resident per compute unit at most, and warps per unit the kernel's
#: registers allow: :func:`decode_resident`
_DECODE_MAX_RESIDENT = 16
_DECODE_WARPS_PER_UNIT = 20
#: one split where the programs alone fill this share of the resident slots ...
_DECODE_ONE_SPLIT = 0.8
#: ... else the fewest splits whose last wave is within this share of the fullest: :func:`decode_splits`
_DECODE_FILL = 0.85
_DECODE_MAX_SPLITS = 64
#: elements of the merge's (rows, splits, BLOCK_DV) tile a thread holds at most
_MERGE_PER_THREAD = 32
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
    # rescaled, then accumulated by the product itself (no second accumulator to add)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)
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
def _merge_splits(
    part_ptr,  # fp32: (rows, splits, BLOCK_DV) normalized partial outputs, then at lse_offset (rows, splits) lses
    lse_offset,
    o_ptr,  # (B, H, L, DV)
    lse_ptr,  # (B * H * L,) fp32: written when WRITE_LSE
    row0,  # global row (b * H + h) * L + query of the group's row 0 (int64)
    first,  # the group row this block starts at
    group_rows,
    splits,
    b,
    hk,
    GROUP,
    L,
    so_b, so_h, so_l, so_d,
    DV,
    BLOCK_G: tl.constexpr,  # rows merged: a power of two >= the block's rows
    BLOCK_SPLITS: tl.constexpr,  # next power of two >= splits
    CHUNK: tl.constexpr,  # splits merged per step (BLOCK_SPLITS: all at once)
    BLOCK_DV: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    LOAD_CACHE: tl.constexpr,  # ".cg" (past L1) where other programs of this launch wrote the partials
):
    """O = sum_s w_s O_s / sum_s w_s with w_s = exp2(lse_s - max lse), for BLOCK_G rows of
    one group at once: every split's lse of those rows in one load, then their partial
    outputs as one (rows, CHUNK, BLOCK_DV) tile per step."""
    r = first + tl.arange(0, BLOCK_G)
    ok = r < group_rows
    row = row0 + r
    sp = tl.arange(0, BLOCK_SPLITS)
    lse_base = part_ptr + lse_offset
    lse = tl.load(lse_base + row[:, None] * splits + sp[None, :], mask=ok[:, None] & (sp[None, :] < splits),
                  other=float("-inf"), cache_modifier=LOAD_CACHE)
    top = tl.max(lse, 1)
    top = tl.where(top == float("-inf"), 0.0, top)  # a row that attends nothing: all weights 0
    weights = tl.exp2(lse - top[:, None])
    total = tl.sum(weights, 1)
    dv = tl.arange(0, BLOCK_DV)
    if CHUNK == BLOCK_SPLITS:
        live = ok[:, None] & (sp[None, :] < splits)
        parts = tl.load(part_ptr + (row[:, None, None] * splits + sp[None, :, None]) * BLOCK_DV + dv[None, None, :],
                        mask=live[:, :, None], other=0.0, cache_modifier=LOAD_CACHE)
        acc = tl.sum(parts * weights[:, :, None], 1)
    else:
        # CHUNK splits a step; each step's loads are issued before the previous chunk is
        # reduced, so that two round trips are in flight (the last step's are all masked)
        acc = tl.zeros((BLOCK_G, BLOCK_DV), tl.float32)
        chunk = tl.arange(0, CHUNK)
        live = ok[:, None] & (chunk[None, :] < splits)
        index = row[:, None] * splits + chunk[None, :]
        lse_c = tl.load(lse_base + index, mask=live, other=float("-inf"), cache_modifier=LOAD_CACHE)
        parts = tl.load(part_ptr + index[:, :, None] * BLOCK_DV + dv[None, None, :], mask=live[:, :, None],
                        other=0.0, cache_modifier=LOAD_CACHE)
        for start in range(CHUNK, splits + CHUNK, CHUNK):
            chunk = start + tl.arange(0, CHUNK)
            live = ok[:, None] & (chunk[None, :] < splits)
            index = row[:, None] * splits + chunk[None, :]
            lse_next = tl.load(lse_base + index, mask=live, other=float("-inf"), cache_modifier=LOAD_CACHE)
            parts_next = tl.load(part_ptr + index[:, :, None] * BLOCK_DV + dv[None, None, :], mask=live[:, :, None],
                                 other=0.0, cache_modifier=LOAD_CACHE)
            acc += tl.sum(parts * tl.exp2(lse_c - top[:, None])[:, :, None], 1)
            lse_c, parts = lse_next, parts_next
    out = acc / tl.where(total == 0.0, 1.0, total)[:, None]
    h = hk * GROUP + r // L
    query = r % L
    tl.store(o_ptr + b * so_b + h[:, None] * so_h + query[:, None] * so_l + dv[None, :] * so_d,
             out.to(o_ptr.dtype.element_ty), mask=ok[:, None] & (dv[None, :] < DV))
    if WRITE_LSE:
        tl.store(lse_ptr + row, tl.where(total == 0.0, float("inf"), top + tl.log2(total)), mask=ok)


@triton.jit
def _decode_program(pid, HKV, GROUP, L, BLOCK_R: tl.constexpr):
    """(group rows, batch * key/value head, batch, key/value head, first row) of decode
    program ``pid``: programs run over (batch, key/value head, block of BLOCK_R group rows)."""
    group_rows = GROUP * L
    row_blocks = tl.cdiv(group_rows, BLOCK_R)
    bhk = pid // row_blocks
    return group_rows, bhk, (bhk // HKV).to(tl.int64), (bhk % HKV).to(tl.int64), (pid % row_blocks) * BLOCK_R


@triton.jit
def _attention_decode_kernel(
    q_ptr,  # (B, H, L, D)
    k_ptr,  # (B, HKV, S, D)
    v_ptr,  # (B, HKV, S, DV)
    mask_ptr,  # (B, H, L, S) broadcast view; unused unless MASK
    o_ptr,  # (B, H, L, DV): written by the program (MERGE 0) or the merging one (MERGE 2)
    lse_ptr,  # (B * H * L,) fp32: written alongside the output when WRITE_LSE
    part_ptr,  # fp32 scratch: (B * H * L, splits, BLOCK_DV) partial outputs, then at lse_offset
    #            (B * H * L, splits) their base-2 log-sum-exps; unused with MERGE 0
    count_ptr,  # int32 per program of grid axis 0: splits done so far (MERGE 2), 0 between launches
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
    lse_offset,
    qk_scale,  # |scale| * log2(e)
    BLOCK_R: tl.constexpr,  # query rows per program: (head in the group, query) pairs
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    MASK: tl.constexpr,
    HEAD_EXACT: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    MERGE: tl.constexpr,  # 0: one split, written here; 1: partials for the combine kernel;
    #                       2: partials, merged by the row block's last split to finish
    WRITE_LSE: tl.constexpr,
    BLOCK_G: tl.constexpr,  # the merge's rows (MERGE 2)
    BLOCK_SPLITS: tl.constexpr,  # the merge's splits (MERGE 2)
    CHUNK: tl.constexpr,  # the merge's splits per step (MERGE 2)
    EVEN_KEYS: tl.constexpr,  # S is a multiple of BLOCK_N: every split is whole blocks
):
    # programs: (batch * key/value head * row block, split); row r of a group is query
    # r % L of head r // L in it, so a group's rows are its heads' rows in (H, L) order
    pid = tl.program_id(0)
    split = tl.program_id(1)
    splits = tl.num_programs(1)
    group_rows, bhk, b, hk, first_row = _decode_program(pid, HKV, GROUP, L, BLOCK_R)
    r = first_row + tl.arange(0, BLOCK_R)
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
    if EVEN_KEYS:
        whole = last
    else:
        whole = first + ((last - first) // BLOCK_N) * BLOCK_N
    for start_n in range(first, whole, BLOCK_N):
        acc, m_i, l_i = _attend_block(
            acc, m_i, l_i, q, k_base, v_base, mask_base, query, row_mask, row_ok, start_n, last,
            sk_s, sk_d, sv_s, sv_d, sm_s, D, DV, qk_scale,
            BLOCK_N, BLOCK_D, BLOCK_DV, False, False, MASK, HEAD_EXACT, INPUT_PRECISION,
        )
    if not EVEN_KEYS:  # the last split's partial block, masked; no second pipeline otherwise
        for start_n in range(whole, last, BLOCK_N):
            acc, m_i, l_i = _attend_block(
                acc, m_i, l_i, q, k_base, v_base, mask_base, query, row_mask, row_ok, start_n, last,
                sk_s, sk_d, sv_s, sv_d, sm_s, D, DV, qk_scale,
                BLOCK_N, BLOCK_D, BLOCK_DV, True, False, MASK, HEAD_EXACT, INPUT_PRECISION,
            )
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    row0 = bhk.to(tl.int64) * group_rows
    row = row0 + r  # (b * H + h) * L + query
    if MERGE == 0:
        tl.store(o_ptr + b * so_b + h[:, None] * so_h + query[:, None] * so_l + dv[None, :] * so_d,
                 out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & (dv[None, :] < DV))
        if WRITE_LSE:
            tl.store(lse_ptr + row, tl.where(empty, float("inf"), m_i + tl.log2(l_i)), mask=row_ok)
    else:
        part = row * splits + split
        tl.store(part_ptr + part[:, None] * BLOCK_DV + dv[None, :], out, mask=row_ok[:, None])
        tl.store(part_ptr + lse_offset + part, tl.where(empty, float("-inf"), m_i + tl.log2(l_i)), mask=row_ok)
        if MERGE == 2:
            # every thread's partial stores come before the count (the barrier), the count
            # is a release and, for the program that finishes the row block, an acquire
            tl.debug_barrier()
            done = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel", scope="gpu")
            if done == splits - 1:
                _merge_splits(part_ptr, lse_offset, o_ptr, lse_ptr, row0, first_row, group_rows, splits, b, hk,
                              GROUP, L, so_b, so_h, so_l, so_d, DV, BLOCK_G, BLOCK_SPLITS, CHUNK, BLOCK_DV,
                              WRITE_LSE, ".cg")
                tl.store(count_ptr + pid, 0)  # zero again for the next launch


@triton.jit
def _attention_decode_combine_kernel(
    part_ptr,  # as the decode kernel's
    o_ptr,  # (B, H, L, DV)
    lse_ptr,  # (B * H * L,) fp32: written when WRITE_LSE
    so_b, so_h, so_l, so_d,
    HKV,
    GROUP,
    L,
    DV,
    splits,
    lse_offset,
    BLOCK_R: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_SPLITS: tl.constexpr,
    CHUNK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    # one program per row block of the decode grid, merging its rows' splits
    group_rows, bhk, b, hk, first_row = _decode_program(tl.program_id(0), HKV, GROUP, L, BLOCK_R)
    _merge_splits(part_ptr, lse_offset, o_ptr, lse_ptr, bhk.to(tl.int64) * group_rows, first_row,
                  group_rows, splits, b, hk, GROUP, L, so_b, so_h, so_l, so_d, DV, BLOCK_G, BLOCK_SPLITS, CHUNK,
                  BLOCK_DV, WRITE_LSE, "")


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


def _tile_bytes(dtype: torch.dtype, rows: int | None, blocks: dict[str, Any], masked: bool,
                config: KernelConfig) -> int:
    """Shared memory of a forward or decode config's tiles (:func:`_fits`), ``rows`` being
    the Q tile's rows (None: the config's BLOCK_M)."""
    size, block_d, block_dv = dtype.itemsize, blocks["BLOCK_D"], blocks["BLOCK_DV"]
    block_n, stages = config.params["BLOCK_N"], config.num_stages
    scores = (rows if rows is not None else config.params["BLOCK_M"]) * block_n
    if runtime.current().limits.pipelining == "stream":
        buffers = max(1, stages - 1)
        tiles = (buffers * block_n * (block_d + block_dv) + scores) * size
    else:
        buffers = max(1, stages)
        tiles = (scores // block_n * block_d + buffers * block_n * (block_d + block_dv)) * size
        tiles += scores * 4 if size == 4 else 0
    tiles += buffers * scores * size if masked else 0
    return tiles


def _fits(dtype: torch.dtype, rows: int | None, blocks: dict[str, Any], masked: bool) -> Callable[[KernelConfig], bool]:
    """Whether a config's tiles fit the chip's shared memory, ``rows`` being the Q tile's
    rows (None: the config's BLOCK_M), by the chip's ``Limits.pipelining``. Triton's NVIDIA
    pipeliner ("stages") keeps the Q tile and ``num_stages`` buffers of a K and a V tile
    there; with a mask, add a score tile per buffer (the pipelined mask loads, the masked
    scores' layout change), with fp32 inputs one fp32 score tile (a layout change). Measured
    by the compile check on sm_90: exact for 16-bit inputs without a mask, above it
    otherwise. AMD's stream pipeliner ("stream") keeps ``num_stages - 1`` K/V buffers and
    the probabilities P in LDS, Q in registers (exact on gfx942 for the core's default
    configs)."""

    def admit(config: KernelConfig) -> bool:  # called only when a config is chosen
        padded = rows if rows is None else _decode_rows(rows, config)  # a decode config's ROWS
        tiles = _tile_bytes(dtype, padded, blocks, masked, config)
        return tiles <= runtime.current().limits.shared_memory_per_block

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
        if rt.limits.pipelining == "stream":
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


def _decode_tile_bytes(dtype: torch.dtype, block_r: int, blocks: dict[str, Any], masked: bool,
                       config: KernelConfig) -> int:
    """Shared memory of a decode program, for :func:`decode_resident`. With fewer than 64
    rows the dots are mma.sync (not wgmma), and Triton's pipeliner keeps ``num_stages - 1``
    K and V buffers, plus the Q tile and the probabilities (a layout change): exact for the
    sm_90 compiles of 16-row programs in every dtype checked (bf16, fp16, fp32; BLOCK_N 16
    to 128, 2 to 6 stages). Otherwise as the forward's tiles (:func:`_tile_bytes`)."""
    if block_r >= 64 or runtime.current().limits.pipelining == "stream":
        return _tile_bytes(dtype, block_r, blocks, masked, config)
    size, block_d, block_dv = dtype.itemsize, blocks["BLOCK_D"], blocks["BLOCK_DV"]
    block_n, buffers = config.params["BLOCK_N"], max(1, config.num_stages - 1)
    scores = block_r * block_n
    tiles = (block_r * block_d + buffers * block_n * (block_d + block_dv) + scores) * size
    return tiles + (buffers * scores * size if masked else 0)


def decode_resident(config: KernelConfig, tile_bytes: int, shared_memory: int) -> int:
    """Decode programs of ``config`` one compute unit holds at once: as many as its shared
    memory takes (a unit has about the per-block limit plus 1 KiB, and each program costs
    1 KiB more than its tiles: NVIDIA's reservation), at most _DECODE_WARPS_PER_UNIT warps
    and _DECODE_MAX_RESIDENT programs. (On sm_90 the 4-warp configs use 80-100 registers a
    thread, 5 programs' worth; 1- and 2-warp programs use up to 250, where shared memory
    binds first.)"""
    by_memory = (shared_memory + 1024) // (tile_bytes + 1024)
    by_warps = _DECODE_WARPS_PER_UNIT // max(1, config.num_warps)
    return max(1, min(by_memory, by_warps, _DECODE_MAX_RESIDENT))


@functools.lru_cache(maxsize=4096)
def decode_splits(programs: int, keys: int, block_n: int, slots: int) -> tuple[int, int]:
    """(splits, keys per split) of a decode grid of ``programs`` programs per split on a chip
    that holds ``slots`` such programs at once (compute units x :func:`decode_resident`).

    One split (no partials, no merge) where the programs alone fill _DECODE_ONE_SPLIT of the
    slots or the keys are one block. Otherwise the split counts that whole BLOCK_N blocks
    allow (each split a run of whole blocks, none empty, at most _DECODE_MAX_SPLITS) are
    scored by how full they leave the last wave of programs over the slots, and the fewest
    splits within _DECODE_FILL of the best score is taken: fewer splits mean less to merge,
    a fuller wave keeps more memory traffic in flight."""
    blocks = cdiv(keys, block_n)
    if blocks == 1 or programs >= _DECODE_ONE_SPLIT * slots:
        return 1, blocks * block_n
    fill: dict[int, float] = {}
    for wanted in range(1, min(blocks, _DECODE_MAX_SPLITS) + 1):
        splits = cdiv(blocks, cdiv(blocks, wanted))  # what whole blocks per split give
        if splits not in fill:
            waves = programs * splits / slots
            fill[splits] = waves / math.ceil(waves)
    best = max(fill.values())
    splits = min(n for n, f in fill.items() if f >= _DECODE_FILL * best)
    keys_per_split = cdiv(blocks, splits) * block_n
    return cdiv(keys, keys_per_split), keys_per_split


def _decode_rows(group_rows: int, config: KernelConfig | None = None) -> int:
    """Query rows per decode program: a group's rows padded to a power of two, at least 16
    (the smallest M of ``tl.dot``) or the config's ROWS, at most _DECODE_MAX_ROWS. (ROWS 64
    makes the two products wgmma on Hopper, with the operands read from shared memory: the
    padding rows cost tensor-core time that a memory-bound program has to spare.)"""
    least = max(16, int(config.params.get("ROWS", 16))) if config is not None else 16
    return min(_DECODE_MAX_ROWS, max(least, next_power_of_2(min(group_rows, _DECODE_MAX_ROWS))))


def _merge_mode(splits: int, block_g: int, block_dv: int, num_warps: int, merge: str | None) -> int:
    """The decode kernel's MERGE: 0 for one split; else 2 (the last split of each row block
    merges, no second launch) where the chip allows it (``Limits.fused_merge``: NVIDIA, the
    interpreter) and the merge's tile fits _MERGE_PER_THREAD elements a thread; else 1 (the
    combine kernel). ``merge`` ("fused",
    "kernel"; None: ``GEMS_DECODE_MERGE``, default "auto") overrides the choice. The fused
    merge's counters are resident buffers (:func:`_counts_for`), so the native dispatch
    layer's recipes repeat it too."""
    if splits == 1:
        return 0
    merge = merge or settings.get("GEMS_DECODE_MERGE")
    if merge == "kernel" or block_g * block_dv > _MERGE_PER_THREAD * 32 * num_warps:
        return 1
    if merge == "fused":
        return 2
    return 2 if runtime.current().limits.fused_merge else 1


def _merge_tiles(block_g: int, splits: int, block_dv: int, num_warps: int) -> tuple[int, int]:
    """(BLOCK_SPLITS, CHUNK) of a merge: CHUNK splits a step, the most (a power of two, at
    most _DECODE_MAX_SPLITS) whose (rows, CHUNK, BLOCK_DV) tile keeps within
    _MERGE_PER_THREAD elements a thread; BLOCK_SPLITS = CHUNK (one step) where the splits fit
    one step, else _DECODE_MAX_SPLITS (rounded up to a power of two) in CHUNK steps. Two
    variants per kernel config, whatever the split count: each is a compile."""
    most = next_power_of_2(_DECODE_MAX_SPLITS)
    chunk = most
    while chunk > 1 and block_g * chunk * block_dv > _MERGE_PER_THREAD * 32 * num_warps:
        chunk //= 2
    return (chunk if splits <= chunk else most), chunk


#: the fused merge's counters, one int32 per decode program, by (device, stream): zero
#: between launches (the merging program resets its own), so one buffer serves every call
#: made in order on its stream. Resident (never freed, a larger one added beside it): the
#: native layer's recipes address them, and it keys recipes by stream
_merge_counts: dict[tuple[torch.device, int], torch.Tensor] = {}


def _counts_for(device: torch.device, needed: int) -> torch.Tensor:
    stream = compat.current_stream(device.index or 0) if device.type == "cuda" and not _interpreted() else 0
    counts = _merge_counts.get((device, stream))
    if counts is None or counts.numel() < needed:
        counts = keep_resident(torch.zeros(max(needed, 1024), dtype=torch.int32, device=device))
        _merge_counts[(device, stream)] = counts
    return counts


def _native_recording() -> bool:
    """Whether the native dispatch layer records this call (:mod:`gems_core.native`)."""
    return recording.native is not None


def _interpreted() -> bool:
    rt = runtime.current()
    return rt.interpreter or rt.compile_only


def _unbound(kernel: Any, grid: tuple[int, ...], static: tuple[Any, ...], config: KernelConfig | None,
             options: dict[str, Any], constexprs: dict[str, Any], *tensors: Any) -> None:
    kernel(grid, *tensors, *static, config=config, options=options, **constexprs)


def _bind(kernel: Any, grid: tuple[int, ...], leading: int, static: tuple[Any, ...], device: torch.device,
          config: KernelConfig | None, options: dict[str, Any], **constexprs: Any) -> Any:
    """A launch of ``kernel`` with its tensors (the first ``leading`` arguments) passed per
    call; a kernel that is not a LaunchCache (a test's wrapper that records grids) is
    called as one."""
    if isinstance(kernel, LaunchCache):
        return Launch(kernel, grid, leading, static, device, config=config, options=options, **constexprs)
    return functools.partial(_unbound, kernel, grid, static, config, options, constexprs)


class DecodePlan:
    """The launches of the decode path for one call signature: the decode kernel over
    (programs, splits), then the combine kernel where MERGE is 1. A repeat call allocates
    its output (and the partials' scratch) and launches; nothing is chosen again."""

    __slots__ = ("combine", "config", "counts", "decode", "device", "dtype", "keys_bound", "merge", "scratch",
                 "shape", "splits", "strides", "uint8_mask")

    def __init__(self, decode: Any, combine: Any, merge: int, splits: int, scratch: int, counts: int,
                 device: torch.device, config: KernelConfig) -> None:
        self.decode = decode
        self.combine = combine
        self.merge = merge
        self.splits = splits
        self.scratch = scratch  # fp32 elements of the partials (0: none)
        self.counts = counts  # counters the fused merge needs (0: none)
        self.device = device
        self.config = config
        # the result of a call from the plan (set by :meth:`returning`)
        self.shape: tuple[int, ...] = ()
        self.strides: tuple[int, ...] = ()
        self.dtype = torch.float32
        self.uint8_mask = False
        #: (the decode launch's argument S, least, most): the key counts this plan's choices
        #: hold for, declared to the native layer's length-generic recipes (set by _build_decode)
        self.keys_bound: tuple[int, int, int] | None = None

    @property
    def replayable(self) -> bool:
        return isinstance(self.decode, Launch) and (self.combine is None or isinstance(self.combine, Launch))

    def run(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, out: torch.Tensor,
            lse: torch.Tensor | None) -> None:
        """Attention into ``out`` (and ``lse``, if the plan writes it); any tensors with the
        data pointers of the planned ones will do (3-D or 4-D, a bool mask or its bytes)."""
        part = torch.empty(self.scratch, dtype=torch.float32, device=self.device) if self.scratch else out
        counts = _counts_for(self.device, self.counts) if self.merge == 2 else out
        lse = out if lse is None else lse
        if self.keys_bound is not None and recording.native is not None:
            recording.generic = [(0, *self.keys_bound)]  # gems_core.native.recorder.learn
        self.decode(q, k, v, mask, out, lse, part, counts)
        if self.combine is not None:
            self.combine(part, out, lse)

    def returning(self, result: torch.Tensor, uint8_mask: bool) -> DecodePlan:
        self.shape, self.strides, self.dtype = tuple(result.shape), result.stride(), result.dtype
        self.uint8_mask = uint8_mask
        return self

    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attn_mask: torch.Tensor | None) -> torch.Tensor:
        out = torch.empty_strided(self.shape, self.strides, dtype=self.dtype, device=self.device)
        if attn_mask is None:
            mask = query
        else:
            mask = attn_mask.view(torch.uint8) if self.uint8_mask else attn_mask
        self.run(query, key, value, mask, out, None)
        return out


def _build_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                  qk_scale: float, out: torch.Tensor, blocks: dict[str, Any], units: int, config: KernelConfig,
                  write_lse: bool, splits: int | None = None, merge: str | None = None) -> DecodePlan:
    """The decode launches of ``config`` for these (B, H, L, D) queries into ``out``'s
    layout: the split count from :func:`decode_splits` unless ``splits`` is given (tools) or
    the config sets SPLITS (at most one split per key block either way)."""
    (batch, heads, length, head_dim), (kv_heads, keys), value_dim = q.shape, k.shape[1:3], v.shape[-1]
    group = heads // kv_heads
    group_rows = group * length
    block_r = _decode_rows(group_rows, config)
    programs = batch * kv_heads * cdiv(group_rows, block_r)
    block_n, block_dv = config.params["BLOCK_N"], blocks["BLOCK_DV"]
    key_blocks = cdiv(keys, block_n)
    splits = splits or config.params.get("SPLITS") or None
    if any(name in config.params for name in _DECODE_HOST_PARAMS):  # the kernel is launched without them
        config = KernelConfig({name: value for name, value in config.params.items() if name not in _DECODE_HOST_PARAMS},
                              num_warps=config.num_warps, num_stages=config.num_stages, options=config.options)
    if splits is None:
        tile = _decode_tile_bytes(q.dtype, block_r, blocks, mask_kind != MASK_NONE, config)
        slots = units * decode_resident(config, tile, runtime.current().limits.shared_memory_per_block)
        splits, keys_per_split = decode_splits(programs, keys, block_n, slots)
    else:
        keys_per_split = cdiv(key_blocks, max(1, min(splits, key_blocks, _DECODE_MAX_SPLITS))) * block_n
        splits = cdiv(keys, keys_per_split)
    block_g = min(block_r, max(2, next_power_of_2(group_rows)))
    mode = _merge_mode(splits, block_g, block_dv, config.num_warps, merge)
    rows = batch * heads * length
    lse_offset = rows * splits * block_dv
    options = ATTENTION_DECODE.options()
    static = (*q.stride(), *k.stride(), *v.stride(), *mask.stride()[:4], *out.stride(), kv_heads, group, length,
              keys, head_dim, value_dim, keys_per_split, lse_offset if mode else 0, qk_scale)
    fused = mode == 2
    merge_tiles = _merge_tiles(block_g, splits, block_dv, config.num_warps) if fused else (1, 1)
    decode = _bind(_decode, (programs, splits), 8, static, q.device, config, options, BLOCK_R=block_r, MASK=mask_kind,
                   MERGE=mode, WRITE_LSE=write_lse, BLOCK_G=block_g if fused else 1, BLOCK_SPLITS=merge_tiles[0],
                   CHUNK=merge_tiles[1], EVEN_KEYS=keys % block_n == 0, **blocks)
    combine = None
    if mode == 1:
        warps = max(4, min(16, block_g * block_dv // 1024))
        block_splits, chunk = _merge_tiles(block_g, splits, block_dv, warps)
        combine = _bind(_combine, (programs,), 3, (*out.stride(), kv_heads, group, length, value_dim, splits, lse_offset),
                        q.device, KernelConfig(num_warps=warps, num_stages=1), options, BLOCK_R=block_r,
                        BLOCK_G=block_g, BLOCK_SPLITS=block_splits, CHUNK=chunk, BLOCK_DV=block_dv,
                        WRITE_LSE=write_lse)
    scratch = rows * splits * (block_dv + 1) if mode else 0
    plan = DecodePlan(decode, combine, mode, splits, scratch, programs if fused else 0, q.device, config)
    # the decode kernel's parameter S follows 8 tensors, 20 strides, HKV, GROUP and L
    plan.keys_bound = (8 + 5 * 4 + 3, *_same_choices(keys, block_n))
    return plan


def _same_choices(keys: int, block_n: int) -> tuple[int, int]:
    """The key counts around ``keys`` for which the decode path chooses as for ``keys``: the
    same tuning bucket, key blocks (so split count and keys per split) and EVEN_KEYS."""
    if keys % block_n == 0:
        return keys, keys
    blocks = cdiv(keys, block_n)
    least, most = (blocks - 1) * block_n + 1, blocks * block_n - 1
    bucket = _bucket(keys)
    return max(least, bucket // 2 + 1), min(most, bucket) if bucket < _bucket(2**62) else most


def _decode_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                   qk_scale: float, out: torch.Tensor, lse: torch.Tensor | None, blocks: dict[str, Any],
                   units: int) -> DecodePlan:
    """The decode path (module docstring) with the config tuned for this shape bucket, run
    into ``out`` (and ``lse`` unless None); returns its plan."""
    (batch, heads, length, _), (kv_heads, keys) = q.shape, k.shape[1:3]
    block_r = _decode_rows(heads // kv_heads * length)
    programs = batch * kv_heads * cdiv(heads // kv_heads * length, block_r)
    write_lse = lse is not None

    def build(config: KernelConfig) -> DecodePlan:
        return _build_decode(q, k, v, mask, mask_kind, qk_scale, out, blocks, units, config, write_lse)

    def bench(config: KernelConfig) -> float:
        plan = build(config)
        scratch, scratch_lse = torch.empty_like(out), None if lse is None else torch.empty_like(lse)
        return bench_ms(lambda: plan.run(q, k, v, mask, scratch, scratch_lse))

    key = ("decode", str(q.dtype), _bucket(keys), _bucket(programs), block_r, blocks["BLOCK_D"], blocks["BLOCK_DV"],
           mask_kind)
    plan = build(ATTENTION_DECODE.choose(key, bench, _fits(q.dtype, block_r, blocks, mask_kind != MASK_NONE)))
    plan.run(q, k, v, mask, out, lse)
    return plan


def _prepare(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
             scale: float | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, float]:
    """(q, k, v, mask, mask kind, scale) as the kernels take them: 4-D, the mask a (B, H, L, S)
    view (its bytes if bool) or a placeholder, the scale resolved."""
    q, k, v = (t.unsqueeze(1) if t.dim() == 3 else t for t in (query, key, value))
    if attn_mask is None:
        mask, mask_kind = q, MASK_NONE  # a placeholder the kernels never read
    else:
        mask = attn_mask.view(torch.uint8) if attn_mask.dtype == torch.bool else attn_mask
        mask = mask.expand(query.shape[:-1] + (k.shape[2],))
        mask = mask.unsqueeze(1) if query.dim() == 3 else mask
        mask = mask.expand((q.shape[0], q.shape[1], q.shape[2], k.shape[2]))
        mask_kind = MASK_BOOL if attn_mask.dtype == torch.bool else MASK_ADD
    return q, k, v, mask, mask_kind, 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)


def decode_plan(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
                scale: float | None = None, *, config: KernelConfig | None = None, splits: int | None = None,
                merge: str | None = None) -> DecodePlan:
    """The decode path's plan for these inputs (few queries, no causal mask, GQA when the
    head counts differ; scale >= 0), with ``config`` (default: the tunable's first that
    fits), ``splits`` (default: :func:`decode_splits`) and ``merge`` ("fused"/"kernel";
    default as :func:`_merge_mode`) forced: for tools that time the choices
    (benchmarks/sdpa_decode_sweep.py). ``plan(query, key, value, attn_mask)`` returns the
    output; it does not check its inputs beyond what this call did."""
    if not _served(query, key, value, attn_mask, True) or query.shape[-2] > _DECODE_MAX_LENGTH:
        raise ValueError("decode_plan: inputs the decode path does not serve")
    q, k, v, mask, mask_kind, scale = _prepare(query, key, value, attn_mask, scale)
    if scale < 0:
        raise ValueError("decode_plan: a negative scale is applied to the queries first")
    (batch, heads, length, _), value_dim = q.shape, v.shape[-1]
    out = torch.empty((batch, length, heads, value_dim), dtype=q.dtype, device=q.device).transpose(1, 2)
    blocks = _head_blocks(q, v)
    blocks["HEAD_EXACT"] = blocks["BLOCK_D"] == q.shape[-1] and blocks["BLOCK_DV"] == value_dim
    rows = _decode_rows(heads // k.shape[1] * length)
    if config is None:
        admit = _fits(q.dtype, rows, blocks, mask_kind != MASK_NONE)
        config = next((c for c in ATTENTION_DECODE.configs() if admit(c)), ATTENTION_DECODE.configs()[0])
    units = runtime.compute_units(q.device.type, q.device.index)
    plan = _build_decode(q, k, v, mask, mask_kind, scale * LOG2E, out, blocks, units, config, False, splits, merge)
    result = out.squeeze(1) if query.dim() == 3 else out
    return plan.returning(result, attn_mask is not None and attn_mask.dtype == torch.bool)


def _forward_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                    causal: bool, scale: float,
                    need_lse: bool = True) -> tuple[torch.Tensor, torch.Tensor | None, DecodePlan | None]:
    """(out, lse, decode plan) of attention over (B, H, L, D) queries; ``mask`` is a
    (B, H, L, S) view or a placeholder when ``mask_kind`` is MASK_NONE. The decode path
    writes the lse only if ``need_lse`` (None otherwise) and returns its plan; the prefill
    path gives no plan."""
    (batch, heads, length, _), (kv_heads, keys), value_dim = q.shape, k.shape[1:3], v.shape[-1]
    # ATen's layout: (B, L, H, DV) memory seen as (B, H, L, DV)
    out = torch.empty((batch, length, heads, value_dim), dtype=q.dtype, device=q.device).transpose(1, 2)
    decode = length <= _DECODE_MAX_LENGTH and not causal
    lse = torch.empty((batch * heads, length), dtype=torch.float32, device=q.device) if need_lse or not decode else None
    blocks = _head_blocks(q, v)
    exact = blocks["BLOCK_D"] == q.shape[-1] and blocks["BLOCK_DV"] == value_dim
    if scale < 0:  # the kernels take |scale|: the row max of the scaled scores is then the scaled max
        q = q.neg()
    qk_scale = abs(scale) * LOG2E
    units = runtime.compute_units(q.device.type, q.device.index)
    if decode:
        plan = _decode_launch(q, k, v, mask, mask_kind, qk_scale, out, lse, {**blocks, "HEAD_EXACT": exact}, units)
        return out, lse, plan
    if mask_kind == MASK_NONE and variants.offer("attention_forward", q, k, v, out, lse, causal, qk_scale):
        return out, lse, None
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
    return out, lse, None


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                mask_kind: int, causal: bool, scale: float) -> torch.Tensor:
        out, lse, _ = _forward_launch(q, k, v, mask, mask_kind, causal, scale)
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


#: decode plans (:class:`DecodePlan`) of calls that need no gradient, by call signature
_decode_plans = PlanCache("scaled_dot_product_attention")


def _plan_key(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: Any, is_causal: Any, scale: Any,
              enable_gqa: Any) -> Any:
    """What a decode plan depends on of a call: the signatures of its tensors (and whether
    the mask needs a gradient), its other arguments; None where an argument is not a tensor
    (ATen's error to raise)."""
    try:
        mask = None if attn_mask is None else (signature(attn_mask), attn_mask.requires_grad)
        return (signature(query), signature(key), signature(value), mask, dropout_p, is_causal, scale, enable_gqa)
    except AttributeError:
        return None


@aten_op("scaled_dot_product_attention", autograd=True)
def scaled_dot_product_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """softmax(scale * query @ key^T + mask) @ value over (B, H, L, E) queries (or (B, L, E))
    and (B, HKV, S, E) keys; ``attn_mask`` is bool (True attends) or additive, broadcast to
    (B, H, L, S); ``is_causal`` is top-left aligned; ``scale`` defaults to 1/sqrt(E).

    A decode call (L <= 16, not causal) that needs no gradient keeps its launches
    (:class:`DecodePlan`) for its call signature: a repeat call allocates and launches."""
    plan_key = _plan_key(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    plan = _decode_plans.get(plan_key) if plan_key is not None else None
    if plan is not None and not (torch.is_grad_enabled()
                                 and (query.requires_grad or key.requires_grad or value.requires_grad)):
        return plan(query, key, value, attn_mask)
    if dropout_p > 0:
        _note_dropout()
        return NotImplemented
    if (attn_mask is not None and is_causal) or not _served(query, key, value, attn_mask, enable_gqa):
        return NotImplemented
    q, k, v, mask, mask_kind, scale_value = _prepare(query, key, value, attn_mask, scale)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad
                                    or (mask_kind == MASK_ADD and mask.requires_grad)):
        out = _Attention.apply(q, k, v, mask, mask_kind, bool(is_causal), scale_value)
        return out.squeeze(1) if query.dim() == 3 else out
    # nothing to differentiate: no autograd node (its creation costs more than a launch)
    out, _, plan = _forward_launch(q, k, v, mask, mask_kind, bool(is_causal), scale_value, need_lse=False)
    result = out.squeeze(1) if query.dim() == 3 else out
    if (plan is not None and plan_key is not None and scale_value >= 0 and plan.replayable
            and not _native_recording()):
        _decode_plans.store(plan_key, plan.returning(result, mask_kind == MASK_BOOL))
    return result
