"""masked_fill (Scalar and Tensor value, in place and not), masked_select and nonzero.

masked_fill is elementwise (the pointwise generator). masked_select and nonzero compact the
elements a flag selects, in row-major order, with three kernels: each block counts its flags,
one program turns the counts into exclusive block offsets (and the total, read back once
to size the output, as ATen does), then each block scans its flags and writes its selected
elements at their offsets. :func:`compact` is shared with ``unique`` and ``masked_scatter``;
:func:`read_back` and :func:`sized_result` with every op whose result size a kernel computes.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import triton
import triton.language as tl

from .. import runtime
from ..codegen.layout import broadcast_shapes
from ..codegen.pointwise import TL_DTYPES, pointwise
from ..contract import KernelConfig
from ..host_math import cdiv
from ..launch_cache import LaunchCache
from ..registry import aten_op
from ..tuning import Tunable
from .factory import converted_value
from .kernel_lib import comparable, program_offsets

COMPACT = Tunable(
    "compact",
    params=("BLOCK_SIZE",),
    defaults=[KernelConfig({"BLOCK_SIZE": 1024}, num_warps=4)],
    description="masked_select/nonzero/unique: BLOCK_SIZE flags counted and scanned per program",
)

_INT32 = 2**31 - 1
#: what makes an element selected: nonzero, or differing from its predecessor (sorted input)
NONZERO, BOUNDARY = 0, 1


@pointwise(kind="NO_OPMATH", promote=(0,), extras=("value",), aliased_output=True)
@triton.jit
def _masked_fill(x, mask, value):
    # out = mask ? value : x   (mask bool, broadcast to x)
    return tl.where(mask, value, x)


@pointwise(kind="NO_OPMATH", promote=(0,), aliased_output=True)
@triton.jit
def _masked_fill_tensor(x, mask, value):
    # as _masked_fill, with value a 0-d tensor on the device
    return tl.where(mask, value, x)


@pointwise(kind="NO_OPMATH", extras=("divisor", "size"))
@triton.jit
def _coordinate(flat, divisor, size):
    # one dim's index of a row-major flat index
    return (flat // divisor) % size


@triton.jit
def _flags(flag_ptr, offsets, mask, FLAG: tl.constexpr):
    if FLAG == 0:
        selected = tl.load(flag_ptr + offsets, mask=mask, other=0) != 0
    else:
        value = comparable(tl.load(flag_ptr + offsets, mask=mask))
        previous = comparable(tl.load(flag_ptr + offsets - 1, mask=mask & (offsets > 0)))
        selected = (offsets == 0) | (value != previous)
    return selected & mask


@triton.jit
def _count_kernel(
    flag_ptr,  # (numel,) contiguous
    counts_ptr,  # (blocks,) int64: flags per block
    numel,
    FLAG: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    pid = tl.program_id(0)
    offsets = program_offsets(BLOCK_SIZE, INT64)
    selected = _flags(flag_ptr, offsets, offsets < numel, FLAG)
    tl.store(counts_ptr + pid, tl.sum(selected.to(tl.int64), 0))


@triton.jit
def _scan_kernel(
    counts_ptr,  # (blocks,) int64
    offsets_ptr,  # (blocks + 1,) int64: exclusive prefix sums, then the total
    blocks,
    BLOCK_SIZE: tl.constexpr,
):
    # one program: offsets[b] = sum(counts[:b]); offsets[blocks] = sum(counts)
    carry = tl.zeros((), tl.int64)
    for start in range(0, blocks, BLOCK_SIZE):
        index = start + tl.arange(0, BLOCK_SIZE)
        mask = index < blocks
        counts = tl.load(counts_ptr + index, mask=mask, other=0)
        tl.store(offsets_ptr + index, carry + tl.cumsum(counts, 0) - counts, mask=mask)
        carry += tl.sum(counts, 0)
    tl.store(offsets_ptr + blocks, carry)


@triton.jit
def _compact_kernel(
    flag_ptr,  # (numel,) contiguous
    value_ptr,  # (numel,) contiguous: the values written for selected elements
    offsets_ptr,  # (blocks + 1,) int64 from _scan_kernel
    index_out_ptr,  # (total,) int64: flat index of each selected element
    value_out_ptr,  # (total,): its value
    numel,
    FLAG: tl.constexpr,
    WRITE_INDEX: tl.constexpr,
    WRITE_VALUE: tl.constexpr,
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # the k-th selected element (row-major) goes to position k of the outputs
    pid = tl.program_id(0)
    offsets = program_offsets(BLOCK_SIZE, INT64)
    selected = _flags(flag_ptr, offsets, offsets < numel, FLAG)
    ones = selected.to(tl.int64)
    position = tl.load(offsets_ptr + pid) + tl.cumsum(ones, 0) - ones
    if WRITE_INDEX:
        tl.store(index_out_ptr + position, offsets.to(tl.int64), mask=selected)
    if WRITE_VALUE:
        tl.store(value_out_ptr + position, tl.load(value_ptr + offsets, mask=selected), mask=selected)


def read_back(value: torch.Tensor, stand_in: int) -> int:
    """The one-element ``value`` a kernel computed (a result size, a smallest entry), read
    back to the host. In compile-only execution that kernel did not run and ``value`` holds
    whatever the memory held: ``stand_in`` instead (a value it can take, such as a size's
    upper bound), so the kernels that follow compile with realistic arguments."""
    return stand_in if runtime.current().compile_only else int(value.item())


def sized_result(size: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialized result for kernels to fill, sized by :func:`read_back`. Zeros in
    compile-only execution, where no kernel fills it: host code that reads it (an index
    check, where the result indexes a tensor) meets valid values, not stale memory."""
    if runtime.current().compile_only:
        return torch.zeros(size, dtype=dtype, device=device)
    return torch.empty(size, dtype=dtype, device=device)


