"""topk: the k largest (or smallest) entries along a dim, with their indices, and its out=.

Each entry becomes a 64-bit key whose descending order is the order topk returns: its value's
order in the high 32 bits (floats through their bit pattern, made monotonic; NaN above +inf,
as ATen orders it; complemented for ``largest=False``) and ``2**32 - 1`` minus its position
in the row in the low 32 bits, so equal values come out in index order. Results are always
sorted.

Rows of up to ``MAX_ROW`` entries: one program per row takes the best k keys through a
bitonic top-k network (:func:`_best_keys`, greatest first), over groups' maxima first and
then over the leading groups' entries where that is smaller (:func:`_best_in_row`). The
network is ours rather than ``tl.topk``: Triton's finds exchange partners through an xor
reduction, which the interpreter runs element by element (minutes for one row of a few
thousand entries); ours reduces with a sum, which it runs in numpy, and compiles the same.

Longer rows (LLM sampling over vocabularies of 32000-128256) take two stages:

1. the row is cut into chunks of ``CHUNK`` entries (a power of two up to 2**14, the
   ``topk_chunk`` tunable); one program per chunk writes the keys of its chunk's best k
   entries, unsorted, with no sort: the k-th greatest order is found by bisection, one
   count over the chunk per step (:func:`_select_in_chunk`). The keys carry the entries'
   positions in the whole row;
2. one program per row takes the best k of the chunks' ``chunks * k`` candidate keys through
   the network and writes their values (read back from the input by index) and indices.

Where the candidates are still more than ``MAX_ROW``, stage 1 runs again over them (on keys
now) until they fit one program. Such rows go to ATen where no config can serve them: ``k``
above ``CHUNK``, or a round that would not shrink the candidates (``k`` close to ``CHUNK``),
or rows of ``2**31`` entries or more (positions must fit the low 32 bits). 64-bit dtypes,
whose order does not fit in 32 bits, always go to ATen. ``MAX_ROW`` is read per call, so
tests can lower it and force a small ``CHUNK`` through :func:`gems_core.tuning.forcing` to
take the two-stage path on short rows.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl
from triton.runtime.jit import constexpr_function

from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .indexing import three_axis_view, wrap_dim
from .masked import write_out

TOPK = Tunable(
    "topk",
    params=(),
    defaults=[KernelConfig({}, num_warps=4)],
    description="topk: one program selects from one whole row (or a long row's candidates)",
)
TOPK_CHUNK = Tunable(
    "topk_chunk",
    params=("CHUNK",),
    defaults=[KernelConfig({"CHUNK": 4096}, num_warps=4, num_stages=1)],
    description="topk of rows longer than MAX_ROW, stage 1: one program selects the best k of CHUNK "
    "entries (CHUNK a power of two <= 2**14)",
)

#: the longest row one program selects from (read per call: tests lower it)
MAX_ROW = 8192
#: rows from this length on go to ATen: a key keeps the position in its low 32 bits
_MAX_POSITIONS = 2**31
_KEYED = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int16, torch.int8, torch.uint8)
#: the least 64-bit key: padding, never selected ahead of an entry
_NO_KEY: tl.constexpr = tl.constexpr(-(2**63))


@triton.jit
def order_key(x, IS_FLOAT: tl.constexpr):
    """An int32 whose signed order is x's order (NaN greatest, -0.0 == 0.0)."""
    if IS_FLOAT:
        f = x.to(tl.float32)
        f = tl.where(f == 0, 0.0, f)
        bits = f.to(tl.int32, bitcast=True)
        bits = tl.where(f != f, 0x7FC00000, bits)  # noqa: PLR0124 (NaN test)
        key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    else:
        key = x.to(tl.int32)
    return key


@triton.jit
def _entry_order(x, LARGEST: tl.constexpr, IS_FLOAT: tl.constexpr):
    """An int32 whose signed order is topk's order of entries ``x`` (greater first)."""
    order = order_key(x, IS_FLOAT)
    if not LARGEST:
        order = ~order
    return order


