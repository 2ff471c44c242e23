"""unique over all elements (``_unique2``): sorted values, inverse indices and counts; and
``unique_consecutive`` (runs of equal values, flat or along a dim).

Sort-based. The flattened input is sorted by one program with ``tl.sort`` over order keys
(floats through their bit pattern made monotonic: NaN last, as ATen sorts; -0.0 == 0.0);
inputs longer than ``MAX_SORT`` are sorted by ``torch.sort``. The first element of each run
of equal values is compacted out (masked.compact: the values and where each run starts);
counts are the distances between run starts, and each element's inverse index is a binary
search of its key among the unique values. NaNs are unequal, each its own value, as in
ATen. The result is sorted also for ``sorted=False`` (ATen's order is then unspecified).

unique_consecutive needs no sort: the first element of each run (one that differs from its
predecessor: NaN from everything, -0.0 not from 0.0) is compacted out as above, and each
element's inverse index is a binary search of its position among the run starts. Along a
dim, the slices are rows of the tensor with that dim moved first; a kernel flags the rows
that differ from their predecessor anywhere, the flagged rows are compacted and gathered,
and inverse indices and counts follow as for elements (ATen's dim form returns both
always). Empty and 0-d inputs of the dim form, whose special cases ATen decides, go to it.
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
from .kernel_lib import comparable
from .masked import BOUNDARY, NONZERO, compact

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


@triton.jit
def _run_index_kernel(
    starts_ptr,  # (U,) int64: where each run starts, ascending, starts[0] == 0
    inverse_ptr,  # (N,) int64
    N,
    U,
    steps,  # bit length of U
    BLOCK_SIZE: tl.constexpr,
):
    # inverse[n] = (the number of starts <= n) - 1: the run that holds position n
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < N
    low = tl.zeros((BLOCK_SIZE,), tl.int64)
    high = tl.zeros((BLOCK_SIZE,), tl.int64) + U
    for _ in range(steps):
        open_range = low < high
        mid = (low + high) // 2
        start = tl.load(starts_ptr + mid, mask=mask & open_range, other=0)
        past = open_range & (start <= offsets)
        low = tl.where(past, mid + 1, low)
        high = tl.where(open_range & ~past, mid, high)
    tl.store(inverse_ptr + offsets, low - 1, mask=mask)


@triton.jit
def _row_flags_kernel(
    rows_ptr,  # (D, R) contiguous
    flags_ptr,  # (D,) int8: 1 where row d differs from row d - 1 (and for row 0)
    D,
    R,
    BLOCK_D: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_D + tl.arange(0, BLOCK_D)
    live = rows < D
    differs = rows == 0
    for start in range(0, R, BLOCK_R):
        cols = start + tl.arange(0, BLOCK_R)
        mask = (live & (rows > 0))[:, None] & (cols < R)[None, :]
        here = comparable(tl.load(rows_ptr + rows[:, None] * R + cols[None, :], mask=mask))
        above = comparable(tl.load(rows_ptr + (rows[:, None] - 1) * R + cols[None, :], mask=mask))
        differs = differs | (tl.max((mask & (here != above)).to(tl.int8), 1) > 0)
    tl.store(flags_ptr + rows, differs.to(tl.int8), mask=live)


_sort = LaunchCache(_sort_kernel, name="unique_sort")
_counts = LaunchCache(_counts_kernel, name="unique_counts")
_run_index = LaunchCache(_run_index_kernel, name="unique_run_index")
_row_flags = LaunchCache(_row_flags_kernel, name="unique_row_flags")
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


def _run_lengths(starts: torch.Tensor, n: int, return_inverse: bool, return_counts: bool,
                 inverse_shape: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(inverse, counts) of ``n`` positions in runs beginning at ``starts``: the run of each
    position shaped ``inverse_shape`` (empty unless ``return_inverse``), each run's length
    (empty unless ``return_counts``)."""
    device = starts.device
    u = starts.numel()
    config = UNIQUE.choose("unique")
    block = config.params["BLOCK_SIZE"]
    common: dict[str, Any] = {"config": config, "options": UNIQUE.options()}
    inverse = torch.empty(inverse_shape if return_inverse else (0,), dtype=torch.int64, device=device)
    if return_inverse and n:
        _run_index((cdiv(n, block),), starts, inverse, n, u, u.bit_length(), **common)
    counts = torch.empty(u if return_counts else 0, dtype=torch.int64, device=device)
    if return_counts and u:
        _counts((cdiv(u, block),), starts, counts, u, n, **common)
    return inverse, counts


def _consecutive_along(self: torch.Tensor, dim: int) -> Any:
    """unique_consecutive of the slices along ``dim`` of a non-empty tensor of 1 or more dims."""
    if not -self.dim() <= dim < self.dim():
        return NotImplemented  # ATen raises
    dim %= self.dim()
    moved = self.movedim(dim, 0)
    size = moved.shape[0]
    rows = moved.contiguous().view(size, -1)
    width = rows.shape[1]
    flags = torch.empty(size, dtype=torch.int8, device=self.device)
    block = UNIQUE.choose("unique").params["BLOCK_SIZE"]
    block_r = min(next_power_of_2(width), block)
    _row_flags((cdiv(size, block // block_r),), rows, flags, size, width, BLOCK_D=block // block_r,
               BLOCK_R=block_r, options=UNIQUE.options())
    starts, _ = compact(flags, None, NONZERO, want_index=True)
    assert starts is not None
    values = rows.index_select(0, starts).view(starts.numel(), *moved.shape[1:]).movedim(0, dim)
    return (values, *_run_lengths(starts, size, True, True, (size,)))


@aten_op("unique_consecutive")
def unique_consecutive(self: torch.Tensor, return_inverse: bool = False, return_counts: bool = False,
                       dim: int | None = None) -> Any:
    """(the first element of each run of equal elements, each element's run shaped like
    ``self`` or empty, run lengths or empty); along ``dim``, of runs of equal slices."""
    if self.dtype not in TL_DTYPES:
        return NotImplemented
    if dim is not None and not (dim == 0 and self.dim() == 1):
        if self.dim() == 0 or self.numel() == 0:
            return NotImplemented  # ATen's special cases (and errors)
        return _consecutive_along(self, dim)
    flat = self.contiguous().view(-1)
    n = flat.numel()
    starts, values = compact(flat, flat, BOUNDARY, want_index=return_inverse or return_counts)
    assert values is not None
    if starts is None:  # neither inverse indices nor counts asked for
        return (values, *(torch.empty(0, dtype=torch.int64, device=self.device) for _ in range(2)))
    return (values, *_run_lengths(starts, n, return_inverse, return_counts, self.shape))
