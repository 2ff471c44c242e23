"""Cases for gems_core/ops/shape.py: flip, repeat, tile and constant_pad_nd.

Every layout is flipped along one dim, both dims and none; repeated with a new leading dim
and zero repeats; padded on one side, both, and cropped by negative amounts.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .. import samples
from ..cases import OpCase, register
from ..samples import Sample


def _layouts(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[tuple[str, torch.Tensor]]:
    for n, shape in enumerate(samples.SHAPES[profile]):
        yield from samples.layouts(shape, dtype, device, seed=100 * n)


def flip_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for label, x in _layouts(dtype, device, profile):
        for dims in ((0,), (-1, 0), ()):
            yield Sample(label, (x, dims))
    yield Sample("3-d", (samples.make_tensor((3, 4, 5), dtype, device, 3).transpose(0, 1), (0, 2)))
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 5), (1,)))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 7), (0,)))


def repeat_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for label, x in _layouts(dtype, device, profile):
        yield Sample(label, (x, (2, 3)))
        yield Sample(label, (x, (2, 1, 2)))
    yield Sample("zero repeats", (samples.make_tensor((3, 4), dtype, device, 3), (0, 2)))
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 5), (2, 2)))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 7), (3,)))


register(OpCase("flip", ("flip",), lambda x, dims: torch.flip(x, dims), flip_samples,
                samples.ALL_DTYPES, compare="exact"))
register(OpCase("repeat", ("repeat",), lambda x, r: x.repeat(r), repeat_samples,
                samples.ALL_DTYPES, compare="exact"))
register(OpCase("tile", ("repeat",), lambda x, r: torch.tile(x, r[1:]), repeat_samples,
                (torch.float32, torch.int64), compare="exact"))


def pad_samples(dtype: torch.dtype, device: torch.device | str, profile: str) -> Iterator[Sample]:
    for label, x in _layouts(dtype, device, profile):
        yield Sample(label, (x, (1, 2)))
        yield Sample(label, (x, (0, 0, 2, 1)))
        yield Sample(label, (x, (-1, 3, 1, -2)))
    yield Sample("3-d", (samples.make_tensor((3, 4, 5), dtype, device, 3), (1, 1, 0, 0, 2, 0)))
    yield Sample("empty", (samples.make_tensor((0, 3), dtype, device, 5), (1, 1)))
    yield Sample("0-d", (samples.make_tensor((), dtype, device, 7), ()))


def _pad_value(x: torch.Tensor) -> object:
    return True if x.dtype == torch.bool else (2.5 if x.is_floating_point() else -3 if x.dtype != torch.uint8 else 3)


register(OpCase("constant_pad_nd", ("constant_pad_nd",),
                lambda x, pad: torch.constant_pad_nd(x, pad, _pad_value(x)), pad_samples,
                samples.ALL_DTYPES, compare="exact"))
register(OpCase("pad_zero", ("constant_pad_nd",),
                lambda x, pad: torch.nn.functional.pad(x, pad), pad_samples,
                (torch.float32, torch.float16, torch.int32), compare="exact"))
