"""unique over all elements (``_unique2``): sorted values, inverse indices and counts.

Sort-based. The flattened input is sorted by one program with ``tl.sort`` over order keys
(floats through their bit pattern made monotonic: NaN last, as ATen sorts; -0.0 == 0.0);
inputs longer than ``MAX_SORT`` are sorted by ``torch.sort``. The first element of each run
of equal values is compacted out (masked.compact: the values and where each run starts);
counts are the distances between run starts, and each element's inverse index is a binary
search of its key among the unique values. NaNs are unequal, each its own value, as in
ATen. The result is sorted also for ``sorted=False`` (ATen's order is then unspecified).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import TL_DTYPES
from ..contract import KernelConfig
from ..host_math import cdiv, next_power_of_2
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .masked import BOUNDARY, compact

UNIQUE = Tunable(
    "unique",
    params=("BLOCK_SIZE",),
    defaults=[KernelConfig({"BLOCK_SIZE": 1024}, num_warps=4)],
    description="unique: counts and inverse-index searches, BLOCK_SIZE per program",
)

MAX_SORT = 4096
#: how a dtype's order key is made: integer value, float up to 32 bits, float64
_INT, _FLOAT32, _FLOAT64 = 0, 1, 2


@triton.jit
def _to_key(x, KIND: tl.constexpr):
    # an int64 whose order is x's (NaN greatest, -0.0 == 0.0)
    if KIND == 0:
        key = x.to(tl.int64)
    elif KIND == 1:
        f = x.to(tl.float32)
        f = tl.where(f == 0, 0.0, f)
        bits = f.to(tl.int32, bitcast=True)
        bits = tl.where(f != f, 0x7FC00000, bits)  # noqa: PLR0124 (NaN test)
        key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64)
    else:
        f = tl.where(x == 0, 0.0, x)
        bits = f.to(tl.int64, bitcast=True)
        bits = tl.where(f != f, 0x7FF8000000000000, bits)  # noqa: PLR0124 (NaN test)
        key = tl.where(bits < 0, bits ^ 0x7FFFFFFFFFFFFFFF, bits)
    return key


@triton.jit
def _from_key(key, KIND: tl.constexpr, DTYPE: tl.constexpr):
    if KIND == 0:
        value = key.to(DTYPE)
    elif KIND == 1:
        bits = key.to(tl.int32)
        bits = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
        value = bits.to(tl.float32, bitcast=True).to(DTYPE)
    else:
        bits = tl.where(key < 0, key ^ 0x7FFFFFFFFFFFFFFF, key)
        value = bits.to(tl.float64, bitcast=True)
    return value


@triton.jit
def _sort_kernel(
    x_ptr,  # (N,) contiguous
    out_ptr,  # (N,) contiguous: x sorted ascending
    N,
    KIND: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    key = _to_key(tl.load(x_ptr + cols, mask=mask), KIND)
    key = tl.sort(tl.where(mask, key, 0x7FFFFFFFFFFFFFFF))
    tl.store(out_ptr + cols, _from_key(key, KIND, out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _counts_kernel(
    starts_ptr,  # (U,) int64: where each run starts in the sorted input
    counts_ptr,  # (U,) int64
    U,
    N,
    BLOCK_SIZE: tl.constexpr,
):
    # counts[u] = starts[u + 1] - starts[u], with starts[U] = N
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < U
    start = tl.load(starts_ptr + offsets, mask=mask, other=0)
    end = tl.load(starts_ptr + offsets + 1, mask=offsets + 1 < U, other=N)
    tl.store(counts_ptr + offsets, end - start, mask=mask)


@triton.jit
def _inverse_kernel(
    x_ptr,  # (N,) contiguous
    unique_ptr,  # (U,) sorted, distinct
    inverse_ptr,  # (N,) int64
    N,
    U,
    steps,  # bit length of U
    KIND: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # inverse[n] = the first u with key(unique[u]) >= key(x[n]) (it is equal)
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    key = _to_key(tl.load(x_ptr + offsets, mask=mask), KIND)
    low = tl.zeros((BLOCK_SIZE,), tl.int64)
    high = tl.zeros((BLOCK_SIZE,), tl.int64) + U
    for _ in range(steps):
        mid = (low + high) // 2
        probe = _to_key(tl.load(unique_ptr + mid, mask=mask & (mid < high)), KIND)
        below = probe < key
        low = tl.where((mid < high) & below, mid + 1, low)
        high = tl.where((mid < high) & ~below, mid, high)
    tl.store(inverse_ptr + offsets, low, mask=mask)


_sort = LaunchCache(_sort_kernel, name="unique_sort")
_counts = LaunchCache(_counts_kernel, name="unique_counts")
# named as its tunable, so that the compile check finds the tunable's configs compiled
_inverse = LaunchCache(_inverse_kernel, name="unique")


def _kind(dtype: torch.dtype) -> int:
    if dtype == torch.float64:
        return _FLOAT64
    return _FLOAT32 if dtype.is_floating_point else _INT


@aten_op("_unique2")
def unique(
    self: torch.Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False
) -> Any:
    """(unique values ascending, inverse indices shaped like ``self`` or empty, counts or
    empty)."""
    if self.dtype not in TL_DTYPES:
        return NotImplemented
    device = self.device
    flat = self.contiguous().view(-1)
    n = flat.numel()
    kind = _kind(self.dtype)
    config = UNIQUE.choose("unique")
    block = config.params["BLOCK_SIZE"]
    common: dict[str, Any] = {"config": config, "options": UNIQUE.options()}
    if n > MAX_SORT:
        ordered = torch.sort(flat).values
    else:
        ordered = torch.empty_like(flat)
        if n:
            _sort((1,), flat, ordered, n, KIND=kind, BLOCK_N=next_power_of_2(n),
                  options=UNIQUE.options())
    starts, values = compact(ordered, ordered, BOUNDARY, want_index=return_counts)
    assert values is not None
    u = values.numel()
    inverse = torch.empty(self.shape if return_inverse else (0,), dtype=torch.int64, device=device)
    if return_inverse and n:
        _inverse((cdiv(n, block),), flat, values, inverse, n, u, u.bit_length(), KIND=kind, **common)
    counts = torch.empty(u if return_counts else 0, dtype=torch.int64, device=device)
    if return_counts and u:
        assert starts is not None
        _counts((cdiv(u, block),), starts, counts, u, n, **common)
    return values, inverse, counts