@triton.jit
def _entry_key(order, position, valid):
    """The 64-bit key of an entry of ``order`` at row ``position`` (int64, < 2**31): the
    order high, ``2**32 - 1 - position`` low (the first of equal entries greater); the least
    key where not ``valid``."""
    return tl.where(valid, (order.to(tl.int64) << 32) | (0xFFFFFFFF - position), _NO_KEY)


@triton.jit
def _keys_at(base, position, valid, stride_n, LARGEST: tl.constexpr, IS_FLOAT: tl.constexpr,
             FROM_KEYS: tl.constexpr):
    """The keys of a row's ``position``s read from ``base``: entries made into keys, or
    (``FROM_KEYS``) keys of an earlier round; the least key where not ``valid``."""
    position = position.to(tl.int64)  # offsets of strided rows may pass 2**31
    if FROM_KEYS:
        key = tl.load(base + position * stride_n, mask=valid, other=_NO_KEY)
    else:
        x = tl.load(base + position * stride_n, mask=valid, other=0)
        key = _entry_key(_entry_order(x, LARGEST, IS_FLOAT), position, valid)
    return key


@constexpr_function
def _log2(n):
    return int(n).bit_length() - 1


@triton.jit
def _position_bit(DIMS: tl.constexpr, BIT: tl.constexpr):
    """Bit ``BIT`` of each position of a hypercube of ``DIMS`` axes of 2 (axis 0 holds the
    highest bit), as a tensor that broadcasts against it."""
    return tl.reshape(tl.arange(0, 2), [1] * (DIMS - 1 - BIT) + [2] + [1] * BIT)


@triton.jit
def _exchange(h, DIMS: tl.constexpr, BIT: tl.constexpr, ascending):
    """One compare-exchange of a bitonic network: the keys at positions differing in bit
    ``BIT`` are put in order, the greater first where ``ascending`` is 0, last where 1."""
    # the partner's key: the pair's sum (wrapping) less one's own, one reduction over the pair
    partner = tl.sum(h, axis=DIMS - 1 - BIT, keep_dims=True) - h
    take_greater = _position_bit(DIMS, BIT) == ascending
    return tl.where((h < partner) == take_greater, partner, h)


@triton.jit
def _merge(h, DIMS: tl.constexpr, BLOCK_BITS: tl.constexpr, ascending):
    """Sort each bitonic run of 2**BLOCK_BITS keys of hypercube ``h`` (see :func:`_exchange`)."""
    for step in tl.static_range(BLOCK_BITS):
        h = _exchange(h, DIMS, BLOCK_BITS - 1 - step, ascending)
    return h


@triton.jit
def _best_keys(keys, K_PAD: tl.constexpr):
    """The ``K_PAD`` greatest of ``keys`` (1-D, a power-of-two length >= K_PAD >= 2),
    greatest first.

    Runs of K_PAD keys are sorted, alternately descending and ascending; then, while more
    than one run is left, each descending run and the ascending run after it are replaced by
    their elementwise maximum, which holds the greater half of the pair's keys as a bitonic
    run, and that run is sorted again. Every step reduces or compares along one axis of a
    hypercube of 2**DIMS keys, so the compiler keeps the keys in registers."""
    DIMS: tl.constexpr = _log2(keys.shape[0])
    LOG_K: tl.constexpr = _log2(K_PAD)
    h = tl.reshape(keys, [2] * DIMS)
    for bits in tl.static_range(1, LOG_K + 1):  # runs of 2**bits, direction from bit `bits`
        if bits < DIMS:
            h = _merge(h, DIMS, bits, _position_bit(DIMS, bits))
        else:
            h = _merge(h, DIMS, bits, 0)
    for left in tl.static_range(DIMS - 1, LOG_K - 1, -1):  # axes left after each halving
        h = tl.max(h, axis=left - LOG_K)  # the runs of a pair differ in bit LOG_K
        if left > LOG_K:
            h = _merge(h, left, LOG_K, _position_bit(left, LOG_K))
        else:
            h = _merge(h, left, LOG_K, 0)
    return tl.reshape(h, [K_PAD])


