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


@triton.jit
def _fmod_float64(x, y):
    """C's fmod of float64s by long division on their integer significands, exact on any
    target (no fused or flushed float arithmetic involved). |x| = mx 2^ex and |y| = my 2^ey
    with 53-bit integers mx, my (a subnormal's exponent field 0 read as 1, without the
    implicit bit); for |x| >= |y|, r = mx mod my, then the exponent gap ex - ey is taken in
    at most 10 bits a step, r = (r << s) mod my: r < my < 2^53, so r << 10 fits int64. One
    step per 10 bits of gap, as many as the block's largest gap needs (at most 205), lanes
    with less left shifting by 0. The result r 2^ey is below |y|, so a float64: r converts
    exactly (below 2^53) and moves by adding to its exponent field, or, where the result is
    subnormal, its bits are r 2^(ey - 1)."""
    xb = x.to(tl.int64, bitcast=True)
    yb = y.to(tl.int64, bitcast=True)
    ax = xb & 0x7FFFFFFFFFFFFFFF
    ay = yb & 0x7FFFFFFFFFFFFFFF
    # |x| < |y| (an infinite y included) leaves x; NaNs order above infinity as bits
    divides = (ay > 0) & (ax < 0x7FF0000000000000) & (ax >= ay)
    fx = ax >> 52
    fy = ay >> 52
    mx = tl.where(fx > 0, (ax & 0xFFFFFFFFFFFFF) | 0x10000000000000, ax)  # a subnormal's bits are mx
    my = tl.where(fy > 0, (ay & 0xFFFFFFFFFFFFF) | 0x10000000000000, ay)
    my = tl.where(divides, my, 1)  # no division by zero in lanes left out
    gap = tl.where(divides, tl.maximum(fx, 1) - tl.maximum(fy, 1), 0)
    r = tl.where(divides, mx % my, 0)
    for _ in range(tl.max((gap + 9) // 10)):
        s = tl.minimum(gap, 10)
        r = (r << s) % my
        gap = gap - s
    ey = tl.maximum(fy, 1)
    rb = r.to(tl.float64).to(tl.int64, bitcast=True)
    normal = (r > 0) & ((rb >> 52) + ey - 1075 > 0)
    m = tl.where(normal, rb + ((ey - 1075) << 52), r << tl.minimum(ey - 1, 52))
    m = tl.where(divides, m, ax).to(tl.float64, bitcast=True)
    m = tl.where((ay == 0) | (ay > 0x7FF0000000000000) | (ax >= 0x7FF0000000000000), float("nan"), m)
    return tl.where(xb < 0, -m, m)  # the sign of x, fmod(-0.0, y) = -0.0 included


@triton.jit
def fmod_fn(x, y):
    """C's fmod, exact, for integers and floats. Triton's ``%`` on floats compiles to
    ``x - trunc(x / y) * y`` on NVIDIA: wrong where the quotient passes 2^24 (2^53 in
    float64), and -inf for a subnormal divisor (libdevice's float32 fmod flushes those to
    zero). Below 64 bits, the divisor, scaled by a power of two to within 2^25 of the
    remainder, is taken out in float64, where every product and difference of such
    operands (24-bit significands) is exact; one step per 25 bits of quotient, as many as
    the block's largest quotient needs. float64 divides its integer significands
    (:func:`_fmod_float64`)."""
    if x.dtype == tl.float64:
        return _fmod_float64(x, y)
    elif x.dtype.is_floating():
        a = tl.abs(x).to(tl.float64)
        b = tl.abs(y).to(tl.float64)
        eb = (b.to(tl.int64, bitcast=True) >> 52) & 0x7FF
        finite = (b > 0) & (b < float("inf")) & (a < float("inf"))
        span = tl.where(finite, ((a.to(tl.int64, bitcast=True) >> 52) & 0x7FF) - eb, 0)
        r = tl.where(finite, a, 0.0)
        for _ in range(tl.max(tl.maximum(span, 0)) // 25 + 2):
            er = (r.to(tl.int64, bitcast=True) >> 52) & 0x7FF
            k = tl.maximum(er - eb - 25, 0)
            scaled = tl.where(finite, b * ((k + 1023) << 52).to(tl.float64, bitcast=True), 1.0)
            r = r - tl.math.floor(r / scaled) * scaled
            r = tl.where(r < 0, r + scaled, r)
        r = tl.where(b == float("inf"), a, r)
        r = tl.where((b == 0) | (a == float("inf")) | (x != x) | (y != y), float("nan"), r)
        return tl.where((x < 0) | ((x == 0) & (1.0 / x < 0)), -r, r).to(x.dtype)  # fmod(-0.0, y) is -0.0
    else:
        return x % y


@triton.jit
def floor_fn(x):
    """floor(x) for floats, a subnormal x included: libdevice's floor flushes subnormals to
    zero where Triton compiles for NVIDIA (floor(-tiny / 2) would be -0.0, not -1.0);
    comparisons keep them."""
    f = tl.math.floor(x)
    return tl.where((f == 0) & (x < 0), -1.0, f).to(x.dtype)


@triton.jit
def ceil_fn(x):
    """ceil(x) for floats, a subnormal x included (see :func:`floor_fn`)."""
    c = tl.math.ceil(x)
    return tl.where((c == 0) & (x > 0), 1.0, c).to(x.dtype)
