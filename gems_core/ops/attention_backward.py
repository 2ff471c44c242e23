"""Flash-attention backward, and the masked score block both directions share.

The softmax is never stored: each block of probabilities is recomputed from the forward's
saved log-sum-exp, ``P = exp2(S - lse)`` (scores and lse in base 2). With
``delta_i = sum_d dO_id * O_id`` the gradients are

    dV = P^T dO        dP = dO V^T        dS = P * (dP - delta)
    dQ = scale * dS K  dK = scale * dS^T Q

Two kernels, neither with atomics: one program per key block accumulates dK and dV over
every query block (and, for grouped-query attention, over every query head of the group);
one program per query block accumulates dQ over the key blocks. Each computes ``delta``
for its query rows itself rather than in a separate pass.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import LaunchCache
from .random import _uniform4

LOG2E = 1.4426950408889634
MASK_NONE, MASK_BOOL, MASK_ADD = 0, 1, 2


@triton.jit
def masked_scores(
    qk,  # (BLOCK_M, BLOCK_N) fp32: q @ k^T
    rows,  # (BLOCK_M,) query positions
    cols,  # (BLOCK_N,) key positions
    mask_ptr,  # this (batch, query head)'s (L, S) mask, strides (stride_ml, stride_ms)
    stride_ml,
    stride_ms,
    L,
    S,
    qk_scale,  # scale * log2(e)
    CAUSAL: tl.constexpr,
    MASK: tl.constexpr,
):
    # base-2 scores: (scale * q.k + additive mask) * log2(e); -inf where the key is not
    # attended (past S or L, above the top-left causal diagonal, or a False in a bool mask)
    valid = (rows[:, None] < L) & (cols[None, :] < S)
    if CAUSAL:
        valid = valid & (cols[None, :] <= rows[:, None])
    s = qk * qk_scale
    if MASK != 0:
        m_ptrs = mask_ptr + rows[:, None] * stride_ml + cols[None, :] * stride_ms
        if MASK == 1:
            valid = valid & (tl.load(m_ptrs, mask=valid, other=0) != 0)
        else:
            s += tl.load(m_ptrs, mask=valid, other=0.0).to(tl.float32) * 1.4426950408889634
    return tl.where(valid, s, float("-inf"))


@triton.jit
def dropout_keep(
    seed_lo,  # the call's Philox seed and offset (int32 halves, random.philox_state)
    seed_hi,
    offset_lo,
    offset_hi,
    row_base,  # int64: (batch * H + query head) * L
    rows,  # (BLOCK_M,) query positions
    start_n,  # the first key of the block (a multiple of 4)
    quads,  # cdiv(S, 4): Philox counters a query row
    dropout_p,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # (BLOCK_M, BLOCK_N) bool: the probabilities the dropout keeps, each with chance 1 - p.
    # Counter (row_base + row) * quads + key // 4 draws keys 4j .. 4j + 3 of a row: a pure
    # function of the position, so the forward and both backward kernels, whatever their
    # tiles, draw the same
    quad = start_n // 4 + tl.arange(0, BLOCK_N // 4)
    index = (row_base + rows.to(tl.int64))[:, None] * quads + quad[None, :]
    r0, r1, r2, r3 = _uniform4(seed_lo, seed_hi, offset_lo, offset_hi, index)
    uniform = tl.reshape(tl.join(tl.join(r0, r1), tl.join(r2, r3)), (BLOCK_M, BLOCK_N))
    return uniform >= dropout_p


@triton.jit(do_not_specialize=["seed_lo", "seed_hi", "offset_lo", "offset_hi"])
def _attention_dkdv_kernel(
    q_ptr,  # (B, H, L, D)
    k_ptr,  # (B, HKV, S, D)
    v_ptr,  # (B, HKV, S, DV)
    mask_ptr,  # (B, H, L, S) broadcast view; unused unless MASK
    o_ptr,  # (B, H, L, DV)
    do_ptr,  # (B, H, L, DV)
    lse_ptr,  # (B * H, L) fp32 contiguous, base 2
    dk_ptr,  # (B, HKV, S, D)
    dv_ptr,  # (B, HKV, S, DV)
    sq_b, sq_h, sq_l, sq_d,
    sk_b, sk_h, sk_s, sk_d,
    sv_b, sv_h, sv_s, sv_d,
    sm_b, sm_h, sm_l, sm_s,
    so_b, so_h, so_l, so_d,
    sdo_b, sdo_h, sdo_l, sdo_d,
    sdk_b, sdk_h, sdk_s, sdk_d,
    sdv_b, sdv_h, sdv_s, sdv_d,
    HKV,
    GROUP,  # query heads per key/value head
    L,
    S,
    D,
    DV,
    scale,
    qk_scale,
    seed_lo,
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
    INPUT_PRECISION: tl.constexpr,
    DROPOUT: tl.constexpr,
):
    bh = tl.program_id(0)
    b = (bh // HKV).to(tl.int64)
    hk = (bh % HKV).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    d = tl.arange(0, BLOCK_D)
    dv_ = tl.arange(0, BLOCK_DV)
    k_mask = (cols[:, None] < S) & (d[None, :] < D)
    v_mask = (cols[:, None] < S) & (dv_[None, :] < DV)
    k = tl.load(k_ptr + b * sk_b + hk * sk_h + cols[:, None] * sk_s + d[None, :] * sk_d, mask=k_mask, other=0.0)
    v = tl.load(v_ptr + b * sv_b + hk * sv_h + cols[:, None] * sv_s + dv_[None, :] * sv_d, mask=v_mask, other=0.0)
    dk = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_DV), tl.float32)
    quads = tl.cdiv(S, 4)
    first_m = 0
    if CAUSAL:  # query rows above this key block's first key do not attend it
        first_m = (tl.program_id(1) * BLOCK_N // BLOCK_M) * BLOCK_M
    for g in range(GROUP):
        h = hk * GROUP + g
        q_base = q_ptr + b * sq_b + h * sq_h
        o_base = o_ptr + b * so_b + h * so_h
        do_base = do_ptr + b * sdo_b + h * sdo_h
        for start_m in range(first_m, L, BLOCK_M):
            rows = start_m + tl.arange(0, BLOCK_M)
            row_ok = rows[:, None] < L
            q = tl.load(q_base + rows[:, None] * sq_l + d[None, :] * sq_d, mask=row_ok & (d[None, :] < D), other=0.0)
            o_mask = row_ok & (dv_[None, :] < DV)
            o = tl.load(o_base + rows[:, None] * so_l + dv_[None, :] * so_d, mask=o_mask, other=0.0)
            do = tl.load(do_base + rows[:, None] * sdo_l + dv_[None, :] * sdo_d, mask=o_mask, other=0.0)
            delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)
            lse = tl.load(lse_ptr + (b * HKV * GROUP + h) * L + rows, mask=rows < L, other=float("inf"))
            qk = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION)
            s = masked_scores(qk, rows, cols, mask_ptr + b * sm_b + h * sm_h, sm_l, sm_s, L, S, qk_scale, CAUSAL, MASK)
            p = tl.exp2(s - lse[:, None])
            do = do.to(v.dtype)
            if DROPOUT:
                keep = dropout_keep(seed_lo, seed_hi, offset_lo, offset_hi, (b * HKV * GROUP + h) * L, rows,
                                    tl.program_id(1) * BLOCK_N, quads, dropout_p, BLOCK_M, BLOCK_N)
                dv += tl.dot(tl.trans(tl.where(keep, p * dropout_scale, 0.0).to(v.dtype)), do,
                             input_precision=INPUT_PRECISION)
                dp = tl.dot(do, tl.trans(v), input_precision=INPUT_PRECISION)
                dp = tl.where(keep, dp * dropout_scale, 0.0)
            else:
                dv += tl.dot(tl.trans(p.to(v.dtype)), do, input_precision=INPUT_PRECISION)
                dp = tl.dot(do, tl.trans(v), input_precision=INPUT_PRECISION)
            ds = p * (dp - delta[:, None])
            dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=INPUT_PRECISION)
    dk = dk * scale
    tl.store(dk_ptr + b * sdk_b + hk * sdk_h + cols[:, None] * sdk_s + d[None, :] * sdk_d,
             dk.to(dk_ptr.dtype.element_ty), mask=k_mask)
    tl.store(dv_ptr + b * sdv_b + hk * sdv_h + cols[:, None] * sdv_s + dv_[None, :] * sdv_d,
             dv.to(dv_ptr.dtype.element_ty), mask=v_mask)


@triton.jit(do_not_specialize=["seed_lo", "seed_hi", "offset_lo", "offset_hi"])
def _attention_dq_kernel(
    q_ptr,  # (B, H, L, D)
    k_ptr,  # (B, HKV, S, D)
    v_ptr,  # (B, HKV, S, DV)
    mask_ptr,  # (B, H, L, S) broadcast view; unused unless MASK
    o_ptr,  # (B, H, L, DV)
    do_ptr,  # (B, H, L, DV)
    lse_ptr,  # (B * H, L) fp32 contiguous, base 2
    dq_ptr,  # (B, H, L, D)
    sq_b, sq_h, sq_l, sq_d,
    sk_b, sk_h, sk_s, sk_d,
    sv_b, sv_h, sv_s, sv_d,
    sm_b, sm_h, sm_l, sm_s,
    so_b, so_h, so_l, so_d,
    sdo_b, sdo_h, sdo_l, sdo_d,
    sdq_b, sdq_h, sdq_l, sdq_d,
    H,
    GROUP,
    L,
    S,
    D,
    DV,
    scale,
    qk_scale,
    seed_lo,
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
    INPUT_PRECISION: tl.constexpr,
    DROPOUT: tl.constexpr,
):
    bh = tl.program_id(0)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    hk = h // GROUP
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    dv_ = tl.arange(0, BLOCK_DV)
    row_ok = rows[:, None] < L
    q_mask = row_ok & (d[None, :] < D)
    q = tl.load(q_ptr + b * sq_b + h * sq_h + rows[:, None] * sq_l + d[None, :] * sq_d, mask=q_mask, other=0.0)
    o_mask = row_ok & (dv_[None, :] < DV)
    o = tl.load(o_ptr + b * so_b + h * so_h + rows[:, None] * so_l + dv_[None, :] * so_d, mask=o_mask, other=0.0)
    do = tl.load(do_ptr + b * sdo_b + h * sdo_h + rows[:, None] * sdo_l + dv_[None, :] * sdo_d,
                 mask=o_mask, other=0.0)
    delta = tl.sum(do.to(tl.float32) * o.to(tl.float32), 1)
    do = do.to(q.dtype)
    lse = tl.load(lse_ptr + bh * L + rows, mask=rows < L, other=float("inf"))
    dq = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    k_base = k_ptr + b * sk_b + hk * sk_h
    v_base = v_ptr + b * sv_b + hk * sv_h
    quads = tl.cdiv(S, 4)
    end = S
    if CAUSAL:  # keys past this block's last query row are not attended
        end = tl.minimum(S, (tl.program_id(1) + 1) * BLOCK_M)
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        col_ok = cols[:, None] < S
        k = tl.load(k_base + cols[:, None] * sk_s + d[None, :] * sk_d, mask=col_ok & (d[None, :] < D), other=0.0)
        v = tl.load(v_base + cols[:, None] * sv_s + dv_[None, :] * sv_d, mask=col_ok & (dv_[None, :] < DV), other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision=INPUT_PRECISION)
        s = masked_scores(qk, rows, cols, mask_ptr + b * sm_b + h * sm_h, sm_l, sm_s, L, S, qk_scale, CAUSAL, MASK)
        p = tl.exp2(s - lse[:, None])
        dp = tl.dot(do, tl.trans(v), input_precision=INPUT_PRECISION)
        if DROPOUT:
            keep = dropout_keep(seed_lo, seed_hi, offset_lo, offset_hi, bh.to(tl.int64) * L, rows, start_n,
                                quads, dropout_p, BLOCK_M, BLOCK_N)
            dp = tl.where(keep, dp * dropout_scale, 0.0)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=INPUT_PRECISION)
    dq = dq * scale
    tl.store(dq_ptr + b * sdq_b + h * sdq_h + rows[:, None] * sdq_l + d[None, :] * sdq_d,
             dq.to(dq_ptr.dtype.element_ty), mask=q_mask)


# both named for their tunable ("attention_backward"): the compile check reports configs by it
_dkdv = LaunchCache(_attention_dkdv_kernel, name="attention_backward")
_dq = LaunchCache(_attention_dq_kernel, name="attention_backward")


def launch_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,  # (B, H, L, S) view, or a placeholder when mask_kind is MASK_NONE
    o: torch.Tensor,
    do: torch.Tensor,
    lse: torch.Tensor,
    scale: float,
    causal: bool,
    mask_kind: int,
    config: KernelConfig,
    constexprs: dict[str, Any],
    options: dict[str, object],
    dropout: tuple[float, tuple[int, ...]] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of attention over (B, H, L, D) queries and (B, HKV, S, D|DV) keys and
    values; ``constexprs`` carry the head-dim blocks and input precision; ``dropout``, the
    forward's (p, Philox state) where it dropped probabilities."""
    (batch, heads, length, head_dim), (_, kv_heads, keys, _) = q.shape, k.shape
    value_dim = v.shape[-1]
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    shared = (*q.stride(), *k.stride(), *v.stride(), *mask.stride()[:4], *o.stride(), *do.stride())
    common = dict(CAUSAL=causal, MASK=mask_kind, DROPOUT=dropout is not None, **constexprs)
    tail = (length, keys, head_dim, value_dim, scale, scale * LOG2E, *dropout_arguments(dropout))
    group = heads // kv_heads
    block_m, block_n = config.params["BLOCK_M"], config.params["BLOCK_N"]
    _dkdv(
        (batch * kv_heads, cdiv(keys, block_n)),
        q, k, v, mask, o, do, lse, dk, dv,
        *shared, *dk.stride(), *dv.stride(), kv_heads, group, *tail,
        config=config, options=options, **common,
    )
    _dq(
        (batch * heads, cdiv(length, block_m)),
        q, k, v, mask, o, do, lse, dq,
        *shared, *dq.stride(), heads, group, *tail,
        config=config, options=options, **common,
    )
    return dq, dk, dv


def dropout_arguments(dropout: tuple[float, tuple[int, ...]] | None) -> tuple[Any, ...]:
    """The kernels' (seed_lo, seed_hi, offset_lo, offset_hi, dropout_p, dropout_scale) of a
    call's dropout (p, Philox state); placeholders without one."""
    if dropout is None:
        return (0, 0, 0, 0, 0.0, 1.0)
    p, state = dropout
    return (*state, float(p), 1.0 / (1.0 - p))