@triton.jit
def _best_in_row(
    base, N, stride_n, LARGEST: tl.constexpr, IS_FLOAT: tl.constexpr, FROM_KEYS: tl.constexpr,
    BLOCK: tl.constexpr, K_PAD: tl.constexpr, GROUP: tl.constexpr,
):
    """The K_PAD best keys (greatest first) of the N entries (or keys) of a row, N <= BLOCK.

    With GROUP > 1 the positions are taken in groups of GROUP: the K_PAD groups with the
    greatest maxima hold every one of the K_PAD best keys (a key outside them is exceeded by
    all K_PAD of those maxima), so only their K_PAD * GROUP keys are read again and go
    through the second network: two networks over BLOCK / GROUP and K_PAD * GROUP keys
    instead of one over BLOCK. A group is found from its maximum's position (the key's low
    bits), so ``FROM_KEYS`` rows, whose keys carry positions in the original row, take
    GROUP == 1."""
    if GROUP == 1:
        position = tl.arange(0, BLOCK)
        key = _keys_at(base, position, position < N, stride_n, LARGEST, IS_FLOAT, FROM_KEYS)
        best = _best_keys(key, K_PAD)
    else:
        member = tl.arange(0, GROUP)[None, :]
        position = tl.arange(0, BLOCK // GROUP)[:, None] * GROUP + member
        key = _keys_at(base, position, position < N, stride_n, LARGEST, IS_FLOAT, FROM_KEYS)
        leaders = _best_keys(tl.max(key, axis=1), K_PAD)
        # the first position of each leader's group (groups of padding only: nothing to read)
        found = (leaders != _NO_KEY)[:, None]
        first = (0xFFFFFFFF - (leaders & 0xFFFFFFFF)) // GROUP * GROUP
        position = first[:, None] + member
        key = _keys_at(base, position, found & (position < N), stride_n, LARGEST, IS_FLOAT, FROM_KEYS)
        best = _best_keys(tl.reshape(key, [K_PAD * GROUP]), K_PAD)
    return best


@triton.jit
def _select_in_chunk(
    base, start, N, stride_n, out_ptr, counter_ptr, K, LARGEST: tl.constexpr, IS_FLOAT: tl.constexpr,
    FROM_KEYS: tl.constexpr, CHUNK: tl.constexpr, GROUPS: tl.constexpr, LOW_BIT: tl.constexpr,
):
    """Write the K best keys of row positions [start, start + CHUNK) below N to out_ptr[0:K],
    in no particular order (padding keys where fewer than K are below N); ``counter_ptr``
    points to a zero int32 of this chunk's own.

    No sort: the K-th greatest rank (an entry's order, or a ``FROM_KEYS`` key, as an unsigned
    number) is found by bisection, each step one count over the chunk, from a bracket that
    the maxima of GROUPS >= K groups give, stopping early once exactly K ranks are at or
    above the lower end. Where more ranks tie at the threshold than are wanted, those kept
    are the first by position (the index order of equal entries), found bit by bit over the
    position in the chunk. Each kept key takes its slot from an atomic count. ``LOW_BIT``:
    the order's low bits that are the same for every entry of the dtype (fp16 and bf16
    widened to fp32), dropped from the rank."""
    local = tl.arange(0, CHUNK)
    position = start + local.to(tl.int64)
    valid = position < N
    # only the ranks stay live through the search: the keys are made again from them
    if FROM_KEYS:
        key = tl.load(base + position * stride_n, mask=valid, other=_NO_KEY)
        rank = (key ^ _NO_KEY).to(tl.uint64, bitcast=True)  # padding: 0
    else:
        order = _entry_order(tl.load(base + position * stride_n, mask=valid, other=0), LARGEST, IS_FLOAT)
        rank = tl.where(valid, (order ^ -0x80000000).to(tl.uint32, bitcast=True) >> LOW_BIT, 0)
    # the threshold (the K-th greatest rank) lies in [low, high]: at least GROUPS >= K ranks
    # (the groups' maxima) are >= low; none is above high
    maxima = tl.max(tl.reshape(rank, [GROUPS, CHUNK // GROUPS]), axis=1)
    low = tl.min(maxima, axis=0)
    high = tl.max(maxima, axis=0)
    at_low = tl.full([], -1, tl.int32)  # ranks >= low, where counted
    while (low < high) & (at_low != K):
        span = high - low
        middle = low + (span >> 1) + (span & 1)  # > low; no overflow
        count = tl.sum((rank >= middle).to(tl.int32), axis=0)
        low = tl.where(count >= K, middle, low)
        at_low = tl.where(count >= K, count, at_low)
        high = tl.where(count >= K, high, middle - 1)
    threshold = low
    # every rank above the threshold is kept, and the first `need` of the ties at it
    above = rank > threshold
    tie = rank == threshold
    counts = tl.sum(above.to(tl.int32) + (tie.to(tl.int32) << 16), axis=0)  # CHUNK <= 2**14
    need = K - (counts & 0xFFFF)
    search = need < (counts >> 16)
    # `last`: the local position of the last tie kept (the need-th), where not all are
    last = tl.where(search, 0, CHUNK - 1)
    bit = tl.where(search, _log2(CHUNK) - 1, -1)
    while bit >= 0:
        trial = last | (1 << bit)
        count = tl.sum((tie & (local < trial)).to(tl.int32), axis=0)
        last = tl.where(count < need, trial, last)
        bit -= 1
    keep = above | (tie & (local <= last))
    if FROM_KEYS:
        key = rank.to(tl.int64, bitcast=True) ^ _NO_KEY
    else:
        # the dropped low bits were all ones where the order is negative, else zeros
        order = (rank << LOW_BIT).to(tl.int32, bitcast=True) ^ -0x80000000
        if LOW_BIT > 0:
            order = tl.where(order < 0, order | ((1 << LOW_BIT) - 1), order)
        key = _entry_key(order, position, valid)
    slot = tl.atomic_add(counter_ptr + tl.zeros_like(local), 1, mask=keep, sem="relaxed")
    tl.store(out_ptr + slot, key, mask=keep)


@triton.jit
def _topk_chunk_kernel(
    src_ptr,  # (OUTER, N, INNER) through strides; row r = o * INNER + i
    keys_ptr,  # (rows, CHUNKS, K) int64, contiguous: each chunk's best K keys, unsorted
    counters_ptr,  # (rows, CHUNKS) int32, zeros
    N,
    CHUNKS,
    K,
    INNER,
    stride_o,
    stride_n,
    stride_i,
    LARGEST: tl.constexpr,
    IS_FLOAT: tl.constexpr,
    FROM_KEYS: tl.constexpr,  # src holds keys of an earlier round (int64), not entries
    CHUNK: tl.constexpr,  # a power of two <= 2**14, >= K
    K_PAD: tl.constexpr,  # a power of two >= K, >= 2, <= CHUNK
    LOW_BIT: tl.constexpr,  # see _select_in_chunk
):
    # program (r, c) keeps the best K keys of row r's entries [c * CHUNK, (c + 1) * CHUNK)
    pid = tl.program_id(0).to(tl.int64)
    row = pid // CHUNKS
    base = src_ptr + (row // INNER) * stride_o + (row % INNER) * stride_i
    _select_in_chunk(
        base, (pid % CHUNKS) * CHUNK, N, stride_n, keys_ptr + pid * K, counters_ptr + pid, K,
        LARGEST, IS_FLOAT, FROM_KEYS, CHUNK, K_PAD, LOW_BIT,
    )


@triton.jit
def _topk_kernel(
    keys_ptr,  # FROM_KEYS: (rows, N) int64 candidate keys, contiguous; else unused (x_ptr)
    x_ptr,  # (OUTER, size, INNER) through strides; row r = o * INNER + i
    values_ptr,  # (OUTER, K, INNER) contiguous
    indices_ptr,  # (OUTER, K, INNER) contiguous, int64
    N,  # entries (or candidate keys) per row
    K,
    INNER,
    stride_o,
    stride_n,
    stride_i,
    LARGEST: tl.constexpr,
    IS_FLOAT: tl.constexpr,
    FROM_KEYS: tl.constexpr,
    BLOCK_N: tl.constexpr,  # a power of two >= N, >= K_PAD
    K_PAD: tl.constexpr,  # a power of two >= K, >= 2
    GROUP: tl.constexpr,  # see _best_in_row; 1 where FROM_KEYS
):
    # values[o, :, i] = the K greatest (LARGEST) or least of x[o, :, i], sorted; indices where
    row = tl.program_id(0).to(tl.int64)
    o = row // INNER
    i = row % INNER
    base = x_ptr + o * stride_o + i * stride_i
    if FROM_KEYS:
        best = _best_in_row(keys_ptr + row * N, N, 1, LARGEST, IS_FLOAT, True, BLOCK_N, K_PAD, 1)
    else:
        best = _best_in_row(base, N, stride_n, LARGEST, IS_FLOAT, False, BLOCK_N, K_PAD, GROUP)
    index = 0xFFFFFFFF - (best & 0xFFFFFFFF)
    j = tl.arange(0, K_PAD)
    keep = j < K
    out = o * K * INNER + j.to(tl.int64) * INNER + i
    tl.store(values_ptr + out, tl.load(base + index * stride_n, mask=keep), mask=keep)
    tl.store(indices_ptr + out, index, mask=keep)


_launch = LaunchCache(_topk_kernel, name="topk")
_launch_chunk = LaunchCache(_topk_chunk_kernel, name="topk_chunk")
_FROM_KEYS = {"LARGEST": True, "IS_FLOAT": False, "FROM_KEYS": True}
#: low bits of order_key that are the same for every entry (16-bit floats widened to fp32)
_LOW_BITS = {torch.float16: 13, torch.bfloat16: 16}
#: the largest CHUNK: _select_in_chunk adds up two counts in one int32
_MAX_CHUNK = 2**14


def _group(block: int, k_pad: int) -> int:
    """The group size of :func:`_best_in_row` for a block of ``block`` entries: the largest
    power of two g with g * g * k_pad <= block (the two networks, over block / g and
    k_pad * g keys, then as even as powers of two allow); 1 where grouping saves nothing."""
    group = 1
    while 4 * group * group * k_pad <= block:
        group *= 2
    return group


def _rounds(size: int, k: int, chunk: int, max_row: int) -> list[int] | None:
    """The chunks per row of each stage-1 round that brings a row of ``size`` entries down to
    at most ``max_row`` candidate keys; None where that cannot be done (``k > chunk``, a
    round that would not shrink the candidates, a ``chunk`` that is not a power of two in
    [2, 2**14])."""
    if not 2 <= chunk <= _MAX_CHUNK or chunk & (chunk - 1) or k > chunk or size >= _MAX_POSITIONS:
        return None
    rounds: list[int] = []
    n = size
    while n > max_row:
        chunks = cdiv(n, chunk)
        if chunks * k >= n:
            return None
        rounds.append(chunks)
        n = chunks * k
    return rounds


def _long_rows(
    src: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, size: int, k: int, rows: int,
    inner: int, stride_o: int, stride_n: int, stride_i: int, largest: bool,
) -> bool:
    """Two-stage topk of rows longer than ``MAX_ROW`` into ``values``/``indices``; False
    (nothing launched) where no config of ``topk_chunk`` can serve the shape."""
    max_row = MAX_ROW

    def admit(config: KernelConfig) -> bool:
        plan = _rounds(size, k, config.params["CHUNK"], max_row)
        return plan is not None and rows * plan[0] < 2**31  # programs of the first round

    def run(config: KernelConfig) -> None:
        chunk = config.params["CHUNK"]
        k_pad = max(2, next_power_of_2(k))
        keys, n = src, size
        geometry = (inner, stride_o, stride_n, stride_i)
        # LARGEST and IS_FLOAT only shape the keys made from entries: fixed where keys are read
        flags = {"LARGEST": largest, "IS_FLOAT": src.dtype.is_floating_point, "FROM_KEYS": False}
        for chunks in _rounds(size, k, chunk, max_row) or ():
            out = torch.empty((rows, chunks * k), dtype=torch.int64, device=src.device)
            counters = torch.zeros(rows * chunks, dtype=torch.int32, device=src.device)
            _launch_chunk(
                (rows * chunks,), keys, out, counters, n, chunks, k, *geometry,
                config=config, options=TOPK_CHUNK.options(), CHUNK=chunk, K_PAD=k_pad,
                LOW_BIT=0 if flags["FROM_KEYS"] else _LOW_BITS.get(src.dtype, 0), **flags,
            )
            keys, n = out, chunks * k
            geometry = (1, n, 1, 0)  # rows of the contiguous candidates
            flags = _FROM_KEYS
        _launch(
            (rows,), keys, src, values, indices, n, k, inner, stride_o, stride_n, stride_i,
            config=TOPK.choose("topk"), options=TOPK.options(), BLOCK_N=max(k_pad, next_power_of_2(n)),
            K_PAD=k_pad, GROUP=1, **_FROM_KEYS,
        )

    def bench(config: KernelConfig) -> float:
        from .reduction import bench_ms

        return bench_ms(lambda: run(config))

    key = ("long", str(src.dtype), rows.bit_length(), size.bit_length(), k, stride_n == 1)
    config = TOPK_CHUNK.choose(key, bench, admit)
    if not admit(config):  # the bucket's choice does not fit this very shape
        config = next((c for c in TOPK_CHUNK.configs() if admit(c)), None)
        if config is None:
            return False
    run(config)
    return True


def _topk(
    self: torch.Tensor, k: int, dim: int, largest: bool, values: torch.Tensor | None = None,
    indices: torch.Tensor | None = None,
) -> Any:
    dim = wrap_dim(dim, self.dim())
    size = self.size(dim) if self.dim() else 1
    if not 0 <= k <= size:
        raise RuntimeError("selected index k out of range")
    if self.dtype not in _KEYED:
        return NotImplemented
    long_rows = size > MAX_ROW
    if long_rows and (k > max(c.params["CHUNK"] for c in TOPK_CHUNK.configs()) or size >= _MAX_POSITIONS):
        return NotImplemented  # before allocating: no config can serve it
    shape = list(self.shape)
    if shape:
        shape[dim] = k
    out_values = torch.empty(shape, dtype=self.dtype, device=self.device)
    out_indices = torch.empty(shape, dtype=torch.int64, device=self.device)
    rows = self.numel() // size if size else 0
    if k and rows:
        src, _, inner, stride_o, stride_i = three_axis_view(self if self.dim() else self.view(1), dim)
        stride_n = src.stride(dim)
        if long_rows:
            if not _long_rows(src, out_values, out_indices, size, k, rows, inner, stride_o, stride_n,
                              stride_i, largest):
                return NotImplemented
        else:
            k_pad = max(2, next_power_of_2(k))
            block = max(k_pad, next_power_of_2(size))
            _launch(
                (rows,), src, src, out_values, out_indices, size, k, inner, stride_o, stride_n, stride_i,
                config=TOPK.choose("topk"), options=TOPK.options(), LARGEST=largest,
                IS_FLOAT=self.dtype.is_floating_point, FROM_KEYS=False, BLOCK_N=block, K_PAD=k_pad,
                GROUP=_group(block, k_pad),
            )
    if values is None or indices is None:
        return out_values, out_indices
    return write_out(values, out_values), write_out(indices, out_indices)


@aten_op("topk")
def topk(self: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    """(values, indices) of the ``k`` greatest (``largest``) or least entries along ``dim``;
    sorted whatever ``sorted`` says."""
    return _topk(self, k, dim, largest)


@aten_op("topk.values")
def topk_out(
    self: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, *,
    values: torch.Tensor, indices: torch.Tensor,
) -> Any:
    if values.dtype != self.dtype or indices.dtype != torch.int64:
        return NotImplemented  # ATen raises for mismatched out dtypes
    return _topk(self, k, dim, largest, values, indices)
