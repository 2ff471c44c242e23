"""What the prefill (:mod:`.attention_prefill`) and decode (:mod:`.attention_decode`) paths
of scaled_dot_product_attention (:mod:`.attention`) share: the online-softmax step over a
block of keys, the head-dim blocks and tuning buckets, the shared-memory model of their
tiles, and which calls the kernels serve and how their arguments reach them."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

from .. import runtime
from ..contract import KernelConfig
from ..host_math import next_power_of_2
from .attention_backward import MASK_ADD, MASK_BOOL, MASK_NONE
from .mm import _input_precision

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_HEAD_DIM = 256
#: query rows per decode program at most
_DECODE_MAX_ROWS = 64


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
    keep,  # (R, BLOCK_N) bool where DROPOUT: the probabilities the dropout keeps
    DROPOUT: tl.constexpr,
):
    """One BLOCK_N step of the online softmax over keys ``[start_n, start_n + BLOCK_N)``;
    with DROPOUT, the dropped probabilities count in the row's sum but not in the output
    (whose 1 / (1 - p) the caller applies)."""
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
    if DROPOUT:
        p = tl.where(keep, p, 0.0)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=INPUT_PRECISION)
    return acc, m_new, l_i


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


def _decode_rows(group_rows: int, config: KernelConfig | None = None) -> int:
    """Query rows per decode program: a group's rows padded to a power of two, at least 16
    (the smallest M of ``tl.dot``) or the config's ROWS, at most _DECODE_MAX_ROWS. (ROWS 64
    makes the two products wgmma on Hopper, with the operands read from shared memory: the
    padding rows cost tensor-core time that a memory-bound program has to spare.)"""
    least = max(16, int(config.params.get("ROWS", 16))) if config is not None else 16
    return min(_DECODE_MAX_ROWS, max(least, next_power_of_2(min(group_rows, _DECODE_MAX_ROWS))))


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
