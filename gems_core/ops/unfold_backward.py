"""unfold_backward (and its out= overload): the gradient of ``Tensor.unfold``.

``x.unfold(dim, size, step)`` views windows ``w`` of ``x`` along ``dim``, each the elements
``[w * step, w * step + size)``, as a new last dim. Its gradient sums each window's gradient
back onto the elements it viewed: windows overlap where ``step < size`` (an element gathers
up to ``ceil(size / step)`` of them), leave gaps where ``step > size`` (zeros there) and may
leave a tail after the last window (zeros too). Each program gathers, for its output
elements, the windows that cover them: every element is written once, without atomics, and
``grad_in`` is read through its strides (seen as (outer, windows, inner, size), copied only
where its dims cannot be merged so).

Floating dtypes; the others go to ATen. Arguments ATen rejects (a dim out of range, a step
below 1, a negative size) are handed to it; a ``grad_in`` whose shape does not match the
windows of ``input_sizes`` raises a RuntimeError here (ATen does not check it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from ..codegen.pointwise import TL_DTYPES
from ..host_math import cdiv
from ..launch_cache import LaunchCache
from ..registry import aten_op
from .copying import may_overlap_itself, plain, spans_meet
from .reduction import acc_dtype

_BLOCK = 1024  # output elements per program
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def _unfold_backward_kernel(
    grad_ptr,  # (outer, windows, inner, size) strided: the gradient of the windows
    out_ptr,  # (outer, length, inner) contiguous: the input's gradient
    numel,
    length,
    inner,
    windows,
    size,
    step,
    cover,  # the most windows one element lies in: ceil(size / step)
    stride_outer,
    stride_window,
    stride_inner,
    stride_offset,
    BLOCK: tl.constexpr,
    ACC: tl.constexpr,  # float64 for float64 data, else float32
):
    # out[o, p, i] = sum over w with w * step <= p < w * step + size of grad[o, w, i, p - w * step]
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < numel
    i = idx % inner
    pos = (idx // inner) % length  # along dim
    o = idx // (inner * length)
    last = tl.minimum(pos // step, windows - 1)  # the last window starting at or before pos
    base = grad_ptr + o * stride_outer + i * stride_inner
    acc = tl.zeros((BLOCK,), ACC)
    for k in range(0, cover):
        w = last - k
        offset = pos - w * step  # >= 0: w starts at or before pos
        take = mask & (w >= 0) & (offset < size)
        acc += tl.load(base + w * stride_window + offset * stride_offset, mask=take, other=0.0).to(ACC)
    tl.store(out_ptr + idx, acc.to(out_ptr.dtype.element_ty), mask=mask)


_launch = LaunchCache(_unfold_backward_kernel, name="unfold_backward")


def _geometry(grad_in: torch.Tensor, input_sizes: Sequence[int], dim: int, size: int,
              step: int) -> tuple[int, int, int, int] | None:
    """(outer, length, inner, windows) of the input, or None where ATen must answer."""
    rank = len(input_sizes)
    if grad_in.dtype not in _FLOATS or not plain(grad_in) or step < 1 or size < 0:
        return None
    if not -max(rank, 1) <= dim < max(rank, 1):
        return None  # ATen's IndexError
    sizes = [int(s) for s in input_sizes] or [1]  # a 0-d input unfolds as one element
    dim %= len(sizes)
    length = sizes[dim]
    windows = (length - size) // step + 1 if rank and size <= length else 1
    expected = (*sizes[:dim], windows, *sizes[dim + 1:], size) if rank else (size,)
    if size > length or tuple(grad_in.shape) != expected:
        raise RuntimeError(f"unfold_backward: grad_in of shape {list(grad_in.shape)} is not the gradient of "
                           f"unfold({dim}, {size}, {step}) of a tensor of shape {list(input_sizes)}")
    return math.prod(sizes[:dim]), length, math.prod(sizes[dim + 1:]), windows


def _unfold_backward_into(out: torch.Tensor, grad_in: torch.Tensor, geometry: tuple[int, int, int, int],
                          size: int, step: int) -> torch.Tensor:
    outer, length, inner, windows = geometry
    numel = outer * length * inner
    if numel == 0:
        return out
    grad = grad_in.reshape(outer, windows, inner, size)  # a view unless the dims cannot merge
    _launch((cdiv(numel, _BLOCK),), grad, out, numel, length, inner, windows, size, step, cdiv(size, step),
            *grad.stride(), BLOCK=_BLOCK, ACC=TL_DTYPES[acc_dtype(grad_in.dtype)])
    return out


@aten_op("unfold_backward")
def unfold_backward(grad_in: torch.Tensor, input_sizes: Sequence[int], dim: int, size: int, step: int) -> Any:
    """The gradient of ``unfold(dim, size, step)`` for an input of ``input_sizes``: each
    element the sum of the window gradients that cover it."""
    geometry = _geometry(grad_in, input_sizes, dim, size, step)
    if geometry is None:
        return NotImplemented
    out = torch.empty([int(s) for s in input_sizes], dtype=grad_in.dtype, device=grad_in.device)
    return _unfold_backward_into(out, grad_in, geometry, size, step)


@aten_op("unfold_backward.out")
def unfold_backward_out(grad_in: torch.Tensor, input_sizes: Sequence[int], dim: int, size: int, step: int, *,
                        out: torch.Tensor) -> Any:
    geometry = _geometry(grad_in, input_sizes, dim, size, step)
    if (geometry is None or not plain(out) or tuple(out.shape) != tuple(int(s) for s in input_sizes)
            or out.dtype != grad_in.dtype or out.device != grad_in.device or not out.is_contiguous()
            or may_overlap_itself(out) or spans_meet(out, grad_in)):
        return NotImplemented  # ATen resizes, converts or raises
    return _unfold_backward_into(out, grad_in, geometry, size, step)
