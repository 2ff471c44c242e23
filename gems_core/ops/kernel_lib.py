"""Small @triton.jit helpers shared by kernels of several op modules.

Imported by op modules only (after the backend is selected), so the helpers are defined
for the interpreter or the compiler like the kernels that call them."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def program_offsets(BLOCK_SIZE: tl.constexpr, INT64: tl.constexpr):
    """The flat element offsets this program covers along grid axis 0: one block, in 64-bit
    arithmetic when INT64 (offsets that can pass 2^31)."""
    pid = tl.program_id(0)
    if INT64:
        pid = pid.to(tl.int64)
    return pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)


@triton.jit
def comparable(x):
    """``x`` in a dtype whose comparisons are those of its values: 16-bit floats widened to
    fp32 (exact). Triton's CPU interpreter (3.9) compares bf16 values as their storage bits
    (-0.0 != 0.0, NaN == NaN, negatives ordered backwards); compiled code widens anyway."""
    if x.dtype == tl.float16 or x.dtype == tl.bfloat16:
        return x.to(tl.float32)
    else:
        return x


@triton.jit
def ncdhw_tile(M, INNER, C, D, H, W, CHANNELS_LAST: tl.constexpr, INT64: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """This program's BLOCK_M x BLOCK_N tile of a dense (N, C, D, H, W) tensor (absent dims
    of size 1) seen as M rows of INNER contiguous elements: rows (n, d, h, w) of C channels
    (CHANNELS_LAST), else rows (n, c, d, h) of W. Returns the tile's flat offsets, its mask
    and (n, c, d, h, w), each a column (per row) or a row (per inner element), so per-row
    index math is done once per row."""
    pid = tl.program_id(0)
    if INT64:
        pid = pid.to(tl.int64)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offsets = rows[:, None] * INNER + cols[None, :]
    mask = (rows < M)[:, None] & (cols < INNER)[None, :]
    if CHANNELS_LAST:
        w = rows % W
        rest = rows // W
        h = rest % H
        rest = rest // H
        d = rest % D
        n = rest // D
        return offsets, mask, n[:, None], cols[None, :], d[:, None], h[:, None], w[:, None]
    else:
        h = rows % H
        rest = rows // H
        d = rest % D
        rest = rest // D
        c = rest % C
        n = rest // C
        return offsets, mask, n[:, None], c[:, None], d[:, None], h[:, None], cols[None, :]
