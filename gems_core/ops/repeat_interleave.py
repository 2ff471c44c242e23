"""repeat_interleave with a tensor of repeats (``repeat_interleave.Tensor`` and its out=):
``[0] * repeats[0] + [1] * repeats[1] + ...``, in the repeats' dtype, as in
``torch.repeat_interleave(x, counts, dim)`` (whose composite then indexes with it) and
sequence-length bookkeeping (``cu_seqlens``).

The running sums of the repeats (cumsum.py's kernel) are the ends of the runs; output
position ``k`` holds the number of ends at or before it, found by a binary search in the
kernel. The total (the last end) is read back to size the result, and the smallest repeat
to refuse a negative one, as ATen does on the host; in compile-only execution, where no
kernel runs, the total stands in as the size the caller gives (``output_size`` or ``out``),
else one per repeat (masked.read_back). Repeats that are not a 1-d int32/int64 tensor,
negative ones and an ``output_size`` other than the total are handed to ATen, which raises.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..host_math import cdiv
from ..launch_cache import LaunchCache
from ..registry import aten_op
from .argmin import amin
from .cumsum import cumsum
from .factory import FACTORY
from .kernel_gates import leaves_to_aten
from .kernel_lib import program_offsets
from .masked import read_back, sized_result

_INT32 = 2**31 - 1


@triton.jit
def _runs_kernel(
    ends_ptr,  # (n,) int64: inclusive running sums of the repeats
    out_ptr,  # (total,) contiguous
    n,
    total,
    steps,  # binary search steps: enough for n + 1 candidates
    INT64: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # out[k] = the number of ends <= k: the first run whose end lies past k
    k = program_offsets(BLOCK_SIZE, INT64).to(tl.int64)
    mask = k < total
    lo = tl.zeros((BLOCK_SIZE,), tl.int64)
    hi = tl.full((BLOCK_SIZE,), n, tl.int64)
    for _ in range(steps):
        open_range = lo < hi
        mid = (lo + hi) // 2
        end = tl.load(ends_ptr + mid, mask=mask & open_range, other=0)
        past = open_range & (end <= k)
        lo = tl.where(past, mid + 1, lo)
        hi = tl.where(open_range & ~past, mid, hi)
    tl.store(out_ptr + k, lo.to(out_ptr.dtype.element_ty), mask=mask)


_runs = LaunchCache(_runs_kernel, name="repeat_interleave")


def _runs_into(repeats: torch.Tensor, output_size: int | None, out: torch.Tensor | None) -> Any:
    if (repeats.dim() != 1 or repeats.dtype not in (torch.int32, torch.int64)
            or leaves_to_aten("cumsum", repeats.dtype) or leaves_to_aten("amin", repeats.dtype)):
        return NotImplemented
    n = repeats.numel()
    if n and read_back(amin(repeats), 0) < 0:
        return NotImplemented  # ATen raises: repeats can not be negative
    ends = cumsum(repeats, 0, dtype=torch.int64) if n else None
    expected = output_size if output_size is not None else out.numel() if out is not None else n
    total = read_back(ends[-1], expected) if ends is not None else 0
    if output_size is not None and output_size != total:
        return NotImplemented  # ATen raises: allocated size does not match required size
    if out is None:
        out = sized_result(total, repeats.dtype, repeats.device)
    elif out.shape != (total,) or out.dtype != repeats.dtype or not out.is_contiguous():
        return NotImplemented  # ATen resizes or raises
    if total:
        config = FACTORY.choose("arange")
        _runs(
            (cdiv(total, config.params["BLOCK_SIZE"]),), ends, out, n, total, n.bit_length() + 1,
            config=config, options=FACTORY.options(), INT64=total > _INT32,
        )
    return out


@aten_op("repeat_interleave.Tensor")
def repeat_interleave(repeats: torch.Tensor, *, output_size: int | None = None) -> Any:
    """Each index ``i`` repeated ``repeats[i]`` times, in order."""
    return _runs_into(repeats, output_size, None)


@aten_op("repeat_interleave.Tensor_out")
def repeat_interleave_out(repeats: torch.Tensor, *, output_size: int | None = None, out: torch.Tensor) -> Any:
    return _runs_into(repeats, output_size, out)
