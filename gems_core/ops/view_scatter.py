"""Writes through a view into a fresh tensor: the backward of select, slice and diagonal
(the gradient placed in zeros of the input's shape), diag_embed (``self`` on a diagonal of
zeros: diagonal's backward), and select_scatter, slice_scatter and diagonal_scatter (``src``
placed in a copy of ``self``), each with its out= form.

The fresh tensor is filled by gems' kernels (zeros: the fill kernel; a copy of ``self``, in
``self``'s layout as ATen's clone keeps it: the copy kernel) and the view taken with ATen's
own view op, so a bad dim or index raises ATen's error; the values are written by the copy
kernel. A source
whose shape is not the view's, or of another dtype or device, is handed to ATen (which
raises or converts as it does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..registry import aten_op
from .copying import copy_into, may_overlap_itself, plain, spans_meet
from .factory import zero_

View = Callable[[torch.Tensor], torch.Tensor]


def _write(base: torch.Tensor, view_of: View, src: torch.Tensor) -> torch.Tensor:
    view = view_of(base)
    if view.numel():
        copy_into(view, src)
    return base


def _servable(src: torch.Tensor, like: torch.Tensor | None, shape: Sequence[int], view_of: View) -> bool:
    """Whether gems writes ``src`` into ``view_of`` of a tensor of ``shape``: plain tensors
    of one dtype on one device, ``src`` of exactly the view's shape (ATen raises otherwise)."""
    if not plain(src) or (like is not None and (not plain(like) or like.dtype != src.dtype
                                                or like.device != src.device)):
        return False
    try:
        view = view_of(torch.empty(shape, dtype=src.dtype, device="meta"))
    except (IndexError, RuntimeError):
        return False  # a bad dim or index: ATen raises
    return tuple(view.shape) == tuple(src.shape)


def _backward(grad: torch.Tensor, sizes: Sequence[int], view_of: View, out: torch.Tensor | None) -> Any:
    """``view_of``'s backward: ``grad`` in zeros of ``sizes`` (into ``out`` when given)."""
    if not _servable(grad, out, sizes, view_of):
        return NotImplemented
    if out is not None:
        if tuple(out.shape) != tuple(sizes) or may_overlap_itself(out) or spans_meet(out, grad):
            return NotImplemented  # ATen resizes it (with its warning) or raises
    else:
        out = torch.empty(sizes, dtype=grad.dtype, device=grad.device)
    if zero_(out) is NotImplemented:
        return NotImplemented
    return _write(out, view_of, grad)


def _scatter(self: torch.Tensor, src: torch.Tensor, view_of: View, out: torch.Tensor | None) -> Any:
    """``src`` written into ``view_of`` of a copy of ``self`` (into ``out`` when given)."""
    if not plain(self) or not _servable(src, self, self.shape, view_of):
        return NotImplemented
    if out is not None:
        if (not plain(out) or out.shape != self.shape or out.dtype != self.dtype or out.device != self.device
                or may_overlap_itself(out) or spans_meet(out, self) or spans_meet(out, src)):
            return NotImplemented
    else:
        out = torch.empty_like(self)
    if out.numel():
        copy_into(out, self)
    return _write(out, view_of, src)


def _select(dim: int, index: int) -> View:
    return lambda t: t.select(dim, index)


def _slice(dim: int, start: int | None, end: int | None, step: int) -> View:
    return lambda t: torch.ops.aten.slice.Tensor(t, dim, start, end, step)


def _diagonal(offset: int, dim1: int, dim2: int) -> View:
    return lambda t: t.diagonal(offset, dim1, dim2)


@aten_op("select_backward")
def select_backward(grad_output: torch.Tensor, input_sizes: Sequence[int], dim: int, index: int) -> Any:
    """The gradient of ``select(dim, index)``: ``grad_output`` in zeros of ``input_sizes``."""
    return _backward(grad_output, input_sizes, _select(dim, index), None)


@aten_op("select_backward.out")
def select_backward_out(grad_output: torch.Tensor, input_sizes: Sequence[int], dim: int, index: int, *,
                        out: torch.Tensor) -> Any:
    return _backward(grad_output, input_sizes, _select(dim, index), out)


