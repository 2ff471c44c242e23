"""Memory-overlap checks every writing kernel runs before it writes, as ATen's do.

A kernel that writes a tensor whose elements share memory (an expanded view), or that reads
an input partly overlapping what it writes, gives a result that depends on the order its
programs run in. ATen refuses both, with these errors; so does gems, with the same rules:

- internal overlap (``assert_no_internal_overlap``): an output with a stride-0 dim of size
  > 1, or any layout ATen's ``has_internal_overlap`` answers YES for;
- partial overlap (``assert_no_partial_overlap``): an output and an input that are both
  non-overlapping and dense, in the same memory, over ranges that intersect without being
  the same range with the same strides (that one, the in-place case, is allowed);
- any overlap (``assert_no_overlap``, for ops that cannot read and write the same memory at
  all, such as ``index_select``): the same, with the full overlap refused too.

Layouts ATen finds too hard to decide (strided views of one storage) pass, as they do there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

INTERNAL = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation."
)
PARTIAL = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to "
    "a single memory location. Please clone() the tensor before performing the operation."
)


def assert_no_internal_overlap(out: torch.Tensor) -> None:
    if torch._debug_has_internal_overlap(out) == 1:
        raise RuntimeError(INTERNAL)


def dense(t: torch.Tensor) -> bool:
    """ATen's ``is_non_overlapping_and_dense``: the elements fill a block, each once."""
    if t.is_contiguous():
        return True
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """Bytes [first, last + 1) any element of non-empty ``t`` can reach."""
    begin = t.data_ptr()
    if t.is_contiguous():
        return begin, begin + t.numel() * t.element_size()
    reach = sum([(size - 1) * stride for size, stride in zip(t.shape, t.stride())])
    return begin, begin + (reach + 1) * t.element_size()


def _status(out: torch.Tensor, t: torch.Tensor, out_extent: tuple[int, int] | None = None) -> str:
    """ATen's overlap status of two tensors: "no", "full", "partial" or "too hard"."""
    if not out.numel() or not t.numel() or out.device != t.device:
        return "no"
    out_begin, out_end = out_extent or _extent(out)
    begin, end = _extent(t)
    if not (out_begin < end and begin < out_end):
        return "no"  # the cheap answer for distinct memory, checked first
    if not (dense(out) and dense(t)):
        return "too hard"
    if (out_begin, out_end) == (begin, end):
        return "full" if out.stride() == t.stride() else "partial"
    return "partial"


def assert_no_partial_overlap(out: torch.Tensor, inputs: Iterable[Any]) -> None:
    extent = None
    for t in inputs:
        if isinstance(t, torch.Tensor) and t is not out:
            if extent is None:
                if not out.numel():
                    return
                extent = _extent(out)
            if _status(out, t, extent) == "partial":
                raise RuntimeError(PARTIAL)


def assert_no_overlap(out: torch.Tensor, inputs: Iterable[Any]) -> None:
    for t in inputs:
        if isinstance(t, torch.Tensor) and (t is out or _status(out, t) in ("partial", "full")):
            raise RuntimeError(PARTIAL)

