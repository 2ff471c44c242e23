"""copy_ (``self[...] = src``: broadcast, any strides, any dtype conversion) and cat.

Both are the generated elementwise identity (codegen.pointwise) writing through the
destination's strides: copy_ into ``self`` (which also serves clone, contiguous and
same-device ``to``), cat into each input's slice of the output, one launch per non-empty
input. Values convert as ATen's C++ casts convert them: a float reaches uint8 through int64
(ATen's cast there, which wraps negative values rather than leaving them undefined), and
every other dtype reaches float16/bfloat16 through float32 (c10's Half and BFloat16 are built
from a float), so a float64 or int64 source is rounded twice exactly where ATen rounds it
twice (an int32/int64 source through a kernel the compiler cannot fold into one rounding).
A float8 side converts through its bytes (float8.py).

Handed to ATen (which raises where it raises): operands on different devices, except a 0-d
CPU source, whose value is read on the host and written by the fill kernel; complex and
other dtypes; conj/neg views and zero tensors; a destination whose elements may share memory;
a source whose memory meets the destination's, unless both are the same view (a no-op, as in
ATen); and any cat whose arguments ATen rejects.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl  # noqa: F401 - the interpreter wants it among a kernel's globals

from ..codegen.layout import max_offset
from ..codegen.overlap import assert_no_internal_overlap, assert_no_partial_overlap
from ..codegen.pointwise import TL_DTYPES, pointwise
from ..launch_cache import recording
from ..plan_cache import PlanCache, signature
from ..registry import aten_op
from .factory import fill_tensor
from .float8 import FLOAT8_DTYPES, convert

_HALVES = (torch.float16, torch.bfloat16)
#: integer dtypes whose values float32 does not hold exactly
_WIDE_INTEGERS = (torch.int32, torch.int64)


@pointwise(kind="NO_OPMATH")
@triton.jit
def _identity(x):
    # loaded in the computation dtype, stored in the destination's
    return x


@pointwise(kind="NO_OPMATH", extras=("zero",))
@triton.jit
def _kept_float32(x, zero):
    # x + 0.0, the zero a runtime argument: MLIR's canonicalizer rewrites
    # truncf(sitofp(i)) into one sitofp straight to the narrow type (one rounding, where
    # ATen rounds to float32 first); an add it cannot see through keeps both roundings
    # (exact for an integer's value: it is never -0.0)
    return x + zero


def plain(t: torch.Tensor) -> bool:
    """A strided tensor of a dtype gems moves, with no lazy conj/neg bit or zero storage."""
    return (t.dtype in TL_DTYPES and t.layout == torch.strided and not t.is_conj()
            and not t.is_neg() and not t._is_zerotensor())


def _via(src: torch.dtype, dst: torch.dtype) -> torch.dtype:
    """The dtype a value passes through on its way from ``src`` to ``dst``, as in ATen."""
    if dst in _HALVES and src != dst:
        return torch.float32
    if dst == torch.uint8 and src.is_floating_point:
        return torch.int64
    return src


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst[...] = src`` for ``src`` of ``dst``'s shape (expanded where broadcast) on its
    device, converted as ATen converts; ``dst`` must not overlap itself or ``src``."""
    if dst.dtype in FLOAT8_DTYPES or src.dtype in FLOAT8_DTYPES:
        convert(dst, src)
    elif dst.dtype in _HALVES and src.dtype in _WIDE_INTEGERS:
        _kept_float32(src, out=dst, dtype=dst.dtype, compute_dtype=torch.float32, zero=0.0)
    else:
        _identity(src, out=dst, dtype=dst.dtype, compute_dtype=_via(src.dtype, dst.dtype))


def dense_copy(t: torch.Tensor) -> torch.Tensor:
    """A new contiguous tensor equal to ``t``, written by gems' copy kernel: an allocation and
    a launch that the native layer's recorder sees and repeats, where ``.contiguous()`` or a
    ``reshape`` that copies would be a dispatcher call of its own (a buffer the recording
    does not own: such a call is never replayed)."""
    dense = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    copy_into(dense, t)
    return dense


def dense(t: torch.Tensor) -> torch.Tensor:
    """``t.contiguous()``: ``t`` itself where it is contiguous, else a :func:`dense_copy`."""
    return t if t.is_contiguous() else dense_copy(t)


