"""masked_scatter (in place, functional and out=): the elements of ``self`` where ``mask``
holds (``mask`` broadcast to ``self``), in row-major order, replaced by the leading
elements of ``source``.

The k-th selected position takes ``source``'s k-th element (row-major): the positions are
compacted by masked.py's count/scan/write kernels (which read the count back once, to check
that ``source`` has enough elements, as ATen does), then written by index_put_'s scatter
kernel. A non-contiguous ``self`` is scattered through a contiguous copy. A non-bool mask,
dtypes or devices that differ, shapes that do not broadcast, and a ``source`` too short are
handed to ATen, which raises.
"""

from __future__ import annotations

from typing import Any

import torch

from ..codegen.layout import broadcast_shapes
from ..registry import aten_op
from .copying import copy_into, may_overlap_itself, plain, spans_meet
from .indexing_more import index_put_
from .kernel_gates import leaves_to_aten
from .masked import NONZERO, compact


def _servable(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> bool:
    return (mask.dtype == torch.bool and source.dtype == self.dtype and plain(self) and plain(source)
            and plain(mask) and mask.device == self.device == source.device
            and not leaves_to_aten("index_put_", self.dtype) and not leaves_to_aten("masked_select", torch.bool))


def _scatter_into(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> bool:
    """``self[mask] = source[:count]`` for ``mask`` of ``self``'s shape; False (nothing
    written) where ``source`` is too short."""
    flags = mask.contiguous().view(-1)
    index, _ = compact(flags, None, NONZERO, want_index=True)
    assert index is not None
    count = index.numel()
    if count > source.numel():
        return False
    if count:
        values = source.contiguous().view(-1)[:count]
        target = self if self.is_contiguous() else self.contiguous()
        served = index_put_(target.view(-1), [index], values)
        assert served is not NotImplemented
        if target is not self:
            copy_into(self, target)
    return True


@aten_op("masked_scatter_")
def masked_scatter_(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> Any:
    """``self`` with its elements where ``mask`` holds taken, in order, from ``source``."""
    if not _servable(self, mask, source) or may_overlap_itself(self):
        return NotImplemented
    try:
        full = mask.expand(self.shape)
    except RuntimeError:
        return NotImplemented  # ATen raises: mask not broadcastable to self
    if spans_meet(self, source) or not _scatter_into(self, full, source):
        return NotImplemented
    return self


def _functional(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor, out: torch.Tensor | None) -> Any:
    if not _servable(self, mask, source):
        return NotImplemented
    try:
        shape = broadcast_shapes([tuple(self.shape), tuple(mask.shape)])
    except RuntimeError:
        return NotImplemented
    start = self.expand(shape)
    if out is None:
        out = torch.empty(shape, dtype=self.dtype, device=self.device)  # contiguous, as ATen's
    elif (not plain(out) or tuple(out.shape) != shape or out.dtype != self.dtype or out.device != self.device
          or may_overlap_itself(out) or spans_meet(out, self) or spans_meet(out, source) or spans_meet(out, mask)):
        return NotImplemented
    if out.numel():
        copy_into(out, start)
    if not _scatter_into(out, mask.expand(shape), source):
        return NotImplemented
    return out


@aten_op("masked_scatter")
def masked_scatter(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> Any:
    """A copy of ``self`` (broadcast with ``mask``) scattered as masked_scatter_ does."""
    return _functional(self, mask, source, None)


@aten_op("masked_scatter.out")
def masked_scatter_out(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor, *, out: torch.Tensor) -> Any:
    return _functional(self, mask, source, out)