_count = LaunchCache(_count_kernel, name="compact_count")
_scan = LaunchCache(_scan_kernel, name="compact_scan")
# named as its tunable, so that the compile check finds the tunable's configs compiled
_compact = LaunchCache(_compact_kernel, name="compact")


def compact(
    flags: torch.Tensor, values: torch.Tensor | None, flag: int, want_index: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(flat indices, values) of the elements of the contiguous 1-d ``flags`` that ``flag``
    selects (NONZERO, or BOUNDARY of a sorted run), in order. Syncs once for the count (in
    compile-only execution, where nothing counts, its upper bound: every element)."""
    numel = flags.numel()
    config = COMPACT.choose("compact")
    block = config.params["BLOCK_SIZE"]
    blocks = cdiv(numel, block)
    device = flags.device
    common: dict[str, Any] = {"config": config, "options": COMPACT.options(), "FLAG": flag}
    counts = torch.empty(blocks, dtype=torch.int64, device=device)
    offsets = torch.empty(blocks + 1, dtype=torch.int64, device=device)
    int64 = numel > _INT32
    _count((blocks,), flags, counts, numel, INT64=int64, **common)
    _scan((1,), counts, offsets, blocks, config=config, options=COMPACT.options())
    total = read_back(offsets[blocks], numel)
    index = sized_result(total, torch.int64, device) if want_index else None
    selected = sized_result(total, values.dtype, device) if values is not None else None
    if total:
        _compact(
            (blocks,), flags, values if values is not None else flags, offsets,
            index if index is not None else counts, selected if selected is not None else flags,
            numel, WRITE_INDEX=want_index, WRITE_VALUE=values is not None, INT64=int64, **common,
        )
    return index, selected


def _fill_value(self: torch.Tensor, value: Any) -> Any:
    if self.dtype not in TL_DTYPES:
        return None
    return converted_value(value, self.dtype)


@aten_op("masked_fill_.Scalar")
def masked_fill_(self: torch.Tensor, mask: torch.Tensor, value: Any) -> Any:
    """``self[mask] = value``, ``mask`` broadcast to ``self``."""
    fill = _fill_value(self, value)
    if mask.dtype != torch.bool or fill is None:
        return NotImplemented  # ATen raises for a non-bool mask
    _warn_expanded(self)
    return _masked_fill.inplace(self, mask, value=fill)


def _warn_expanded(self: torch.Tensor) -> None:
    """ATen fills an expanded tensor in place, with this warning."""
    if torch._debug_has_internal_overlap(self) == 1:
        warnings.warn(
            "Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before "
            "performing this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar",
            UserWarning, stacklevel=3,
        )


def _check_value_tensor(value: torch.Tensor) -> None:
    if value.dim() != 0:
        raise RuntimeError(
            "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
            f"{value.dim()} dimension(s)."
        )


@aten_op("masked_fill_.Tensor")
def masked_fill_tensor_(self: torch.Tensor, mask: torch.Tensor, value: torch.Tensor) -> Any:
    _check_value_tensor(value)
    if value.device.type == "cpu":
        return masked_fill_(self, mask, value.item())
    if mask.dtype != torch.bool or self.dtype not in TL_DTYPES or value.dtype not in TL_DTYPES:
        return NotImplemented
    _warn_expanded(self)
    return _masked_fill_tensor.inplace(self, mask, value)


def _out_of_place(self: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    shape = broadcast_shapes([tuple(self.shape), tuple(mask.shape)])
    return torch.empty(shape, dtype=self.dtype, device=self.device)


@aten_op("masked_fill.Scalar")
def masked_fill(self: torch.Tensor, mask: torch.Tensor, value: Any) -> Any:
    """A copy of ``self`` (broadcast with ``mask``) with ``value`` where ``mask`` holds."""
    fill = _fill_value(self, value)
    if mask.dtype != torch.bool or fill is None:
        return NotImplemented
    return _masked_fill(self, mask, value=fill, out=_out_of_place(self, mask))


@aten_op("masked_fill.Tensor")
def masked_fill_tensor(self: torch.Tensor, mask: torch.Tensor, value: torch.Tensor) -> Any:
    _check_value_tensor(value)
    if value.device.type == "cpu":
        return masked_fill(self, mask, value.item())
    if mask.dtype != torch.bool or self.dtype not in TL_DTYPES or value.dtype not in TL_DTYPES:
        return NotImplemented
    return _masked_fill_tensor(self, mask, value, out=_out_of_place(self, mask))


def _masked_select(self: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    if mask.dtype != torch.bool or self.dtype not in TL_DTYPES:
        return None  # ATen raises for a non-bool mask
    shape = broadcast_shapes([tuple(self.shape), tuple(mask.shape)])
    values = self.expand(shape).contiguous().view(-1)
    flags = mask.expand(shape).contiguous().view(-1)
    _, selected = compact(flags, values, NONZERO, want_index=False)
    assert selected is not None
    return selected


@aten_op("masked_select")
def masked_select(self: torch.Tensor, mask: torch.Tensor) -> Any:
    """The elements of ``self`` (broadcast with ``mask``) where ``mask`` holds, as 1-d."""
    result = _masked_select(self, mask)
    return NotImplemented if result is None else result


def write_out(out: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """Copy ``result`` into ``out``, resized (with ATen's warning when it held elements)."""
    if out.shape != result.shape:
        if out.numel():
            warnings.warn(
                f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
                f"which does not match the required output shape {list(result.shape)}.",
                UserWarning, stacklevel=3,
            )
        out.resize_(result.shape)
    return out.copy_(result)


@aten_op("masked_select.out")
def masked_select_out(self: torch.Tensor, mask: torch.Tensor, *, out: torch.Tensor) -> Any:
    if out.dtype != self.dtype:
        return NotImplemented  # ATen raises: self and result must have the same scalar type
    result = _masked_select(self, mask)
    return NotImplemented if result is None else write_out(out, result)


def _nonzero(self: torch.Tensor) -> torch.Tensor | None:
    if self.dtype not in TL_DTYPES:
        return None
    flat, _ = compact(self.contiguous().view(-1), None, NONZERO, want_index=True)
    assert flat is not None
    result = sized_result((flat.numel(), self.dim()), torch.int64, self.device)
    divisor = 1
    for d in range(self.dim() - 1, -1, -1):
        if flat.numel():
            _coordinate(flat, divisor=divisor, size=self.size(d), out=result[:, d])
        divisor *= self.size(d)
    return result


@aten_op("nonzero")
def nonzero(self: torch.Tensor) -> Any:
    """(n, ndim) int64 indices of the nonzero elements, row-major."""
    result = _nonzero(self)
    return NotImplemented if result is None else result


@aten_op("nonzero.out")
def nonzero_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    if out.dtype != torch.int64:
        return NotImplemented  # ATen raises: expected out tensor to have scalar type Long
    result = _nonzero(self)
    return NotImplemented if result is None else write_out(out, result)
