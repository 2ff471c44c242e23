"""roll (and roll.out): elements shifted along dims, wrapping around.

Rolling dim ``d`` by ``s`` (taken modulo its size) moves the block ``[0, n - s)`` to
``[s, n)`` and ``[n - s, n)`` to ``[0, s)``; rolling k dims at once moves the 2^k blocks
that combine those halves, each one strided copy (gems' copy kernel) straight from the
input into the contiguous result, with no intermediate tensor. Without dims the tensor is
rolled as one flat row-major vector (a non-contiguous input is made contiguous first), as
in ATen. Calls ATen rejects (shifts and dims of different lengths, a dim out of range) are
handed to it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch

from ..registry import aten_op
from .copying import copy_into, may_overlap_itself, plain, spans_meet


def _plan(self: torch.Tensor, shifts: Sequence[int], dims: Sequence[int]) -> list[tuple[int, int]] | None:
    """(dim, shift in [0, size)) for each rolled dim of non-zero shift; None where ATen raises."""
    if not plain(self) or not shifts:
        return None
    if not dims:
        if len(shifts) != 1:
            return None
        shift = shifts[0] % self.numel() if self.numel() else 0
        return [(0, shift)] if shift else []
    if len(shifts) != len(dims) or any(not -self.dim() <= d < self.dim() for d in dims):
        return None  # (a 0-d tensor has no dim to name)
    total: dict[int, int] = {}  # a dim named twice is rolled by the sum of its shifts
    for shift, dim in zip(shifts, dims):
        dim %= self.dim()
        total[dim] = total.get(dim, 0) + shift
    sizes = self.shape
    return [(dim, shift % sizes[dim]) for dim, shift in total.items() if sizes[dim] and shift % sizes[dim]]


def _roll_into(out: torch.Tensor, x: torch.Tensor, rolled: list[tuple[int, int]]) -> None:
    for halves in itertools.product((False, True), repeat=len(rolled)):
        src, dst = x, out
        for (dim, shift), wrapped in zip(rolled, halves):
            size = x.shape[dim]
            # wrapped: the last ``shift`` elements go to the front; else the rest go after them
            if wrapped:
                src, dst = src.narrow(dim, size - shift, shift), dst.narrow(dim, 0, shift)
            else:
                src, dst = src.narrow(dim, 0, size - shift), dst.narrow(dim, shift, size - shift)
        copy_into(dst, src)


def _roll(self: torch.Tensor, shifts: Sequence[int], dims: Sequence[int], out: torch.Tensor) -> torch.Tensor:
    rolled = _plan(self, shifts, dims)
    assert rolled is not None
    if self.numel() == 0:
        return out
    if not rolled:
        copy_into(out, self)
    elif dims:
        _roll_into(out, self, rolled)
    else:  # one flat row-major vector
        flat = self
        if not self.is_contiguous():
            flat = torch.empty(self.shape, dtype=self.dtype, device=self.device)
            copy_into(flat, self)
        _roll_into(out.view(-1), flat.view(-1), rolled)
    return out


@aten_op("roll")
def roll(self: torch.Tensor, shifts: Sequence[int], dims: Sequence[int] = ()) -> Any:
    """``self`` with its elements shifted by ``shifts`` along ``dims`` (flat if none), wrapping."""
    if _plan(self, shifts, dims) is None:
        return NotImplemented
    return _roll(self, shifts, dims, torch.empty(self.shape, dtype=self.dtype, device=self.device))


@aten_op("roll.out")
def roll_out(self: torch.Tensor, shifts: Sequence[int], dims: Sequence[int] = (), *, out: torch.Tensor) -> Any:
    if (_plan(self, shifts, dims) is None or not plain(out) or out.shape != self.shape or out.dtype != self.dtype
            or out.device != self.device or not out.is_contiguous() or may_overlap_itself(out)
            or spans_meet(out, self)):
        return NotImplemented  # ATen resizes, converts or raises
    return _roll(self, shifts, dims, out)
