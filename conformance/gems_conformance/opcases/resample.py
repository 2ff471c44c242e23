"""Cases for gems_core/ops/resample.py: upsample nearest, nearest-exact and (bi/tri)linear
in 1, 2 and 3 spatial dims, and bicubic, through F.interpolate (forward, and backward
through autograd) and the out= and grad_input= overloads called directly.

Every input meets every layout (contiguous, transposed, sliced with a step, expanded,
channels_last for 4-d and 5-d) at four output sizes: twice the input (given as a scale), a
size with no integer ratio, a downscale, and a non-integer scale passed to the op (its
output size floored from it); plus an empty batch. The quick profile gives the 3-d ops and
the backward's cases contiguous and channels_last inputs only. Nearest forward copies elements, so it
compares exactly; nearest also meets special values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample

FLOATS = samples.FLOAT_DTYPES
ONE_DTYPE = (torch.float32, torch.float64)
#: (N, C, D, H, W) per profile; the spatial dims an op has are the last ones
SHAPES = {"quick": (2, 3, 3, 5, 7), "full": (4, 16, 9, 33, 65), "large": (8, 64, 3, 129, 257)}
#: (size, scale_factor) per sample: twice, no integer ratio, downscale, a scale passed on
RESIZES: tuple[tuple[Any, Any], ...] = ((None, 2.0), ("odd", None), (None, 0.6), (None, 1.7))
#: spatial dims -> the nearest, nearest-exact and linear overloads, and F.interpolate's linear mode
OPS = {
    1: ("upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_linear1d", "linear"),
    2: ("upsample_nearest2d", "_upsample_nearest_exact2d", "upsample_bilinear2d", "bilinear"),
    3: ("upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_trilinear3d", "trilinear"),
}


def _input_layouts(dims: int, dtype: torch.dtype, device: torch.device | str, profile: str,
                   every: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    shape = SHAPES[profile][:2] + SHAPES[profile][5 - dims:]
    # the quick profile's 3-d inputs: contiguous and channels_last only, as every dims' op
    # runs one kernel, which the 1-d and 2-d ops drive through every layout; the same for the
    # backward's cases (not ``every``): the backward reads the upstream gradient, and of the
    # input only its sizes and memory format
    if (dims < 3 and every) or profile != "quick":
        yield from samples.layouts(shape, dtype, device, seed=dims)
    else:
        yield "contiguous", samples.make_tensor(shape, dtype, device, dims)
    if dims > 1:
        fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
        yield "channels_last", samples.make_tensor(shape, dtype, device, 9).contiguous(memory_format=fmt)


def _resize_samples(dims: int, special: bool = False,
                    backward: bool = False) -> Callable[[torch.dtype, torch.device | str, str], Iterator[Sample]]:
    """(x, size, scale_factor): F.interpolate's arguments (``backward``: for a case of the
    backward, whose kernel the input's layout does not reach)."""

    def generate(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
        # the quick profile's 3-d backward: a size with no integer ratio and a scale passed
        # on (its kernel is the 1-d and 2-d ones', which meet every resize)
        resizes = RESIZES[1::2] if backward and dims == 3 and profile == "quick" else RESIZES
        for label, x in _input_layouts(dims, dtype, device, profile, every=not backward):
            for size, scale in resizes:
                odd = tuple(n * 3 // 2 + 1 for n in x.shape[2:]) if size == "odd" else None
                yield Sample(label, (x, odd, scale))
        empty = samples.make_tensor((0, 3) + (4,) * dims, dtype, device, 3)
        yield Sample("empty", (empty, None, 2.0))
        if special and dtype.is_floating_point:
            values = samples.special_values(dtype, device)
            yield Sample("special", (values.view((1, 1) + (1,) * (dims - 1) + (-1,)), None, 1.5))

    return generate


def _interpolate(mode: str, align: bool | None = None) -> Callable[..., torch.Tensor]:
    return lambda x, size, scale: F.interpolate(x, size=size, scale_factor=scale, mode=mode, align_corners=align)


def _through_autograd(forward: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``forward``'s input gradient for the upstream gradient ``ramp_like`` its output."""

    def call(x: torch.Tensor, *args: Any) -> torch.Tensor:
        x = x.detach().requires_grad_()
        y = forward(x, *args)
        (grad,) = torch.autograd.grad(y, x, samples.ramp_like(y))
        return grad

    return call


def _overload_args(x: torch.Tensor, size: Any, scale: Any) -> tuple[list[int], list[float | None]]:
    """The ATen overload's output_size and scales for F.interpolate's (size, scale_factor)."""
    dims = x.dim() - 2
    if size is not None:
        return list(size), [None] * dims
    return [int(n * scale) for n in x.shape[2:]], [scale] * dims


def _out_call(op: str, align: bool | None) -> Callable[..., torch.Tensor]:
    overload = getattr(torch.ops.aten, op).out
    extra = () if align is None else (align,)

    def call(x: torch.Tensor, size: Any, scale: Any) -> torch.Tensor:
        output_size, scales = _overload_args(x, size, scale)
        return overload(x, output_size, *extra, *scales, out=torch.empty(0, dtype=x.dtype, device=x.device))

    return call


def _grad_input_call(op: str, align: bool | None) -> Callable[..., torch.Tensor]:
    overload = getattr(torch.ops.aten, f"{op}_backward").grad_input
    extra = () if align is None else (align,)

    def call(x: torch.Tensor, size: Any, scale: Any) -> torch.Tensor:
        output_size, scales = _overload_args(x, size, scale)
        grad = samples.ramp_like(x.new_empty(list(x.shape[:2]) + output_size))
        out = torch.empty(0, dtype=x.dtype, device=x.device)
        return overload(grad, output_size, list(x.shape), *extra, *scales, grad_input=out)

    return call


def _length(dims: int, weighing: bool, reach: int) -> Callable[[Sample], int] | None:
    """The tolerance's scale. A backward element sums up to ``reach`` outputs per dim (the
    samples upscale at most 2x; 0: a forward). A linear or cubic weight carries the float32
    rounding of its source coordinate, which grows with the coordinate (up to the input's
    size), as ATen's float32 results do: the error of the weight times the input's size,
    squared for the table's square root."""
    if not weighing and not reach:
        return None
    return lambda sample: max(reach, 1) ** dims * (max(sample.args[0].shape[2:]) ** 2 if weighing else 1)


#: (case name, overload, F.interpolate mode, align_corners or None, spatial dims, backward reach)
MODES = [
    entry
    for dims, (nearest, exact, linear, mode) in OPS.items()
    for entry in (
        (f"nearest{dims}d", nearest, "nearest", None, dims, 2),
        (f"nearest_exact{dims}d", exact, "nearest-exact", None, dims, 2),
        (mode, linear, mode, False, dims, 3),
        (f"{mode}_align_corners", linear, mode, True, dims, 3),
    )
] + [("bicubic", "upsample_bicubic2d", "bicubic", False, 2, 8),
     ("bicubic_align_corners", "upsample_bicubic2d", "bicubic", True, 2, 8)]

for _name, _op, _kind, _align, _dims, _reach in MODES:
    _nearby = _align is None
    _samples = _resize_samples(_dims, special=_nearby)
    # every dtype on the 2-d ops; the 1-d and 3-d ones share their kernels
    _dtypes = (FLOATS + (torch.float64,) + ((torch.uint8,) if _nearby else ())) if _dims == 2 else ONE_DTYPE
    _grad_dtypes = FLOATS if _dims == 2 else (torch.float32,)
    _compare = {"compare": "exact"} if _nearby else {}
    _forward_length, _backward_length = _length(_dims, not _nearby, 0), _length(_dims, not _nearby, _reach)
    register(OpCase(f"upsample_{_name}", (_op,), _interpolate(_kind, _align), _samples, _dtypes,
                    reduction_length=_forward_length, **_compare))
    register(OpCase(f"upsample_{_name}_autograd", (_op, f"{_op}_backward"),
                    _through_autograd(_interpolate(_kind, _align)), _resize_samples(_dims, backward=True), _grad_dtypes,
                    reduction_length=_backward_length))
    if _align is not True:  # one out= and grad_input= case per overload
        register(OpCase(f"upsample_{_name}_out", (f"{_op}.out",), _out_call(_op, _align), _resize_samples(_dims),
                        (torch.float32,), reduction_length=_forward_length, **_compare))
        register(OpCase(f"upsample_{_name}_backward_grad_input", (f"{_op}_backward.grad_input",),
                        _grad_input_call(_op, _align), _resize_samples(_dims, backward=True), (torch.float32,),
                        reduction_length=_backward_length))