def flattened(t: torch.Tensor) -> torch.Tensor:
    """``t.reshape(-1)``: a view where the strides allow one, else a :func:`dense_copy`."""
    try:
        return t.view(-1)
    except RuntimeError:
        return dense_copy(t).view(-1)


def may_overlap_itself(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` may share memory: False only where the strides prove
    they cannot (each dim, by increasing stride, steps past everything the smaller ones reach)."""
    reach = 0
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride()) if s > 1):
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """[first, last) addresses of the bytes non-empty ``t``'s elements occupy."""
    start = t.data_ptr()
    return start, start + (max_offset(t.shape, t.stride()) + 1) * t.element_size()


def spans_meet(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory spans of ``a`` and ``b`` (both non-empty) intersect."""
    if a.numel() == 0 or b.numel() == 0:
        return False
    a_start, a_end = _byte_span(a)
    b_start, b_end = _byte_span(b)
    return a_start < b_end and b_start < a_end


def _same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.shape == b.shape
            and a.stride() == b.stride())


def _copy_host_scalar(self: torch.Tensor, src: torch.Tensor) -> Any:
    """``self[...] = src`` for a 0-d CPU ``src`` and ``self`` on the device: the value is
    converted on the host by ATen's own CPU cast (exact) and written by the fill kernel."""
    if may_overlap_itself(self):
        return NotImplemented
    return fill_tensor(self, src.to(self.dtype).item())


def _copyable(t: torch.Tensor) -> bool:
    """plain, or a float8 tensor whose bytes are (float8.py converts them)."""
    return plain(t.view(torch.uint8) if t.dtype in FLOAT8_DTYPES else t)


@aten_op("copy_", foreign=True)
def copy_(self: torch.Tensor, src: Any, non_blocking: bool = False) -> Any:
    """``self[...] = src``, ``src`` broadcast to ``self``'s shape and converted to its dtype."""
    if not isinstance(src, torch.Tensor) or not _copyable(self) or not _copyable(src):
        return NotImplemented
    if src.device != self.device:
        if src.dim() == 0 and src.device.type == "cpu" and plain(self):
            return _copy_host_scalar(self, src)
        return NotImplemented  # transfers between devices are ATen's
    assert_no_internal_overlap(self)
    if may_overlap_itself(self):
        return NotImplemented  # layouts too hard to decide: ATen copies them its own way
    try:
        source = src if src.shape == self.shape else src.expand(self.shape)
    except RuntimeError:
        return NotImplemented  # ATen raises its broadcasting error
    assert_no_partial_overlap(self, (src,))
    if spans_meet(self, source):
        if _same_view(self, src):
            # nothing to do: no call for the native layer to repeat (a recipe of no launches
            # would skip the copy of a later call whose operands are apart)
            recording.impure = True
            return self
        return NotImplemented  # overlaps ATen finds too hard to decide: it copies them
    if recording.native is not None and self.is_contiguous():
        # into a contiguous tensor (a clone, a grouped-query attention's repeated keys and
        # values): the copy's numbers follow affinely from the sizes, as cat's
        recording.generic = []
    if self.numel():
        copy_into(self, source)
    return self


def _skipped(t: torch.Tensor) -> bool:
    # ATen's legacy rule: 1-d empty tensors take no part in cat's shape checks
    return t.dim() == 1 and t.numel() == 0


def _suggested_format(t: torch.Tensor) -> torch.memory_format:
    """ATen's ``suggest_memory_format`` of ``t``: channels-last for a 4-d (5-d) tensor whose
    strides grow from C through W (D), H to N, with its rules for ambiguous size-1 dims."""
    if t.dim() not in (4, 5):
        return torch.contiguous_format
    sizes, strides = t.shape, t.stride()
    if strides[1] == 0:
        return torch.contiguous_format
    floor = 0
    for d in (1, 3, 2, 0) if t.dim() == 4 else (1, 4, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < floor or (d == 0 and floor == strides[1]):
            return torch.contiguous_format
        floor = strides[d] * max(sizes[d], 1)
    return torch.channels_last if t.dim() == 4 else torch.channels_last_3d


def _cat_memory_format(tensors: Sequence[torch.Tensor]) -> torch.memory_format:
    """ATen's choice: the inputs' suggested memory format where they all agree, else
    contiguous."""
    chosen = None
    for t in tensors:
        layout = _suggested_format(t)
        if layout == torch.contiguous_format or (chosen is not None and layout != chosen):
            return torch.contiguous_format
        chosen = layout
    return chosen or torch.contiguous_format


class _CatLayout:
    """What a cat's call signature settles: the output's shape, strides, memory format and
    dtype, and the slice of the joined dim each non-empty input fills."""

    __slots__ = ("device", "dim", "dtype", "memory_format", "shape", "slices", "strides")

    def __init__(self, shape: list[int], dim: int, dtype: torch.dtype, device: torch.device,
                 memory_format: torch.memory_format, slices: list[tuple[int, int, int]]) -> None:
        self.shape = shape
        self.dim = dim
        self.dtype = dtype
        self.device = device
        self.memory_format = memory_format
        self.strides = torch.empty(shape, memory_format=memory_format, device="meta").stride()
        self.slices = slices  # (position in the inputs, start, length)

    def write(self, out: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
        for i, start, length in self.slices:
            copy_into(out.narrow(self.dim, start, length), tensors[i])

    def __call__(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        out = torch.empty_strided(self.shape, self.strides, dtype=self.dtype, device=self.device)
        self.write(out, tensors)
        return out


def _cat_layout(tensors: Sequence[torch.Tensor], dim: int) -> _CatLayout | None:
    """The layout of ``cat(tensors, dim)``, or None where ATen must answer (its arguments
    are bad: ATen raises)."""
    if not tensors:
        return None
    device = tensors[0].device
    if any(not plain(t) or t.device != device or t.dim() == 0 for t in tensors):
        return None
    dtype = functools.reduce(torch.promote_types, [t.dtype for t in tensors])
    kept = [i for i, t in enumerate(tensors) if not _skipped(t)]
    if not kept:
        return _CatLayout([0], 0, dtype, device, torch.contiguous_format, [])
    rank = tensors[kept[0]].dim()
    if not -rank <= dim < rank:
        return None
    dim %= rank
    shape = list(tensors[kept[0]].shape)
    slices = []
    offset = 0
    for i in kept:
        t = tensors[i]
        if t.dim() != rank or any(t.size(d) != shape[d] for d in range(rank) if d != dim):
            return None
        if t.numel():
            slices.append((i, offset, t.size(dim)))
        offset += t.size(dim)
    shape[dim] = offset
    return _CatLayout(shape, dim, dtype, device, _cat_memory_format(tensors), slices)


#: cat layouts by (dim, input signatures)
_cat_layouts = PlanCache("cat")


@aten_op("cat")
def cat(tensors: Sequence[torch.Tensor], dim: int = 0) -> Any:
    """The inputs joined along ``dim``, in their promoted dtype."""
    if not all(map(plain, tensors)):
        return NotImplemented  # (conj/neg bits are no part of a signature)
    key = (dim, *[signature(t) for t in tensors])
    layout = _cat_layouts.get(key)
    if layout is None:
        layout = _cat_layout(tensors, dim)
        if layout is None:
            return NotImplemented
        _cat_layouts.store(key, layout)
    if recording.native is not None and all(t.is_contiguous() for t in tensors):
        # contiguous inputs: the output's layout, each input's slice and its copy's numbers
        # follow affinely from the sizes, so one recipe serves a growing length (a KV cache's
        # cat at each decoding step; gems_core.native.recorder.learn)
        recording.generic = []
    return layout(tensors)


@aten_op("cat.out")
def cat_out(tensors: Sequence[torch.Tensor], dim: int = 0, *, out: torch.Tensor) -> Any:
    """cat into ``out`` (of a dtype the result casts to); an ``out`` of another shape is
    resized first, with ATen's warning where it held elements, in the layout cat would give."""
    layout = _cat_layout(tensors, dim)
    if (layout is None or not plain(out) or out.device != layout.device
            or not torch.can_cast(layout.dtype, out.dtype) or any(spans_meet(out, t) for t in tensors)):
        return NotImplemented  # ATen raises
    if list(out.shape) != layout.shape:
        if out.numel():
            warnings.warn(
                f"An output with one or more elements was resized since it had shape {list(out.shape)}, "
                f"which does not match the required output shape {layout.shape}.", UserWarning, stacklevel=2,
            )
        out.resize_(layout.shape, memory_format=layout.memory_format)
    if may_overlap_itself(out):
        return NotImplemented  # ATen raises where elements surely share memory
    layout.write(out, tensors)
    return out