@aten_op("slice_backward")
def slice_backward(grad_output: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int, end: int,
                   step: int) -> Any:
    """The gradient of ``slice(dim, start, end, step)``."""
    return _backward(grad_output, input_sizes, _slice(dim, start, end, step), None)


@aten_op("slice_backward.out")
def slice_backward_out(grad_output: torch.Tensor, input_sizes: Sequence[int], dim: int, start: int, end: int,
                       step: int, *, out: torch.Tensor) -> Any:
    return _backward(grad_output, input_sizes, _slice(dim, start, end, step), out)


@aten_op("diagonal_backward")
def diagonal_backward(grad_output: torch.Tensor, input_sizes: Sequence[int], offset: int, dim1: int,
                      dim2: int) -> Any:
    """The gradient of ``diagonal(offset, dim1, dim2)``."""
    return _backward(grad_output, input_sizes, _diagonal(offset, dim1, dim2), None)


@aten_op("diagonal_backward.out")
def diagonal_backward_out(grad_output: torch.Tensor, input_sizes: Sequence[int], offset: int, dim1: int,
                          dim2: int, *, out: torch.Tensor) -> Any:
    return _backward(grad_output, input_sizes, _diagonal(offset, dim1, dim2), out)


@aten_op("select_scatter")
def select_scatter(self: torch.Tensor, src: torch.Tensor, dim: int, index: int) -> Any:
    """A copy of ``self`` with ``src`` in ``select(dim, index)``."""
    return _scatter(self, src, _select(dim, index), None)


@aten_op("select_scatter.out")
def select_scatter_out(self: torch.Tensor, src: torch.Tensor, dim: int, index: int, *, out: torch.Tensor) -> Any:
    return _scatter(self, src, _select(dim, index), out)


@aten_op("slice_scatter")
def slice_scatter(self: torch.Tensor, src: torch.Tensor, dim: int = 0, start: int | None = None,
                  end: int | None = None, step: int = 1) -> Any:
    """A copy of ``self`` with ``src`` in ``slice(dim, start, end, step)``."""
    return _scatter(self, src, _slice(dim, start, end, step), None)


@aten_op("slice_scatter.out")
def slice_scatter_out(self: torch.Tensor, src: torch.Tensor, dim: int = 0, start: int | None = None,
                      end: int | None = None, step: int = 1, *, out: torch.Tensor) -> Any:
    return _scatter(self, src, _slice(dim, start, end, step), out)


@aten_op("diagonal_scatter")
def diagonal_scatter(self: torch.Tensor, src: torch.Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Any:
    """A copy of ``self`` with ``src`` in ``diagonal(offset, dim1, dim2)``."""
    return _scatter(self, src, _diagonal(offset, dim1, dim2), None)


@aten_op("diagonal_scatter.out")
def diagonal_scatter_out(self: torch.Tensor, src: torch.Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1, *,
                         out: torch.Tensor) -> Any:
    return _scatter(self, src, _diagonal(offset, dim1, dim2), out)


def _embedded_sizes(self: torch.Tensor, offset: int, dim1: int, dim2: int) -> list[int] | None:
    """diag_embed's result shape: ``self``'s last dim becomes a square's diagonal at
    ``dim1``, ``dim2``; None for dims ATen rejects."""
    rank = self.dim() + 1
    if self.dim() == 0 or not (-rank <= dim1 < rank and -rank <= dim2 < rank) or dim1 % rank == dim2 % rank:
        return None
    low, high = sorted((dim1 % rank, dim2 % rank))
    sizes = list(self.shape[:-1])
    side = self.shape[-1] + abs(offset)
    sizes.insert(low, side)
    sizes.insert(high, side)
    return sizes


@aten_op("diag_embed")
def diag_embed(self: torch.Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Any:
    """Zeros with ``self``'s last dim on the ``offset`` diagonal of dims ``dim1``, ``dim2``."""
    sizes = _embedded_sizes(self, offset, dim1, dim2)
    return NotImplemented if sizes is None else _backward(self, sizes, _diagonal(offset, dim1, dim2), None)


@aten_op("diag_embed.out")
def diag_embed_out(self: torch.Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1, *, out: torch.Tensor) -> Any:
    sizes = _embedded_sizes(self, offset, dim1, dim2)
    return NotImplemented if sizes is None else _backward(self, sizes, _diagonal(offset, dim1, dim2), out)
