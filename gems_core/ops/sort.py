"""sort (stable or not, ascending or descending, along any dim) with its out= overloads;
argsort reaches it through ATen's composite.

A sort is a topk of the whole row (:mod:`.topk`): each entry becomes a 64-bit key, its
value's order high (NaN above +inf; complemented for an ascending sort, so NaN comes last
ascending and first descending, as in ATen) and its position low, so equal values keep their
index order: every sort is stable. One program sorts one row through the bitonic network of
:func:`.topk._best_keys`, its keys held in registers, and writes the values (read back from
the input by index) and the indices.

Rows longer than ``MAX_ROW`` entries, and 64-bit dtypes (whose order does not fit in the
key's 32 high bits), go to ATen. The network's cost grows with the row it holds: on an H100
(sorting 8 M elements in rows of n, float32 and bfloat16) gems took 0.18-0.66x ATen's time
for n = 128 to 512, and 1.5-3.3x for n = 1024 to 4096, where ATen's segmented sort wins.
"""

from __future__ import annotations

from typing import Any

import torch

from ..registry import aten_op
from .indexing import wrap_dim
from .masked import write_out
from .topk import _KEYED, _topk

#: the longest row one program sorts (its keys live in registers; longer rows are faster on ATen)
MAX_ROW = 512
_SORTABLE = (*_KEYED, torch.bool)  # bool through its bytes


def _sort(x: torch.Tensor, dim: int, descending: bool, values: Any = None, indices: Any = None) -> Any:
    if values is not None and (values.dtype != x.dtype or indices.dtype != torch.int64):
        return NotImplemented  # ATen raises for mismatched out dtypes
    dim = wrap_dim(dim, x.dim())
    if x.dtype not in _SORTABLE or (x.dim() and x.size(dim) > MAX_ROW):
        return NotImplemented
    size = x.size(dim) if x.dim() else 1
    if x.dtype != torch.bool:
        return _topk(x, size, dim, descending, values, indices)
    # bool sorts as its bytes (0 and 1)
    result = _topk(x.view(torch.uint8), size, dim, descending)
    result = result[0].view(torch.bool), result[1]
    return result if values is None else (write_out(values, result[0]), write_out(indices, result[1]))


@aten_op("sort")
def sort(self: torch.Tensor, dim: int = -1, descending: bool = False) -> Any:
    """(values, indices) of ``self`` sorted along ``dim``; equal values in index order."""
    return _sort(self, dim, descending)


@aten_op("sort.stable")
def sort_stable(self: torch.Tensor, *, stable: bool | None = None, dim: int = -1, descending: bool = False) -> Any:
    return _sort(self, dim, descending)


@aten_op("sort.values")
def sort_out(self: torch.Tensor, dim: int = -1, descending: bool = False, *, values: torch.Tensor,
             indices: torch.Tensor) -> Any:
    return _sort(self, dim, descending, values, indices)


@aten_op("sort.values_stable")
def sort_stable_out(self: torch.Tensor, *, stable: bool | None = None, dim: int = -1, descending: bool = False,
                    values: torch.Tensor, indices: torch.Tensor) -> Any:
    return _sort(self, dim, descending, values, indices)
