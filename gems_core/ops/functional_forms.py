"""The functional and out= forms of fill_ and index_put_: the in-place op applied to a new
tensor (or ``out``) instead of ``self``.

fill writes the value into a tensor laid out like ``self`` (ATen's empty_like) with gems'
fill kernel; index_put copies ``self`` (its layout kept, as ATen's clone keeps it) with the
copy kernel, then scatters with index_put_'s kernel. Whatever the in-place op leaves to ATen
(index forms it does not serve, dtypes) leaves the whole call to ATen, before anything is
written; so does an ``out`` of another shape, dtype or device (ATen resizes or raises).
"""

from __future__ import annotations

from typing import Any

import torch

from ..registry import aten_op
from .copying import copy_into, may_overlap_itself, plain, spans_meet
from .factory import fill_, fill_tensor_
from .indexing_more import index_put_
from .kernel_gates import leaves_to_aten


def _fresh(self: torch.Tensor, out: torch.Tensor | None, *inputs: torch.Tensor) -> torch.Tensor | None:
    """``out`` if it can take the result (``self``'s shape, dtype and device, apart from the
    inputs), a new tensor laid out like ``self`` without it; None where ATen must answer."""
    if not plain(self):
        return None
    if out is None:
        return torch.empty_like(self)
    if (not plain(out) or out.shape != self.shape or out.dtype != self.dtype or out.device != self.device
            or may_overlap_itself(out) or any(spans_meet(out, t) for t in (self, *inputs))):
        return None
    return out


def _fill(self: torch.Tensor, value: Any, out: torch.Tensor | None) -> Any:
    if isinstance(value, torch.Tensor) and (value.dim() != 0 or value.device.type != "cpu"):
        return NotImplemented  # ATen raises, or copies a device value without a host round trip
    target = _fresh(self, out)
    if target is None or leaves_to_aten("fill_", self.dtype):
        return NotImplemented
    done = fill_tensor_(target, value) if isinstance(value, torch.Tensor) else fill_(target, value)
    return NotImplemented if done is NotImplemented else target


@aten_op("fill.Scalar", "fill.Tensor")
def fill(self: torch.Tensor, value: Any) -> Any:
    """A tensor like ``self`` holding ``value`` everywhere."""
    return _fill(self, value, None)


@aten_op("fill.Scalar_out", "fill.Tensor_out")
def fill_out(self: torch.Tensor, value: Any, *, out: torch.Tensor) -> Any:
    return _fill(self, value, out)


def _index_put(self: torch.Tensor, indices: list[torch.Tensor | None], values: torch.Tensor, accumulate: bool,
               out: torch.Tensor | None) -> Any:
    if leaves_to_aten("index_put_", self.dtype):
        return NotImplemented
    tensors = [t for t in indices if t is not None]
    target = _fresh(self, out, values, *tensors)
    if target is None:
        return NotImplemented
    if target.numel():
        copy_into(target, self)
    return index_put_(target, indices, values, accumulate)


@aten_op("index_put")
def index_put(self: torch.Tensor, indices: list[torch.Tensor | None], values: torch.Tensor,
              accumulate: bool = False) -> Any:
    """A copy of ``self`` with ``values`` put (or added) at ``indices``."""
    return _index_put(self, indices, values, accumulate, None)


@aten_op("index_put.out")
def index_put_out(self: torch.Tensor, indices: list[torch.Tensor | None], values: torch.Tensor,
                  accumulate: bool = False, *, out: torch.Tensor) -> Any:
    return _index_put(self, indices, values, accumulate, out)
