"""scaled_dot_product_attention's prefill path: flash attention forward over any number of
queries (:mod:`.attention` chooses between it and the decode path).

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

A backend may serve the prefill path itself: a call without a mask is first offered to its
``attention_forward`` variant (:mod:`gems_core.variants`; the NVIDIA backend has a
warp-specialized Hopper kernel there), and the kernel here serves whatever it declines.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .. import variants
from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import LaunchCache
from ..tuning import Tunable
from .attention_backward import MASK_NONE, dropout_arguments, dropout_keep
from .attention_common import _attend_block, _bucket, _fits
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
#: a causal section of heads holds about this many programs per compute unit
_CAUSAL_SECTION_PROGRAMS = 2


@triton.jit(do_not_specialize=["seed_lo", "seed_hi", "offset_lo", "offset_hi"])
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
    seed_lo,  # the dropout's Philox seed and offset (attention_backward.dropout_keep)
    seed_hi,
    offset_lo,
    offset_hi,
    dropout_p,  # 0 < p < 1 where DROPOUT
    dropout_scale,  # 1 / (1 - p)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    CAUSAL: tl.constexpr,
    MASK: tl.constexpr,
    HEAD_EXACT: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    DROPOUT: tl.constexpr,
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
    row_base = bh.to(tl.int64) * L  # the dropout's counters
    quads = tl.cdiv(S, 4)
    for start_n in range(0, bare_end, BLOCK_N):
        if DROPOUT:
            keep = dropout_keep(seed_lo, seed_hi, offset_lo, offset_hi, row_base, rows, start_n, quads, dropout_p,
                                BLOCK_M, BLOCK_N)
        else:
            keep = 0
        acc, m_i, l_i = _attend_block(
            acc, m_i, l_i, q, k_base, v_base, mask_base, rows, row_mask, row_ok, start_n, S,
            sk_s, sk_d, sv_s, sv_d, sm_s, D, DV, qk_scale,
            BLOCK_N, BLOCK_D, BLOCK_DV, False, False, MASK, HEAD_EXACT, INPUT_PRECISION, keep, DROPOUT,
        )
    for start_n in range(bare_end, end, BLOCK_N):
        if DROPOUT:
            keep = dropout_keep(seed_lo, seed_hi, offset_lo, offset_hi, row_base, rows, start_n, quads, dropout_p,
                                BLOCK_M, BLOCK_N)
        else:
            keep = 0
        acc, m_i, l_i = _attend_block(
            acc, m_i, l_i, q, k_base, v_base, mask_base, rows, row_mask, row_ok, start_n, S,
            sk_s, sk_d, sv_s, sv_d, sm_s, D, DV, qk_scale,
            BLOCK_N, BLOCK_D, BLOCK_DV, True, CAUSAL, MASK, HEAD_EXACT, INPUT_PRECISION, keep, DROPOUT,
        )
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    if DROPOUT:
        out = out * dropout_scale
    tl.store(o_ptr + b * so_b + h * so_h + rows[:, None] * so_l + dv[None, :] * so_d,
             out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & (dv[None, :] < DV))
    # +inf for a row that attends nothing: the backward's exp2(s - lse) is then 0
    tl.store(lse_ptr + bh * L + rows, tl.where(empty, float("inf"), m_i + tl.log2(l_i)), mask=row_ok)


_forward = LaunchCache(_attention_forward_kernel, name="attention")


def _causal_section(heads: int, blocks_m: int, units: int) -> int:
    """Heads per section of a causal grid: about _CAUSAL_SECTION_PROGRAMS programs per
    compute unit (module docstring)."""
    return max(1, min(heads, cdiv(_CAUSAL_SECTION_PROGRAMS * units, blocks_m)))


def _prefill_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                    causal: bool, qk_scale: float, out: torch.Tensor, lse: torch.Tensor, blocks: dict[str, Any],
                    exact: bool, units: int, dropout: tuple[float, tuple[int, ...]] | None = None) -> None:
    """The prefill path (module docstring) into ``out`` and ``lse``: the backend's variant
    where it takes the call, else the kernel here with the config tuned for this shape bucket.
    ``dropout``: (p, the Philox state of its draws) where probabilities are dropped (the
    kernel here only)."""
    (batch, heads, length, _), (kv_heads, keys), value_dim = q.shape, k.shape[1:3], v.shape[-1]
    if mask_kind == MASK_NONE and dropout is None and variants.offer("attention_forward", q, k, v, out, lse, causal,
                                                                     qk_scale):
        return
    args = (*q.stride(), *k.stride(), *v.stride(), *mask.stride()[:4])
    tail = (heads, heads // kv_heads, length, keys, q.shape[-1], value_dim, qk_scale)
    rng = dropout_arguments(dropout)

    def run(config: KernelConfig, target: torch.Tensor = out) -> None:
        blocks_m = cdiv(length, config.params["BLOCK_M"])
        section = _causal_section(batch * heads, blocks_m, units) if causal else 1
        _forward((blocks_m * batch * heads,), q, k, v, mask, target, lse, *args, *target.stride(), *tail, section,
                 *rng, config=config, options=ATTENTION.options(), CAUSAL=causal, MASK=mask_kind, HEAD_EXACT=exact,
                 DROPOUT=dropout is not None, **blocks)

    key = ("forward", str(q.dtype), _bucket(length), _bucket(keys), blocks["BLOCK_D"], blocks["BLOCK_DV"], causal,
           mask_kind)
    if dropout is not None:  # (a key without it stays as shipped tables hold it)
        key += ("dropout",)
    config = ATTENTION.choose(key, lambda c: bench_ms(lambda: run(c, torch.empty_like(out))),
                              _fits(q.dtype, None, blocks, mask_kind != MASK_NONE))
    run(config)
