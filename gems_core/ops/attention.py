"""scaled_dot_product_attention: flash attention forward (and flash decoding), with its
backward in :mod:`.attention_backward`.

    O = softmax(scale * Q K^T + mask) V

One program per (batch * query head, BLOCK_M query rows) walks the keys in BLOCK_N blocks
with an online softmax: a running row max ``m`` and denominator ``l`` in fp32, the output
accumulator rescaled by ``exp2(m_old - m_new)`` as the max grows. The row's log-sum-exp
(base 2) is kept for the backward, which recomputes the probabilities from it.

Grouped-query attention (``enable_gqa``) maps query head ``h`` to key/value head
``h // group`` in the kernel; nothing is repeated in memory. Causal masking is top-left
aligned, as in ATen: query ``i`` attends keys ``j <= i`` for any L and S. A mask is read in
place through its broadcast strides. A row that attends nothing gives zeros (and zero
gradients), as ATen's.

A single query (L == 1, decoding) over many keys has too few query blocks to fill a chip:
the keys are split across programs that each write a partial result and its log-sum-exp,
and a second kernel combines them.

``scaled_dot_product_attention`` is a composite in ATen, so it is registered on the Autograd
key and brings its own backward. Dropout, fp64, ranks other than 3 and 4, broadcast batch
dims and a mask that needs a gradient are left to ATen.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

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
    masked_scores,
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
    description="attention forward and backward: BLOCK_M query rows per program, keys in "
    "BLOCK_N steps (the backward's dK/dV programs own BLOCK_N keys)",
)
ATTENTION_DECODE = Tunable(
    "attention_decode",
    params=("BLOCK_N", "SPLITS"),
    defaults=[KernelConfig({"BLOCK_N": 64, "SPLITS": 16}, num_warps=4, num_stages=2)],
    description="attention of one query (decoding): the keys split over up to SPLITS programs "
    "per head, each walking its share in BLOCK_N steps",
)

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_HEAD_DIM = 256
_dropout_noted = False


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
    qk_scale,  # scale * log2(e)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    CAUSAL: tl.constexpr,
    MASK: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
):
    bh = tl.program_id(0)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    hk = h // GROUP
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    q = tl.load(q_ptr + b * sq_b + h * sq_h + rows[:, None] * sq_l + d[None, :] * sq_d,
                mask=(rows[:, None] < L) & (d[None, :] < D), other=0.0)
    k_base = k_ptr + b * sk_b + hk * sk_h
    v_base = v_ptr + b * sv_b + hk * sv_h
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    end = S
    if CAUSAL:  # keys past this block's last query row are not attended
        end = tl.minimum(S, (tl.program_id(1) + 1) * BLOCK_M)
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        kt = tl.load(k_base + cols[None, :] * sk_s + d[:, None] * sk_d,
                     mask=(cols[None, :] < S) & (d[:, None] < D), other=0.0)
        qk = tl.dot(q, kt, input_precision=INPUT_PRECISION)
        s = masked_scores(qk, rows, cols, mask_ptr + b * sm_b + h * sm_h, sm_l, sm_s, L, S, qk_scale, CAUSAL, MASK)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing attended yet
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * sv_s + dv[None, :] * sv_d,
                    mask=(cols[:, None] < S) & (dv[None, :] < DV), other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=INPUT_PRECISION)
        m_i = m_new
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    tl.store(o_ptr + b * so_b + h * so_h + rows[:, None] * so_l + dv[None, :] * so_d,
             out.to(o_ptr.dtype.element_ty), mask=(rows[:, None] < L) & (dv[None, :] < DV))
    # +inf for a row that attends nothing: the backward's exp2(s - lse) is then 0
    tl.store(lse_ptr + bh * L + rows, tl.where(empty, float("inf"), m_i + tl.log2(l_i)), mask=rows < L)


@triton.jit
def _attention_decode_kernel(
    q_ptr,  # (B, H, 1, D)
    k_ptr,  # (B, HKV, S, D)
    v_ptr,  # (B, HKV, S, DV)
    mask_ptr,  # (B, H, 1, S) broadcast view; unused unless MASK
    part_o_ptr,  # (B * H, splits, BLOCK_DV) fp32 contiguous: each split's normalized output
    part_lse_ptr,  # (B * H, splits) fp32 contiguous: each split's base-2 log-sum-exp
    sq_b, sq_h, sq_d,
    sk_b, sk_h, sk_s, sk_d,
    sv_b, sv_h, sv_s, sv_d,
    sm_b, sm_h, sm_s,
    H,
    GROUP,
    S,
    D,
    DV,
    keys_per_split,  # a multiple of BLOCK_N
    qk_scale,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    MASK: tl.constexpr,
):
    # the forward's online softmax over one split's keys, for a single query row; a dot
    # product of one row is a multiply and a sum, not tl.dot
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    hk = h // GROUP
    d = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    row = tl.zeros((1,), tl.int32)
    q = tl.load(q_ptr + b * sq_b + h * sq_h + d * sq_d, mask=d < D, other=0.0).to(tl.float32)
    k_base = k_ptr + b * sk_b + hk * sk_h
    v_base = v_ptr + b * sv_b + hk * sv_h
    m_i = tl.full((1,), float("-inf"), tl.float32)
    l_i = tl.zeros((1,), tl.float32)
    acc = tl.zeros((1, BLOCK_DV), tl.float32)
    first = split * keys_per_split
    last = tl.minimum(S, first + keys_per_split)
    for start_n in range(first, last, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_base + cols[:, None] * sk_s + d[None, :] * sk_d,
                    mask=(cols[:, None] < last) & (d[None, :] < D), other=0.0).to(tl.float32)
        qk = tl.sum(k * q[None, :], 1)[None, :]
        s = masked_scores(qk, row, cols, mask_ptr + b * sm_b + h * sm_h, 0, sm_s, 1, last, qk_scale, False, MASK)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * sv_s + dv[None, :] * sv_d,
                    mask=(cols[:, None] < last) & (dv[None, :] < DV), other=0.0).to(tl.float32)
        acc = acc * alpha[:, None] + tl.sum(tl.sum(p, 0)[:, None] * v, 0)[None, :]
        m_i = m_new
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    splits = tl.num_programs(1)
    tl.store(part_o_ptr + (bh * splits + split) * BLOCK_DV + dv[None, :], out)
    tl.store(part_lse_ptr + bh * splits + split + row, tl.where(empty, float("-inf"), m_i + tl.log2(l_i)))


@triton.jit
def _attention_decode_combine_kernel(
    part_o_ptr,  # (B * H, splits, BLOCK_DV) fp32 contiguous
    part_lse_ptr,  # (B * H, splits) fp32 contiguous
    o_ptr,  # (B, H, 1, DV)
    lse_ptr,  # (B * H,) fp32: the whole row's base-2 log-sum-exp
    so_b, so_h, so_d,
    H,
    DV,
    splits,
    BLOCK_SPLITS: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    # O = sum_s w_s O_s / sum_s w_s with w_s = exp2(lse_s - max lse)
    bh = tl.program_id(0)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    sp = tl.arange(0, BLOCK_SPLITS)
    dv = tl.arange(0, BLOCK_DV)
    lse = tl.load(part_lse_ptr + bh * splits + sp, mask=sp < splits, other=float("-inf"))
    top = tl.max(lse, 0)
    top = tl.where(top == float("-inf"), 0.0, top)
    w = tl.exp2(lse - top)
    parts = tl.load(part_o_ptr + (bh * splits + sp[:, None]) * BLOCK_DV + dv[None, :],
                    mask=sp[:, None] < splits, other=0.0)
    total = tl.sum(w, 0)
    out = tl.sum(parts * w[:, None], 0) / tl.where(total == 0.0, 1.0, total)
    tl.store(o_ptr + b * so_b + h * so_h + dv * so_d, out.to(o_ptr.dtype.element_ty), mask=dv < DV)
    tl.store(lse_ptr + bh, tl.where(total == 0.0, float("inf"), top + tl.log2(total)))


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


def _choose(key: tuple[Any, ...], run: Callable[[KernelConfig], Any]) -> KernelConfig:
    return ATTENTION.choose(key, lambda config: bench_ms(lambda: run(config)))


def _forward_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                    causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of attention over (B, H, L, D) queries; ``mask`` is a (B, H, L, S) view or
    a placeholder when ``mask_kind`` is MASK_NONE."""
    (batch, heads, length, _), (kv_heads, keys), value_dim = q.shape, k.shape[1:3], v.shape[-1]
    # ATen's layout: (B, L, H, DV) memory seen as (B, H, L, DV)
    out = torch.empty((batch, length, heads, value_dim), dtype=q.dtype, device=q.device).transpose(1, 2)
    lse = torch.empty((batch * heads, length), dtype=torch.float32, device=q.device)
    blocks = _head_blocks(q, v)
    if length == 1 and not causal:
        decode = ATTENTION_DECODE.choose(("decode", str(q.dtype), _bucket(keys)))
        if cdiv(keys, decode.params["BLOCK_N"]) >= 2:
            _decode_launch(q, k, v, mask, mask_kind, scale, out, lse, decode, blocks)
            return out, lse
    args = (*q.stride(), *k.stride(), *v.stride(), *mask.stride()[:4])
    tail = (heads, heads // kv_heads, length, keys, q.shape[-1], value_dim, scale * LOG2E)

    def run(config: KernelConfig, target: torch.Tensor = out) -> None:
        grid = (batch * heads, cdiv(length, config.params["BLOCK_M"]))
        _forward(grid, q, k, v, mask, target, lse, *args, *target.stride(), *tail, config=config,
                 options=ATTENTION.options(), CAUSAL=causal, MASK=mask_kind, **blocks)

    run(_choose(("forward", str(q.dtype), _bucket(length), _bucket(keys), blocks["BLOCK_D"]),
                lambda config: run(config, torch.empty_like(out))))
    return out, lse


def _decode_launch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, mask_kind: int,
                   scale: float, out: torch.Tensor, lse: torch.Tensor, config: KernelConfig,
                   blocks: dict[str, Any]) -> None:
    """The split-key path for one query row: up to SPLITS programs per head, each over a
    whole number of key blocks, then one combining program per head."""
    (batch, heads), (kv_heads, keys) = q.shape[:2], k.shape[1:3]
    block_n = config.params["BLOCK_N"]
    splits = min(config.params["SPLITS"], cdiv(keys, block_n))
    keys_per_split = cdiv(cdiv(keys, splits), block_n) * block_n
    splits = cdiv(keys, keys_per_split)
    block_dv = blocks["BLOCK_DV"]
    part_o = torch.empty((batch * heads, splits, block_dv), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((batch * heads, splits), dtype=torch.float32, device=q.device)
    q_strides = (q.stride(0), q.stride(1), q.stride(3))
    m_strides = (mask.stride(0), mask.stride(1), mask.stride(3))
    launch = KernelConfig({"BLOCK_N": block_n}, config.num_warps, config.num_stages, config.options)
    _decode(
        (batch * heads, splits), q, k, v, mask, part_o, part_lse, *q_strides, *k.stride(), *v.stride(),
        *m_strides, heads, heads // kv_heads, keys, q.shape[-1], v.shape[-1], keys_per_split,
        scale * LOG2E, config=launch, options=ATTENTION_DECODE.options(), BLOCK_D=blocks["BLOCK_D"],
        BLOCK_DV=block_dv, MASK=mask_kind,
    )
    _combine(
        (batch * heads,), part_o, part_lse, out, lse, out.stride(0), out.stride(1), out.stride(3),
        heads, v.shape[-1], splits, options=ATTENTION_DECODE.options(),
        BLOCK_SPLITS=next_power_of_2(splits), BLOCK_DV=block_dv,
    )


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
        options = ATTENTION.options()

        def run(config: KernelConfig) -> tuple[torch.Tensor, ...]:
            return launch_backward(q, k, v, mask, out, grad, lse, scale, causal, mask_kind, config, blocks, options)

        key = ("backward", str(q.dtype), _bucket(q.shape[2]), _bucket(k.shape[2]), blocks["BLOCK_D"])
        dq, dk, dv = run(_choose(key, run))
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
