"""Rotary position embedding (RoPE) of queries and keys.

For position p and frequency index j < R/2 (R = 2 * cos.shape[-1], the rotary dims; the
head dims past R pass through unchanged), the pair (x1, x2) turns by the angle theta(p, j):

    out1 = x1 cos - x2 sin,   out2 = x2 cos + x1 sin,   cos = cos_table[p, j], sin = sin_table[p, j]

Pairs are (j, j + R/2) in the half-rotated layout (GPT-NeoX, Llama) and (2j, 2j + 1) in the
interleaved one (GPT-J). The backward turns the gradient back by -theta. q and k are read
through their strides: (batch, seq, heads, head_dim) or a transposed (batch, heads, seq,
head_dim) view of it, or without the batch dim.
"""

from typing import Any

import torch
import triton
import triton.language as tl

from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..ops.indexing import device_check_options, host_checks_indices
from . import _device

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def _rotary_kernel(
    x_ptr,  # (B, S, H, D) strided
    out_ptr,  # (B, S, H, D) contiguous
    cos_ptr,  # (P, HALF) row stride table_stride, unit column stride
    sin_ptr,  # (P, HALF) same layout as cos
    pos_ptr,  # (B, S) strided, when HAS_POS
    S,
    H,
    D,
    stride_b,
    stride_s,
    stride_h,
    stride_d,
    pos_stride_b,
    pos_stride_s,
    table_stride,
    P,  # the tables' positions
    HALF: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    INVERSE: tl.constexpr,
    HAS_POS: tl.constexpr,
    CHECK: tl.constexpr,  # assert 0 <= position < P on the device
    COMPUTE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)  # b * S + s
    b = token // S
    s = token % S
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    j = tl.arange(0, BLOCK_R)
    j_mask = j < HALF
    if HAS_POS:
        p = tl.load(pos_ptr + b * pos_stride_b + s * pos_stride_s).to(tl.int64)
        if CHECK:
            tl.device_assert((p >= 0) & (p < P), "rotary embedding: a position id is outside the tables")
        row = p + tl.zeros_like(j).to(tl.int64)
        j_mask = j_mask & (row >= 0) & (row < P)  # a bad position is never read through
    else:
        p = s
    cos = tl.load(cos_ptr + p * table_stride + j, mask=j_mask, other=1.0).to(COMPUTE)
    sin = tl.load(sin_ptr + p * table_stride + j, mask=j_mask, other=0.0).to(COMPUTE)
    if INVERSE:
        sin = -sin
    if INTERLEAVED:
        first = 2 * j
        second = 2 * j + 1
    else:
        first = j
        second = j + HALF
    head_mask = heads < H
    mask = head_mask[:, None] & j_mask[None, :]
    x_row = x_ptr + b * stride_b + s * stride_s + heads[:, None] * stride_h
    out_row = out_ptr + token * H * D + heads[:, None] * D
    x1 = tl.load(x_row + first[None, :] * stride_d, mask=mask, other=0.0).to(COMPUTE)
    x2 = tl.load(x_row + second[None, :] * stride_d, mask=mask, other=0.0).to(COMPUTE)
    out1 = x1 * cos[None, :] - x2 * sin[None, :]
    out2 = x2 * cos[None, :] + x1 * sin[None, :]
    tl.store(out_row + first[None, :], out1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(out_row + second[None, :], out2.to(out_ptr.dtype.element_ty), mask=mask)
    if BLOCK_T > 0:
        # head dims past the rotary ones pass through
        t = 2 * HALF + tl.arange(0, BLOCK_T)
        t_mask = head_mask[:, None] & (t < D)[None, :]
        rest = tl.load(x_row + t[None, :] * stride_d, mask=t_mask, other=0.0)
        tl.store(out_row + t[None, :], rest, mask=t_mask)


_rotary = LaunchCache(_rotary_kernel, name="rotary_embedding")


def _check(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_ids: torch.Tensor | None) -> None:
    _device.check("apply_rotary_position_embedding", x, cos, sin, position_ids)
    if x.dim() not in (3, 4) or x.dtype not in _FLOATS:
        raise ValueError(f"rotary embedding: q and k must be floating (batch, seq, heads, head_dim) "
                         f"or (seq, heads, head_dim), got {x.dtype} {list(x.shape)}")
    if cos.dim() != 2 or cos.shape != sin.shape:
        raise ValueError(f"rotary embedding: cos and sin must be (positions, rotary_dim / 2) tables "
                         f"of one shape, got {list(cos.shape)} and {list(sin.shape)}")
    if 2 * cos.shape[1] > x.shape[-1]:
        raise ValueError(f"rotary embedding: rotary dims {2 * cos.shape[1]} exceed head_dim {x.shape[-1]}")
    if position_ids is None and x.shape[-3] > cos.shape[0]:
        raise ValueError(f"rotary embedding: {x.shape[-3]} positions but tables of {cos.shape[0]}")
    if position_ids is not None and position_ids.numel() and host_checks_indices(position_ids.device):
        # on an accelerator the kernel checks instead (a host read-back would stall the stream)
        low, high = (int(v) for v in torch.aminmax(position_ids))
        if low < 0 or high >= cos.shape[0]:
            raise IndexError(f"rotary embedding: a position id is outside the tables' {cos.shape[0]} positions")


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_ids: torch.Tensor | None,
            interleaved: bool, inverse: bool) -> torch.Tensor:
    _check(x, cos, sin, position_ids)
    x4 = x if x.dim() == 4 else x.unsqueeze(0)
    batch, seq, heads, dim = x4.shape
    out = torch.empty(x4.shape, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out.view(x.shape)
    cos = cos if cos.stride(1) == 1 else cos.contiguous()
    sin = sin if sin.stride() == cos.stride() else sin.contiguous()
    if sin.stride() != cos.stride():
        cos = cos.contiguous()
    pos = position_ids
    device_check = pos is not None and not host_checks_indices(pos.device)
    if pos is not None:
        pos = pos.expand(batch, seq) if pos.dim() < 2 or pos.shape[0] == 1 else pos
    half = cos.shape[1]
    tail = dim - 2 * half
    block_h = min(16, next_power_of_2(heads))
    _rotary(
        (batch * seq, cdiv(heads, block_h)),
        x4, out, cos, sin, x4 if pos is None else pos, seq, heads, dim, *x4.stride(),
        *(pos.stride() if pos is not None else (0, 0)), cos.stride(0), cos.shape[0],
        options=device_check_options({}) if device_check else None,
        HALF=half, INTERLEAVED=interleaved, INVERSE=inverse, HAS_POS=pos is not None, CHECK=device_check,
        COMPUTE=tl.float64 if x.dtype == torch.float64 else tl.float32,
        BLOCK_H=block_h, BLOCK_R=next_power_of_2(max(half, 1)),
        BLOCK_T=next_power_of_2(tail) if tail else 0,
    )
    return out.view(x.shape)


@torch.library.custom_op("gems::apply_rotary_position_embedding", mutates_args=())
def _rope_op(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             position_ids: torch.Tensor | None = None, rotary_interleaved: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor]:
    return (_rotate(q, cos, sin, position_ids, rotary_interleaved, inverse=False),
            _rotate(k, cos, sin, position_ids, rotary_interleaved, inverse=False))


@torch.library.custom_op("gems::apply_rotary_position_embedding_backward", mutates_args=())
def _rope_backward_op(grad_q: torch.Tensor, grad_k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                      position_ids: torch.Tensor | None = None, rotary_interleaved: bool = False
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    return (_rotate(grad_q, cos, sin, position_ids, rotary_interleaved, inverse=True),
            _rotate(grad_k, cos, sin, position_ids, rotary_interleaved, inverse=True))


def _fake(q: torch.Tensor, k: torch.Tensor, *rest: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            torch.empty_like(k, memory_format=torch.contiguous_format))


_rope_op.register_fake(_fake)
_rope_backward_op.register_fake(_fake)


def _save(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    _, _, cos, sin, position_ids, interleaved = inputs
    ctx.save_for_backward(cos, sin, position_ids)
    ctx.interleaved = interleaved


def _rope_grad(ctx: Any, grad_q: torch.Tensor, grad_k: torch.Tensor) -> tuple[Any, ...]:
    cos, sin, position_ids = ctx.saved_tensors
    dq, dk = torch.ops.gems.apply_rotary_position_embedding_backward(
        grad_q, grad_k, cos, sin, position_ids, ctx.interleaved)
    return dq, dk, None, None, None, None


_rope_op.register_autograd(_rope_grad, setup_context=_save)


def apply_rotary_position_embedding(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
    position_ids: torch.Tensor | None = None, rotary_interleaved: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q`` (batch, seq, q_heads, head_dim) and ``k`` (batch, seq, kv_heads,
    head_dim) by their positions; returns ``(q_rotated, k_rotated)``, contiguous.

    ``cos``/``sin``: (max_positions, rotary_dim // 2) tables, ``cos[p, j] = cos(p * f_j)``.
    ``position_ids``: (batch, seq) or (seq,) integers; default ``arange(seq)``.
    ``rotary_interleaved``: pairs (2j, 2j+1) (GPT-J) instead of (j, j + rotary_dim/2)
    (GPT-NeoX, Llama). Differentiable in q and k (not in the tables); traceable as
    ``torch.ops.gems.apply_rotary_position_embedding``."""
    if _device.foreign(q, k, cos, sin, position_ids):
        return apply_rotary_position_embedding_reference(q, k, cos, sin, position_ids, rotary_interleaved)
    return torch.ops.gems.apply_rotary_position_embedding(q, k, cos, sin, position_ids, rotary_interleaved)


def apply_rotary_position_embedding_reference(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
    position_ids: torch.Tensor | None = None, rotary_interleaved: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pure-PyTorch :func:`apply_rotary_position_embedding`."""

    def rotate(x: torch.Tensor) -> torch.Tensor:
        seq, half = x.shape[-3], cos.shape[-1]
        pos = torch.arange(seq, device=x.device) if position_ids is None else position_ids
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        c = cos[pos].unsqueeze(-2).to(compute)  # (..., seq, 1, half)
        s = sin[pos].unsqueeze(-2).to(compute)
        xf = x.to(compute)
        rot, rest = xf[..., : 2 * half], xf[..., 2 * half:]
        if rotary_interleaved:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
        else:
            x1, x2 = rot[..., :half], rot[..., half:]
            out = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
        return torch.cat((out, rest), dim=-1).to(x.dtype)

    return rotate(q), rotate(k)
